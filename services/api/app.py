"""The snapshot API: current sessions, series and alerts from the view, without Spark.

Handlers answer from pre-validated canonical JSON (see :mod:`streamstate.api.records`)
spliced into the documented response shape, so a lookup costs a dict access and a few
byte joins whatever the view's size.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import FastAPI, HTTPException, Path, Query
from fastapi.responses import JSONResponse, Response
from fastapi.sse import EventSourceResponse, ServerSentEvent
from prometheus_client import CONTENT_TYPE_LATEST

from streamstate.api.broadcast import AlertBroadcaster
from streamstate.api.consumer import ViewFollower, source_topics
from streamstate.api.cursor import CURSOR_PATTERN, BadCursor, decode_cursor, encode_cursor
from streamstate.api.metrics import ApiMetrics, RequestMetricsMiddleware
from streamstate.api.models import (
    AlertList,
    Health,
    Problem,
    ReadinessReport,
    SeriesResponse,
    SessionPage,
    SessionResponse,
)
from streamstate.api.records import Source
from streamstate.api.view import StateView
from streamstate.settings import Settings

MAX_LIMIT = 1000
_NOT_FOUND = {404: {"model": Problem, "description": "No such key in the view."}}


class _Bodies:
    """Builds JSON response bodies around stored record bytes."""

    def __init__(self, settings: Settings, follower: ViewFollower):
        self._topics = source_topics(settings)
        self._follower = follower

    def freshness(self, source: Source, positions: dict[int, int]) -> bytes:
        offsets = {self._topics[source]: {str(p): o for p, o in sorted(positions.items())}}
        return json.dumps({"offsets": offsets, "caught_up": self._follower.readiness().ready}).encode()

    def respond(self, source: Source, positions: dict[int, int], *fields: bytes) -> Response:
        """A JSON object of the given ``"name":value`` fields plus the freshness of ``source``."""
        body = b"{" + b",".join((*fields, b'"freshness":' + self.freshness(source, positions))) + b"}"
        return Response(content=body, media_type="application/json")

    @staticmethod
    def array(items: list[bytes]) -> bytes:
        return b"[" + b",".join(items) + b"]"


def create_app(settings: Settings) -> FastAPI:
    """The API app; its lifespan starts the view follower and stops it on shutdown."""
    view = StateView(settings.api_max_alerts)
    metrics = ApiMetrics(view)
    broadcaster = AlertBroadcaster()
    follower = ViewFollower(settings, view, metrics, broadcaster)
    bodies = _Bodies(settings, follower)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        follower.start()
        try:
            yield
        finally:
            await asyncio.to_thread(follower.stop)

    app = FastAPI(
        title="streamstate snapshot API",
        version="0.1.0",
        description="Current per-user sessions, per-series statistics and recent alerts, rebuilt from the "
        "session-state, metric-state and alerts topics and followed live. Every answer carries the source "
        "offsets it reflects.",
        lifespan=lifespan,
        redirect_slashes=False,
    )
    app.add_middleware(RequestMetricsMiddleware, metrics=metrics)
    app.state.view, app.state.follower, app.state.metrics = view, follower, metrics

    @app.get("/healthz", response_model=Health, tags=["operations"], summary="Liveness: the process answers.")
    async def healthz() -> Health:
        return Health(status="ok")

    @app.get(
        "/readyz",
        response_model=ReadinessReport,
        tags=["operations"],
        summary="Readiness: 200 once the view has caught up with the end offsets seen at start.",
        responses={503: {"model": ReadinessReport, "description": "Catching up, or Kafka unreachable."}},
    )
    async def readyz() -> JSONResponse:
        report = follower.readiness()
        body = ReadinessReport(ready=report.ready, reason=report.reason, remaining=report.remaining)
        return JSONResponse(body.model_dump(), status_code=200 if report.ready else 503)

    @app.get(
        "/metrics",
        tags=["operations"],
        summary="Prometheus metrics.",
        response_class=Response,
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "Metrics."}},
    )
    async def prometheus_metrics() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    @app.get(
        "/sessions/{user_id}",
        response_model=SessionResponse,
        tags=["sessions"],
        summary="A user's open session and lifetime behaviour.",
        responses=_NOT_FOUND,
    )
    async def get_session(user_id: Annotated[str, Path(description="The user id.")]) -> Response:
        record, positions = view.session(user_id)
        if record is None:
            raise HTTPException(404, f"no session state for user {user_id!r}")
        active = b"true" if record.active else b"false"
        return bodies.respond(Source.SESSIONS, positions, b'"session":' + record.body, b'"active":' + active)

    @app.get(
        "/sessions",
        response_model=SessionPage,
        tags=["sessions"],
        summary="Sessions in user-id order, a page at a time.",
        responses={400: {"model": Problem, "description": "Malformed cursor."}},
    )
    async def list_sessions(
        active: Annotated[bool, Query(description="Only users with an open session.")] = False,
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Page size.")] = 100,
        cursor: Annotated[
            str | None,
            Query(
                description="The next_cursor of the previous page. Pages continue after a user id, so inserts "
                "and removals between requests never make a later page skip or repeat a user.",
                json_schema_extra={"pattern": CURSOR_PATTERN},
            ),
        ] = None,
    ) -> Response:
        try:
            after = decode_cursor(cursor) if cursor else None
        except BadCursor as exc:
            raise HTTPException(400, str(exc)) from None
        page, positions = view.sessions(after, limit, active)
        next_cursor = json.dumps(encode_cursor(page.last_key) if page.last_key is not None else None).encode()
        return bodies.respond(
            Source.SESSIONS, positions, b'"items":' + bodies.array(page.items), b'"next_cursor":' + next_cursor
        )

    @app.get(
        "/series/{series_id}",
        response_model=SeriesResponse,
        tags=["series"],
        summary="A series' rolling statistics and last anomaly.",
        responses=_NOT_FOUND,
    )
    async def get_series(series_id: Annotated[str, Path(description="The series id.")]) -> Response:
        record, positions = view.series(series_id)
        if record is None:
            raise HTTPException(404, f"no state for series {series_id!r}")
        return bodies.respond(Source.SERIES, positions, b'"series":' + record.body)

    @app.get(
        "/alerts",
        response_model=AlertList,
        tags=["alerts"],
        summary="Recent alerts, newest first, one per alert id.",
    )
    async def list_alerts(
        kind: Annotated[str | None, Query(description="Only this kind (bot_burst, anomaly, ...).")] = None,
        entity: Annotated[str | None, Query(description="Only alerts about this user or series id.")] = None,
        since: Annotated[int | None, Query(ge=0, description="Only alerts with event time ts >= since (epoch ms).")] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="At most this many alerts.")] = 100,
    ) -> Response:
        items, positions = view.alerts(kind, entity, since, limit)
        return bodies.respond(Source.ALERTS, positions, b'"items":' + bodies.array(items))

    @app.get(
        "/alerts/stream",
        response_class=EventSourceResponse,
        tags=["alerts"],
        summary="Server-sent events: each new alert (event `alert`, JSON data, id = alert_id) as it arrives.",
    )
    async def stream_alerts(
        kind: Annotated[str | None, Query(description="Only this kind.")] = None,
        entity: Annotated[str | None, Query(description="Only alerts about this entity.")] = None,
    ) -> AsyncIterator[ServerSentEvent]:
        async with broadcaster.subscribe(kind, entity) as subscription:
            metrics.sse_clients.inc()
            try:
                yield ServerSentEvent(comment="subscribed")
                while True:
                    try:
                        alert = await asyncio.wait_for(subscription.queue.get(), settings.api_sse_keepalive_s)
                    except TimeoutError:
                        yield ServerSentEvent(comment="keep-alive")
                        continue
                    if alert is None:
                        yield ServerSentEvent(comment="too far behind: reconnect")
                        return
                    yield ServerSentEvent(raw_data=alert.body.decode(), event="alert", id=alert.alert_id)
            finally:
                metrics.sse_clients.dec()

    return app
