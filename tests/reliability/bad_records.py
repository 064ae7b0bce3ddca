"""Hypothesis strategies for raw Kafka records that break the input contracts.

Each strategy yields ``(key, value)`` bytes for one input topic. The kinds follow the
issue's list: invalid UTF-8, wrong types, huge strings, nested junk, event times outside
the contract's range, missing fields, null keys/values, and values close to Kafka's
default 1 MB record limit. A valid far-future event time is *not* generated: the contract
accepts it (see RELIABILITY.md, "Far-future event times").
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from streamstate_pipeline.contracts import MAX_TS, EVENT_TYPES

# The biggest value a producer with librdkafka's default message.max.bytes (1,000,000) can send.
NEAR_LIMIT_BYTES = 999_000
HUGE_STRING_CHARS = 200_000

Fields = dict[str, Any]
KeyValue = tuple[bytes | None, bytes | None]

_ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)
_valid_ts = st.integers(1_600_000_000_000, 1_800_000_000_000)


def _dumps(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


@st.composite
def _event_fields(draw) -> Fields:
    user = "fz-" + draw(_ids)
    return {"event_id": "fz-" + draw(_ids), "user_id": user, "type": draw(st.sampled_from(EVENT_TYPES)), "ts": draw(_valid_ts)}


@st.composite
def _metric_fields(draw) -> Fields:
    return {"series_id": "fz-" + draw(_ids), "ts": draw(_valid_ts), "value": draw(st.floats(-1e6, 1e6))}


_REQUIRED = {"events": ("event_id", "user_id", "type", "ts"), "metrics": ("series_id", "ts", "value")}
_FIELDS = {"events": _event_fields(), "metrics": _metric_fields()}
_KEY_FIELD = {"events": "user_id", "metrics": "series_id"}

json_junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_not_a_string = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.lists(json_junk, max_size=3))
_not_an_int_ts = st.one_of(
    st.none(),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not f.is_integer()),
    st.text(max_size=20),
    st.lists(json_junk, max_size=3),
    st.dictionaries(st.text(max_size=5), json_junk, max_size=3),
)
out_of_range_ts = st.one_of(st.integers(max_value=-1), st.integers(min_value=MAX_TS + 1, max_value=10**30))
_wrong_value_for = {
    "event_id": _not_a_string,
    "user_id": _not_a_string,
    "series_id": _not_a_string,
    "type": st.one_of(_not_a_string, st.text(max_size=20).filter(lambda t: t not in EVENT_TYPES)),
    "ts": st.one_of(_not_an_int_ts, out_of_range_ts),
    "value": st.one_of(st.none(), st.booleans(), st.text(max_size=20), st.lists(json_junk, max_size=3)),
}
_INVALID_UTF8 = (b"\xff", b"\xc3(", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80")


def _with_key(fields: Fields, topic: str, value: bytes | None) -> KeyValue:
    return str(fields[_KEY_FIELD[topic]]).encode(), value


@st.composite
def invalid_utf8(draw, topic: str) -> KeyValue:
    fields = draw(_FIELDS[topic])
    text = _dumps(fields)
    cut = draw(st.integers(0, len(text)))
    broken = text[:cut] + draw(st.sampled_from(_INVALID_UTF8)) + text[cut:]
    if draw(st.booleans()):
        return _with_key(fields, topic, broken)
    return broken[:40], _dumps(fields)  # a valid value under a key that is not UTF-8


@st.composite
def wrong_type(draw, topic: str) -> KeyValue:
    fields = draw(_FIELDS[topic])
    name = draw(st.sampled_from(_REQUIRED[topic]))
    fields[name] = draw(_wrong_value_for[name])
    return _with_key(fields, topic, _dumps(fields))


@st.composite
def huge_string(draw, topic: str) -> KeyValue:
    fields = draw(_FIELDS[topic])
    key, _ = _with_key(fields, topic, None)
    # Ids too: a valid string, but longer than the contract's ID_MAX_CHARS.
    fields[draw(st.sampled_from(_REQUIRED[topic]))] = draw(st.sampled_from("x9é\x00")) * HUGE_STRING_CHARS
    return key, _dumps(fields)


@st.composite
def nested_junk(draw, topic: str) -> KeyValue:
    fields = draw(_FIELDS[topic])
    if draw(st.booleans()):
        top = draw(json_junk.filter(lambda j: not isinstance(j, dict)))
        return _with_key(fields, topic, _dumps(top))
    name = draw(st.sampled_from(_REQUIRED[topic]))
    fields[name] = draw(st.lists(json_junk, min_size=1, max_size=3) | st.dictionaries(st.text(max_size=5), json_junk, max_size=3))
    return _with_key(fields, topic, _dumps(fields))


@st.composite
def ts_out_of_range(draw, topic: str) -> KeyValue:
    fields = draw(_FIELDS[topic])
    fields["ts"] = draw(out_of_range_ts)
    return _with_key(fields, topic, _dumps(fields))


@st.composite
def missing_field(draw, topic: str) -> KeyValue:
    fields = draw(_FIELDS[topic])
    del fields[draw(st.sampled_from(_REQUIRED[topic]))]
    return str(draw(_ids)).encode(), _dumps(fields)


@st.composite
def null_key_or_value(draw, topic: str) -> KeyValue:
    fields = draw(_FIELDS[topic])
    if draw(st.booleans()):
        return _with_key(fields, topic, None)  # a tombstone on an input topic
    del fields[draw(st.sampled_from(_REQUIRED[topic]))]
    return None, _dumps(fields)  # a null key does not rescue a bad value


@st.composite
def key_mismatch(draw, topic: str) -> KeyValue:
    fields = draw(_FIELDS[topic])
    return ("other-" + draw(_ids)).encode(), _dumps(fields)


@st.composite
def near_limit_value(draw, topic: str) -> KeyValue:
    fields = draw(_FIELDS[topic])
    key, _ = _with_key(fields, topic, None)
    size = draw(st.integers(NEAR_LIMIT_BYTES - 1000, NEAR_LIMIT_BYTES))
    if draw(st.booleans()):
        fill = draw(st.sampled_from([b"\xff\xfe", b"\x00\x01\x02\x03"]))  # binary: base64 in the dead letter
        return key, (fill * size)[:size]
    fields[draw(st.sampled_from(_REQUIRED[topic]))] = "x" * size
    return key, _dumps(fields)[:size]


SMALL_KINDS = (invalid_utf8, wrong_type, nested_junk, ts_out_of_range, missing_field, null_key_or_value, key_mismatch)
BIG_KINDS = (huge_string, near_limit_value)


def bad_record(topic: str, big: bool = False) -> st.SearchStrategy[KeyValue]:
    """One contract-breaking (key, value) for ``topic`` ("events" or "metrics")."""
    kinds = SMALL_KINDS + (BIG_KINDS if big else ())
    return st.one_of(*(kind(topic) for kind in kinds))
