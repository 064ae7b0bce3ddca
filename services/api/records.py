"""Decoding of the records the API follows: state snapshots, tombstones and alerts.

Each record is validated once, on arrival, against its contract model in *strict* mode
and then kept as the bytes it arrived as. Strict validation (no coercion such as
``"12"`` for an integer; unknown fields are already forbidden by the models) is what makes
the original bytes safe to serve: they match the model documented in the OpenAPI schema.
Responses splice those bytes instead of building model objects per request, so a million
sessions cost bytes, not object graphs, and decoding skips a re-serialisation. The jobs
write these topics with ``model_dump_json``, which strict validation always accepts.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from pydantic import BaseModel, ValidationError

from streamstate.contracts import Alert, ContractError, MetricSnapshot, SessionSnapshot, decode_utf8, explain


class Source(str, Enum):
    """The three topics the view is built from (their names come from the settings)."""

    SESSIONS = "sessions"
    SERIES = "series"
    ALERTS = "alerts"


@dataclass(frozen=True, slots=True)
class SessionRecord:
    user_id: str
    body: bytes
    active: bool
    ts: int


@dataclass(frozen=True, slots=True)
class SeriesRecord:
    series_id: str
    body: bytes
    last_z: float | None
    ts: int


@dataclass(frozen=True, slots=True)
class AlertRecord:
    alert_id: str
    kind: str
    entity: str
    ts: int
    body: bytes


@dataclass(frozen=True, slots=True)
class Tombstone:
    """A null value: the key leaves the view."""

    key: str


Record = SessionRecord | SeriesRecord | AlertRecord | Tombstone

_MODELS: dict[Source, tuple[type[BaseModel], str]] = {
    Source.SESSIONS: (SessionSnapshot, "user_id"),
    Source.SERIES: (MetricSnapshot, "series_id"),
    Source.ALERTS: (Alert, "alert_id"),
}


def decode(source: Source, key: bytes | None, value: bytes | None) -> Record:
    """One Kafka record of ``source`` as a view record, or :class:`ContractError` with the reason."""
    key_text = decode_utf8(key, "key")
    if key_text is None:
        raise ContractError("key is null")
    if value is None:
        return Tombstone(key_text)
    model, key_field = _MODELS[source]
    try:
        parsed = model.model_validate_json(decode_utf8(value, "value"), strict=True)
    except ValidationError as exc:
        raise ContractError(explain(exc)) from None
    if getattr(parsed, key_field) != key_text:
        raise ContractError(f"key {key_text!r} does not match {key_field} {getattr(parsed, key_field)!r}")
    body = bytes(value)
    if isinstance(parsed, SessionSnapshot):
        return SessionRecord(parsed.user_id, body, parsed.open_session is not None, parsed.ts)
    if isinstance(parsed, MetricSnapshot):
        return SeriesRecord(parsed.series_id, body, parsed.last_z, parsed.ts)
    assert isinstance(parsed, Alert)
    return AlertRecord(parsed.alert_id, parsed.kind, parsed.entity, parsed.ts, body)
