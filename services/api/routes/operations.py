"""Operations: liveness, readiness (with how far a rebuild is) and Prometheus metrics.
Always open, also when the data endpoints require a token: probes and scrapers carry none."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from streamstate.api.deps import ContextDep
from streamstate.api.models import Health, ReadinessReport

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health, summary="Liveness: the process answers.")
async def healthz() -> Health:
    return Health(status="ok")


@router.get(
    "/readyz",
    response_model=ReadinessReport,
    summary="Readiness: 200 once the view has caught up with the end offsets seen at start.",
    responses={503: {"model": ReadinessReport, "description": "Catching up (with progress), or Kafka unreachable."}},
)
async def readyz(api: ContextDep) -> JSONResponse:
    report = api.follower.readiness()
    body = ReadinessReport(ready=report.ready, reason=report.reason, remaining=report.remaining)
    return JSONResponse(body.model_dump(), status_code=200 if report.ready else 503)


@router.get(
    "/metrics",
    summary="Prometheus metrics.",
    response_class=Response,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "Metrics."}},
)
async def prometheus_metrics(api: ContextDep) -> Response:
    return Response(api.metrics.render(), media_type=CONTENT_TYPE_LATEST)
