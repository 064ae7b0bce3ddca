"""Decoding of the records the API follows: state snapshots, tombstones and alerts.

Each record is validated once, on arrival, against its contract model in *strict* mode
and then kept as the bytes it arrived as. Strict validation (no coercion such as
``"12"`` for an integer; unknown fields are already forbidden by the models) is what makes
the original bytes safe to serve: they match the model documented in the OpenAPI schema.
Responses splice those bytes instead of building model objects per request, so a million
sessions cost bytes, not object graphs, and decoding skips a re-serialisation. The jobs
write these topics with ``model_dump_json``, which strict validation always accepts.

The check also refuses what the view's store cannot hold: a snapshot's ``ts`` is kept as a
signed 64-bit integer (:data:`~streamstate_api.store.TS_MIN` .. ``TS_MAX``), and the contract
allows any integer. Passed through, such a record failed the store write of its whole batch,
and the follower retried that batch for ever (issue 51).

Snapshots and series are first checked by msgspec structs that mirror the contract models
(:data:`_FAST`, about a third of pydantic's cost, issue 54). They only ever *accept*: a record they
accept is one the strict pydantic check accepts too, with the same summary (pinned by
``services/api/tests/test_record_contracts.py``, a differential test); anything they refuse
(or that fails the key or ``ts`` check) goes through the pydantic check, which decides and gives
the reason. So a bad record is refused, and explained, exactly as before.
"""

from __future__ import annotations

from enum import Enum
from typing import cast

import msgspec
from pydantic import BaseModel, ValidationError

from streamstate_api.store import TS_MAX, TS_MIN
from streamstate_pipeline.contracts import Alert, ContractError, MetricSnapshot, SessionSnapshot, decode_utf8, explain


class Source(str, Enum):
    """The three topics the view is built from (their names come from the settings)."""

    SESSIONS = "sessions"
    SERIES = "series"
    ALERTS = "alerts"


# msgspec structs, not dataclasses: built once per record of a rebuild, where a slotted
# dataclass cost 0.18 µs against 0.04 µs, and with gc=False the garbage collector does not track
# them (a dataclass instance is tracked, and a rebuild's millions set off collections that walk
# every batch in flight). They hold only strings, bytes and numbers, so no cycle can form.
class SessionRecord(msgspec.Struct, gc=False):
    user_id: str
    body: bytes
    active: bool
    ts: int


class SeriesRecord(msgspec.Struct, gc=False):
    series_id: str
    body: bytes
    last_z: float | None
    ts: int


class AlertRecord(msgspec.Struct, gc=False):
    alert_id: str
    kind: str
    entity: str
    ts: int
    body: bytes


class Tombstone(msgspec.Struct, gc=False):
    """A null value: the key leaves the view."""

    key: str


Record = SessionRecord | SeriesRecord | AlertRecord | Tombstone

_MODELS: dict[Source, tuple[type[BaseModel], str]] = {
    Source.SESSIONS: (SessionSnapshot, "user_id"),
    Source.SERIES: (MetricSnapshot, "series_id"),
    Source.ALERTS: (Alert, "alert_id"),
}


# --------------------------------------------------------------------------- the fast check
# Field for field the contract models of streamstate_pipeline.contracts (SessionSnapshot,
# MetricSnapshot and their parts): strict types (no "12" for an integer, no 1.0 for an int),
# unknown fields refused, null only where the model allows it. msgspec refuses NaN/Infinity and
# numbers beyond a double as pydantic's ``allow_inf_nan=False`` does.
class _OpenSession(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    start: int
    last_activity: int
    events: int
    page_views: int
    clicks: int
    purchases: int
    purchase_total: float
    current_activity: str
    activity_start: int


class _ActivitySpan(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    first: int
    last: int


class _Behaviour(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    total_sessions: int
    total_page_views: int
    total_events: int
    total_session_ms: int
    avg_session_ms: float


class _SessionSnapshot(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    user_id: str
    ts: int
    open_session: _OpenSession | None
    behaviour: _Behaviour
    activities: dict[str, _ActivitySpan]


class _LastAnomaly(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    ts: int
    value: float
    z: float | None


class _MetricSnapshot(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    series_id: str
    ts: int
    window_size: int
    window_count: int
    mean: float
    std: float
    last_value: float
    last_z: float | None
    count: int
    sum: float
    min: float
    max: float
    avg: float
    last_anomaly: _LastAnomaly | None


# The mirror structs of each contract model (checked field for field by the tests).
MIRRORS: dict[type[BaseModel], type[msgspec.Struct]] = {
    SessionSnapshot: _SessionSnapshot,
    MetricSnapshot: _MetricSnapshot,
}
_SESSION_DECODER = msgspec.json.Decoder(_SessionSnapshot)
_SERIES_DECODER = msgspec.json.Decoder(_MetricSnapshot)


def _fast_summary(source: Source, key_text: str, value: bytes) -> Summary | None:
    """The summary of a record the fast check accepts, else None (the pydantic check decides)."""
    try:
        if source is Source.SESSIONS:
            snapshot = _SESSION_DECODER.decode(value)
            if snapshot.user_id == key_text and TS_MIN <= snapshot.ts <= TS_MAX:
                return ("s", snapshot.user_id, snapshot.open_session is not None, snapshot.ts)
        elif source is Source.SERIES:
            series = _SERIES_DECODER.decode(value)
            if series.series_id == key_text and TS_MIN <= series.ts <= TS_MAX:
                return ("m", series.series_id, series.last_z, series.ts)
    except Exception:  # noqa: BLE001 - refused here (malformed, invalid UTF-8, a wrong type): pydantic decides
        return None
    return None


_SESSIONS, _SERIES = Source.SESSIONS, Source.SERIES  # an Enum member lookup is a call


def fast_record(source: Source, key: bytes | None, value: bytes | None) -> Record | None:
    """The view record of a snapshot the fast check accepts, straight from the bytes; None for
    anything else (a tombstone, an alert, or a record the fast check refuses), which
    :func:`decode` then decides and explains. The same checks, in the same terms, as
    :func:`summarize` followed by :func:`build` (no summary tuple in between: once per record
    of a rebuild)."""
    if key is None or value is None:
        return None
    try:
        if source is _SESSIONS:
            snapshot = _SESSION_DECODER.decode(value)
            if TS_MIN <= snapshot.ts <= TS_MAX and snapshot.user_id == key.decode("utf-8"):
                return SessionRecord(snapshot.user_id, bytes(value), snapshot.open_session is not None, snapshot.ts)
        elif source is _SERIES:
            series = _SERIES_DECODER.decode(value)
            if TS_MIN <= series.ts <= TS_MAX and series.series_id == key.decode("utf-8"):
                return SeriesRecord(series.series_id, bytes(value), series.last_z, series.ts)
    except Exception:  # noqa: BLE001 - refused here (malformed, invalid UTF-8, a wrong type): decode decides
        return None
    return None


def decode(source: Source, key: bytes | None, value: bytes | None) -> Record:
    """One Kafka record of ``source`` as a view record, or :class:`ContractError` with the reason."""
    return build(source, summarize(source, key, value), value)


# What validation keeps of a record besides its bytes, as a plain tuple: ("t", key)
# | ("s", user_id, active, ts) | ("m", series_id, last_z, ts) | ("a", alert_id, kind, entity, ts).
Summary = tuple


def summarize(source: Source, key: bytes | None, value: bytes | None) -> Summary:
    """Validate one record strictly against its contract; what the view needs of it, or :class:`ContractError`."""
    key_text = decode_utf8(key, "key")
    if key_text is None:
        raise ContractError("key is null")
    if value is None:
        return ("t", key_text)
    fast = _fast_summary(source, key_text, value)
    if fast is not None:
        return fast
    return strict_summary(source, key_text, value)


def strict_summary(source: Source, key_text: str, value: bytes) -> Summary:
    """The pydantic check alone: what decides, and explains, every record the fast check refuses."""
    model, key_field = _MODELS[source]
    try:
        parsed = model.model_validate_json(cast(str, decode_utf8(value, "value")), strict=True)  # not None: a tombstone returned above
    except ValidationError as exc:
        raise ContractError(explain(exc)) from None
    if getattr(parsed, key_field) != key_text:
        raise ContractError(f"key {key_text!r} does not match {key_field} {getattr(parsed, key_field)!r}")
    if isinstance(parsed, (SessionSnapshot, MetricSnapshot)) and not TS_MIN <= parsed.ts <= TS_MAX:
        raise ContractError(
            f"field 'ts': {_describe_int(parsed.ts)} is outside what the API's view store holds "
            f"(a signed 64-bit integer, {TS_MIN} to {TS_MAX})"
        )
    if isinstance(parsed, SessionSnapshot):
        return ("s", parsed.user_id, parsed.open_session is not None, parsed.ts)
    if isinstance(parsed, MetricSnapshot):
        return ("m", parsed.series_id, parsed.last_z, parsed.ts)
    assert isinstance(parsed, Alert)
    return ("a", parsed.alert_id, parsed.kind, parsed.entity, parsed.ts)


def _describe_int(value: int) -> str:
    # Python refuses to print integers over 4,300 digits; no reason needs them whole.
    return str(value) if value.bit_length() <= 200 else f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"


def build(source: Source, summary: Summary, value: bytes | None) -> Record:
    """The view record of a validated record: its summary plus its bytes as they arrived."""
    kind = summary[0]
    if kind == "s":  # the common case first, and no helper calls: once per record of a rebuild
        return SessionRecord(summary[1], bytes(value), summary[2], summary[3])  # type: ignore[arg-type]
    if kind == "t":
        return Tombstone(summary[1])
    body = bytes(value)  # type: ignore[arg-type]  # not None: a tombstone returned above
    if kind == "m":
        return SeriesRecord(summary[1], body, summary[2], summary[3])
    return AlertRecord(summary[1], summary[2], summary[3], summary[4], body)
