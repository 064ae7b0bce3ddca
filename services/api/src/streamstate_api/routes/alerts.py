"""``/alerts``: recent alerts with filters, and the live stream of new ones (server-sent events).

How many streams may be open at once is enforced in front of the router
(:class:`streamstate_api.limits.StreamLimit`), so a refused stream never starts.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import Response
from fastapi.sse import EventSourceResponse, ServerSentEvent

from streamstate_api.deps import ContextDep
from streamstate_api.models import AlertList, Problem
from streamstate_api.record_contracts import Source
from streamstate_api.routes.sessions import MAX_LIMIT

STREAM_PATH = "/alerts/stream"

router = APIRouter(tags=["alerts"])


@router.get("/alerts", response_model=AlertList, summary="Recent alerts, newest first, one per alert id.")
async def list_alerts(
    api: ContextDep,
    kind: Annotated[str | None, Query(description="Only this kind (bot_burst, anomaly, ...).")] = None,
    entity: Annotated[str | None, Query(description="Only alerts about this user or series id.")] = None,
    since: Annotated[int | None, Query(ge=0, description="Only alerts with event time ts >= since (epoch ms).")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="At most this many alerts.")] = 100,
) -> Response:
    items, positions = api.view.alerts(kind, entity, since, limit)
    return api.responder.json(api.responder.body(Source.ALERTS, positions, b'"items":' + api.responder.array(items)))


@router.get(
    STREAM_PATH,
    response_class=EventSourceResponse,
    summary="Server-sent events: each new alert (event `alert`, JSON data, id = alert_id) as it arrives.",
    responses={429: {"model": Problem, "description": "Too many streams open (STREAMSTATE_API_MAX_STREAMS)."}},
)
async def stream_alerts(
    api: ContextDep,
    kind: Annotated[str | None, Query(description="Only this kind.")] = None,
    entity: Annotated[str | None, Query(description="Only alerts about this entity.")] = None,
) -> AsyncIterator[ServerSentEvent]:
    async with api.broadcaster.subscribe(kind, entity) as subscription:
        api.metrics.sse_clients.inc()
        try:
            yield ServerSentEvent(comment="subscribed")
            while True:
                try:
                    alert = await asyncio.wait_for(subscription.queue.get(), api.settings.api_sse_keepalive_s)
                except TimeoutError:
                    yield ServerSentEvent(comment="keep-alive")
                    continue
                if alert is None:
                    yield ServerSentEvent(comment="too far behind: reconnect")
                    return
                yield ServerSentEvent(raw_data=alert.body.decode(), event="alert", id=alert.alert_id)
        finally:
            api.metrics.sse_clients.dec()
