"""``/series/{series_id}``: a metric series' rolling statistics and last anomaly."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path
from fastapi.responses import Response

from streamstate.api.deps import ContextDep
from streamstate.api.models import NOT_FOUND, SeriesResponse
from streamstate.api.records import Source

router = APIRouter(tags=["series"])


@router.get(
    "/series/{series_id}",
    response_model=SeriesResponse,
    summary="A series' rolling statistics and last anomaly.",
    responses=NOT_FOUND,
)
async def get_series(series_id: Annotated[str, Path(description="The series id.")], api: ContextDep) -> Response:
    record, positions = api.view.series(series_id)
    if record is None:
        raise HTTPException(404, f"no state for series {series_id!r}")
    return api.responder.respond(Source.SERIES, positions, b'"series":' + record.body)
