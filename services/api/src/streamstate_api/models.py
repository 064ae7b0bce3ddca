"""Response bodies of the API. The records themselves are the contract models
(:mod:`streamstate_pipeline.contracts`); these only wrap them with paging and freshness."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from streamstate_pipeline.contracts import Alert, MetricSnapshot, SessionSnapshot


class Freshness(BaseModel):
    """How current an answer is: the source positions the view had when it answered."""

    offsets: dict[str, dict[str, int]] = Field(
        description="Per source topic and partition, the next offset: the answer reflects every record before it."
    )
    caught_up: bool = Field(description="Whether the view had reached the topics' end offsets seen at start.")


class SessionResponse(BaseModel):
    session: SessionSnapshot = Field(description="Open session (if any), lifetime behaviour and activity spans.")
    active: bool = Field(description="Whether the user has an open session.")
    freshness: Freshness


class SessionPage(BaseModel):
    items: list[SessionSnapshot] = Field(description="Sessions in user-id order.")
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null on the last page.")
    freshness: Freshness


class SeriesResponse(BaseModel):
    series: MetricSnapshot = Field(description="Rolling window statistics, running analytics and the last anomaly.")
    freshness: Freshness


class AlertList(BaseModel):
    items: list[Alert] = Field(description="Newest first by (ts, alert_id), one per alert id.")
    freshness: Freshness


class Problem(BaseModel):
    """An error the client can act on."""

    detail: str


class ReadinessReport(BaseModel):
    ready: bool
    reason: str = Field(description="Why the service is (not) ready.")
    remaining: dict[str, dict[str, int]] = Field(
        description="Per topic and partition, records still to consume before the end offsets seen at start."
    )


class Health(BaseModel):
    status: Literal["ok"]


# OpenAPI responses, in the shape FastAPI's routers take them.
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": Problem, "description": "No such key in the view."}}
UNAUTHORIZED: dict[int | str, dict[str, Any]] = {401: {"model": Problem, "description": "Missing or wrong bearer token (when the API requires one)."}}
