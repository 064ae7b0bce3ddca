"""One typed definition per record kind on the wire, shared by producers, jobs and API.

Every record is a JSON object; every record carries an event time ``ts`` in epoch
milliseconds (UTC). The two input kinds (:class:`UserEvent`, :class:`Metric`) are
other teams' contracts (see README "Wire contracts") and are validated strictly:
no type coercion, unknown extra fields ignored. The Spark schema of any model is
derived from the model itself by :func:`~streamstate.state.schema.spark_schema`, never written twice.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Annotated, Any, Literal, Union, cast

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr, ValidationError
from streamstate_pipeline.errors import PipelineError

EVENT_TYPES = ("login", "page_view", "click", "purchase", "logout")
EventType = Literal["login", "page_view", "click", "purchase", "logout"]

# Event time bounds: negative times and times past year 9999 cannot be real events.
MAX_TS = 253_402_300_799_999
EpochMillis = Annotated[StrictInt, Field(ge=0, le=MAX_TS)]
# Ids become Kafka keys and appear in every output about their entity: an id near Kafka's
# 1 MB record limit would make those outputs unwritable, so ids are capped well below it.
ID_MAX_CHARS = 1024


def _finite_double(value: int | float) -> float:
    # A JSON number is a double to every reader (Spark's double column, the rules): an integer
    # literal of 400 digits would fail there, where it cannot be dead-lettered, and one of 19
    # digits would be refused by Arrow as not exactly representable. It becomes its double here.
    try:
        as_double = float(value)
    except OverflowError:
        raise ValueError("number out of the range of a double (about ±1.8e308)") from None
    if not math.isfinite(as_double):
        raise ValueError("number must be finite")
    return as_double


# JSON numbers, as doubles: an integer literal is a number too; NaN/Infinity and integers beyond
# the range of a double are refused (the float branch refuses NaN/Infinity through the models' config).
Number = Annotated[Union[StrictInt, StrictFloat], AfterValidator(_finite_double)]


class ContractError(PipelineError, ValueError):
    """A record that breaks its contract; ``reason`` is the one-line, precise cause."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class _Input(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    def to_json(self) -> bytes:
        return self.model_dump_json().encode()


# --------------------------------------------------------------------------- inputs
class UserEvent(_Input):
    """A user's action; topic ``user-events``, key = ``user_id``."""

    event_id: StrictStr = Field(min_length=1, max_length=ID_MAX_CHARS, description="Unique per event; a re-sent event keeps its id.")
    user_id: StrictStr = Field(min_length=1, max_length=ID_MAX_CHARS, description="The user; equals the record key.")
    type: EventType = Field(description="What the user did.")
    ts: EpochMillis = Field(description="Event time, epoch milliseconds UTC.")
    page: StrictStr | None = Field(None, description="Page or screen.")
    amount: Number | None = Field(None, description="Purchase amount.")


class Metric(_Input):
    """One point of a metric series; topic ``metrics``, key = ``series_id``."""

    series_id: StrictStr = Field(min_length=1, max_length=ID_MAX_CHARS)
    ts: EpochMillis
    value: Number


# --------------------------------------------------------------------------- outputs
class Alert(_Record):
    """Topic ``alerts``, key = ``alert_id``. The id is derived from (kind, entity, ts)."""

    alert_id: str
    kind: str = Field(description="bot_burst, purchase_without_view, long_session, anomaly.")
    entity: str = Field(description="The user id or series id the alert is about.")
    ts: int = Field(description="Event time of the record that raised the alert.")
    message: str
    details: dict[str, float | None] = Field(
        default_factory=dict, description="Figures behind the alert; null where undefined (z when std is 0)."
    )

    @staticmethod
    def make_id(kind: str, entity: str, ts: int) -> str:
        return hashlib.sha256(f"{kind}\x1f{entity}\x1f{ts}".encode()).hexdigest()[:24]

    @classmethod
    def build(cls, kind: str, entity: str, ts: int, message: str, **details: float | None) -> "Alert":
        return cls(
            alert_id=cls.make_id(kind, entity, ts),
            kind=kind,
            entity=entity,
            ts=ts,
            message=message,
            details={k: None if v is None else float(v) for k, v in details.items()},
        )


class ClosedSession(_Record):
    """Topic ``sessions``, key = ``user_id``: a finished session."""

    session_id: str = Field(description="user_id:start, stable across replays.")
    user_id: str
    start: int
    end: int
    duration_ms: int
    events: int
    page_views: int
    clicks: int
    purchases: int
    purchase_total: float
    ended_by: Literal["logout", "timeout"]
    ts: int = Field(description="Event time: the session's end.")


class OpenSession(_Record):
    start: int
    last_activity: int
    events: int
    page_views: int
    clicks: int
    purchases: int
    purchase_total: float
    current_activity: str = Field(description="Type of the latest event.")
    activity_start: int = Field(description="Start of the current run of the same activity (seed 002).")


class ActivitySpan(_Record):
    first: int
    last: int


class Behaviour(_Record):
    total_sessions: int = Field(description="Closed sessions.")
    total_page_views: int
    total_events: int
    total_session_ms: int
    avg_session_ms: float


class SessionSnapshot(_Record):
    """Topic ``session-state``, key = ``user_id``; a null value is a tombstone."""

    user_id: str
    ts: int = Field(description="Event time of the user's latest event.")
    open_session: OpenSession | None
    behaviour: Behaviour
    activities: dict[str, ActivitySpan] = Field(description="First and last time of each event type.")


class LastAnomaly(_Record):
    ts: int
    value: float
    z: float | None = Field(description="Null when the window was constant (std 0).")


class MetricSnapshot(_Record):
    """Topic ``metric-state``, key = ``series_id``; a null value is a tombstone."""

    series_id: str
    ts: int = Field(description="Event time of the latest value.")
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
    last_anomaly: LastAnomaly | None


class DeadLetter(_Record):
    """Topic ``dead-letters``: a record that could not be processed, with its coordinates."""

    reason: str
    stage: Literal["contract", "clock_skew", "late", "state"] = Field(
        description="contract: broke its input contract; clock_skew: event time too far ahead of the Kafka timestamp; "
        "late: at or behind the event-time watermark on arrival; state: refused or failed in the stateful step."
    )
    source_topic: str
    source_partition: int
    source_offset: int
    key: str | None = Field(
        description="The raw key: UTF-8 text, or 'base64:<...>' for other bytes (for a valid record refused later: its entity id)."
    )
    value: str | None = Field(
        description="The raw value: UTF-8 text, or 'base64:<...>' for other bytes (for a valid record refused later: "
        "the validated record re-encoded; the source coordinates find the original)."
    )
    ts: int = Field(description="The source record's Kafka timestamp (Kinesis: its approximate arrival time).")
    # Kinesis input only: the exact coordinate. There source_topic is the stream, source_partition
    # the shard's number and source_offset the record's ordinal in its shard, because sequence
    # numbers (up to 128 bits) do not fit an integer field. Absent from Kafka dead letters.
    source_sequence_number: str | None = Field(
        None, description="Kinesis sequence number of the source record.", exclude_if=lambda v: v is None
    )


# --------------------------------------------------------------------------- validation
def _describe(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        # Python refuses to print integers over 4,300 digits; no reason needs them whole.
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    text = json.dumps(value) if not isinstance(value, (bytes, bytearray)) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def explain(error: ValidationError) -> str:
    """The first problem of a validation error as one precise line."""
    first = error.errors(include_url=False)[0]
    loc = [str(p) for p in first["loc"]]
    got = _describe(first.get("input"))
    if first["type"] == "json_invalid":
        return f"not valid JSON: {first['ctx']['error'] if 'ctx' in first else first['msg']}"
    if first["type"] == "model_type" or not loc:
        return f"expected a JSON object, got {got}"
    if loc[-1] in ("int", "float"):  # a branch of the Number union
        return f"field '{'.'.join(loc[:-1])}': expected a finite number, got {got}"
    where = ".".join(loc)
    if first["type"] == "missing":
        return f"missing required field '{where}'"
    if first["type"] == "value_error" and "ctx" in first:  # our own validators' messages
        return f"field '{where}': {first['ctx']['error']}, got {got}"
    return f"field '{where}': {first['msg'][0].lower()}{first['msg'][1:]}, got {got}"


def decode_utf8(data: bytes | None, what: str) -> str | None:
    if data is None:
        return None
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ContractError(f"{what} is not valid UTF-8 (byte 0x{data[exc.start]:02x} at position {exc.start})") from None


_KEY_FIELD = {UserEvent: "user_id", Metric: "series_id"}


def key_field(model: type[UserEvent] | type[Metric]) -> str:
    """The field a non-null record key must equal (see :func:`parse_input`)."""
    return _KEY_FIELD[model]


def parse_input(model: type[UserEvent] | type[Metric], key: bytes | None, value: bytes | None):
    """Validate one Kafka record against an input contract, or raise :class:`ContractError`."""
    if value is None:
        raise ContractError("value is null")
    text = cast(str, decode_utf8(value, "value"))  # not None: checked above
    key_text = decode_utf8(key, "key")
    try:
        record = model.model_validate_json(text)
    except ValidationError as exc:
        raise ContractError(explain(exc)) from None
    key_field = _KEY_FIELD[model]
    if key_text is not None and key_text != getattr(record, key_field):
        raise ContractError(f"key {_describe(key_text)} does not match {key_field} {_describe(getattr(record, key_field))}")
    return record


def printable(data: bytes | None) -> str | None:
    """Raw bytes for a dead letter: text when it is UTF-8, else base64."""
    import base64

    if data is None:
        return None
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(bytes(data)).decode()


# A dead letter wraps the raw record (base64 grows it by a third), and Kafka's default record
# limit is 1 MB: a near-1 MB bad record would make its dead letter unwritable and fail the
# batch forever. Key and value are cut to this many characters, with a note saying so.
DEAD_LETTER_TEXT_LIMIT = 64 * 1024


def dead_letter_text(data: bytes | None) -> str | None:
    """:func:`printable` bytes for a dead letter, cut to :data:`DEAD_LETTER_TEXT_LIMIT` characters."""
    text = printable(data)
    if text is None or len(text) <= DEAD_LETTER_TEXT_LIMIT:
        return text
    return (
        text[:DEAD_LETTER_TEXT_LIMIT]
        + f" ...[truncated: the record had {len(data or b'')} bytes; the first {DEAD_LETTER_TEXT_LIMIT} characters are kept]"
    )


def is_finite_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


