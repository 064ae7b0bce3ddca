"""Operations: liveness (the process and its view follower), readiness (with how far a
rebuild is, or why the follower is stuck) and Prometheus metrics.
Open also when the data endpoints require a token (probes and scrapers carry none), except
/metrics when the operator has it publish series ids: then it names data, and asks for the
token like the data endpoints."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials
from prometheus_client import CONTENT_TYPE_LATEST

from streamstate_api.deps import ContextDep, require_token
from streamstate_api.models import Health, Problem, ReadinessReport

router = APIRouter(tags=["operations"])


@router.get(
    "/healthz",
    response_model=Health,
    summary="Liveness: the process answers and its view follower runs.",
    responses={503: {"model": Problem, "description": "The view follower thread has stopped: restart the API."}},
)
async def healthz(api: ContextDep) -> Response:
    # A follower thread that ended never comes back: only a restart makes the view follow again.
    stopped = api.follower.stopped()
    if stopped is not None:
        return JSONResponse({"detail": stopped}, status_code=503)
    return JSONResponse(Health(status="ok").model_dump())


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
async def prometheus_metrics(
    api: ContextDep, authorization: Annotated[str | None, Header(include_in_schema=False)] = None
) -> Response:
    if api.settings.api_metrics_series_ids:
        scheme, _, token = (authorization or "").partition(" ")
        await require_token(api, HTTPAuthorizationCredentials(scheme=scheme, credentials=token) if scheme.lower() == "bearer" else None)
    return Response(api.metrics.render(), media_type=CONTENT_TYPE_LATEST)
