"""The snapshot API: current sessions, series and alerts from the view, without Spark.

One router per resource (:mod:`streamstate_api.routes`), their shared collaborators in one
:class:`~streamstate_api.context.ApiContext` handed over as a dependency
(:mod:`streamstate_api.deps`). When ``api_token`` is set, the data routers require it; the
operations router (probes, metrics) stays open. A blank token is refused here
(:class:`~streamstate_pipeline.errors.ConfigurationError`), so the command stops with a message.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from streamstate_api.context import ApiContext
from streamstate_api.deps import TokenDep
from streamstate_api.fastpath import FastPath
from streamstate_api.limits import StreamLimit
from streamstate_api.metrics import RequestMetricsMiddleware
from streamstate_api.models import UNAUTHORIZED
from streamstate_api.routes import alerts, operations, series, sessions
from streamstate_api.store import StoreDamaged
from streamstate_pipeline.settings import Settings

VERSION = "0.1.0"
DESCRIPTION = (
    "Current per-user sessions, per-series statistics and recent alerts, kept in a local store fed by the "
    "session-state, metric-state and alerts topics. Every answer carries the source offsets it reflects."
)


def create_app(settings: Settings) -> FastPath:
    """The API as it is served: the read routes that carry the load answered in front of the
    FastAPI app (:class:`FastPath`, outside FastAPI's and Starlette's per-request layers), every
    other request by that app (``.app``), whose lifespan starts the view follower and stops it."""
    context = ApiContext.build(settings)
    app = FastAPI(
        title="streamstate snapshot API", version=VERSION, description=DESCRIPTION,
        lifespan=context.lifespan, redirect_slashes=False,
    )
    app.state.context = context
    app.add_exception_handler(StoreDamaged, _store_damaged)
    app.add_middleware(StreamLimit, path=alerts.STREAM_PATH, limit=settings.api_max_streams)
    app.add_middleware(RequestMetricsMiddleware, metrics=context.metrics)
    app.include_router(operations.router)
    # The token's security scheme appears in the OpenAPI document only when a token is required.
    guarded: dict[str, Any] = {"dependencies": [TokenDep], "responses": UNAUTHORIZED} if context.token is not None else {}
    for router in (sessions.router, series.router, alerts.router):
        app.include_router(router, **guarded)
    return FastPath(app, context)


async def _store_damaged(_: Request, exc: Exception) -> JSONResponse:
    # Not a 500: nothing is wrong with the request, and the store is being rebuilt (see /readyz).
    return JSONResponse({"detail": str(exc)}, status_code=503, headers={"retry-after": "5"})
