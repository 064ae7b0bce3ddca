"""``/series/{series_id}``: a metric series' rolling statistics and last anomaly.

:func:`series_body` builds the answer for the route and for the fast path
(:mod:`streamstate_api.fastpath`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path
from fastapi.responses import Response

from streamstate_api.context import ApiContext
from streamstate_api.deps import ContextDep
from streamstate_api.models import NOT_FOUND, SeriesResponse
from streamstate_api.record_contracts import Source

router = APIRouter(tags=["series"])


def series_body(api: ApiContext, series_id: str) -> bytes | None:
    record, positions = api.view.series(series_id)
    if record is None:
        return None
    return api.responder.body(Source.SERIES, positions, b'"series":' + record.body)


@router.get(
    "/series/{series_id:path}",
    response_model=SeriesResponse,
    summary="A series' rolling statistics and last anomaly.",
    responses=NOT_FOUND,
)
async def get_series(series_id: Annotated[str, Path(description="The series id.")], api: ContextDep) -> Response:
    body = series_body(api, series_id)
    if body is None:
        raise HTTPException(404, f"no state for series {series_id!r}")
    return api.responder.json(body)
