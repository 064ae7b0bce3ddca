"""Ways a record breaks its input contract, as other teams' faulty producers do.

Each corruption takes a valid record's fields and returns the broken (key, value) bytes;
the expected reason is never written here but asked of the contract itself
(:func:`streamstate_producers.produced_record.expected_reason`).
"""

from __future__ import annotations

import json
import random
from typing import Any, Callable

Fields = dict[str, Any]
KeyValue = tuple[bytes | None, bytes | None]
# (rng, key, fields of a valid record, key of a different entity) -> broken key and value
Corruption = Callable[[random.Random, bytes, Fields, bytes], KeyValue]


def dumps(fields: Any) -> bytes:
    """Compact JSON bytes; NaN and Infinity come out as the bare tokens some producers emit."""
    return json.dumps(fields, separators=(",", ":"), allow_nan=True).encode()


def not_json(rng: random.Random, key: bytes, fields: Fields, other_key: bytes) -> KeyValue:
    text = dumps(fields)
    return key, text[: rng.randint(1, len(text) - 1)]  # a cut-off object is never valid JSON


def json_array(rng: random.Random, key: bytes, fields: Fields, other_key: bytes) -> KeyValue:
    return key, dumps([fields])


def _missing(required: tuple[str, ...]) -> Corruption:
    def missing_field(rng: random.Random, key: bytes, fields: Fields, other_key: bytes) -> KeyValue:
        broken = dict(fields)
        del broken[rng.choice(required)]
        return key, dumps(broken)

    return missing_field


def ts_as_string(rng: random.Random, key: bytes, fields: Fields, other_key: bytes) -> KeyValue:
    return key, dumps({**fields, "ts": str(fields["ts"])})


def latin1_bytes(rng: random.Random, key: bytes, fields: Fields, other_key: bytes) -> KeyValue:
    # A legacy producer writing Latin-1: the extra field alone would be ignored, its encoding is not.
    note = rng.choice(("café", "naïve", "señor", "über"))
    return key, json.dumps({**fields, "note": note}, separators=(",", ":"), ensure_ascii=False).encode("latin-1")


def key_mismatch(rng: random.Random, key: bytes, fields: Fields, other_key: bytes) -> KeyValue:
    return other_key, dumps(fields)


def null_value(rng: random.Random, key: bytes, fields: Fields, other_key: bytes) -> KeyValue:
    return key, None


def unknown_event_type(rng: random.Random, key: bytes, fields: Fields, other_key: bytes) -> KeyValue:
    return key, dumps({**fields, "type": rng.choice(("checkout", "signup", "scroll"))})


def non_finite_amount(rng: random.Random, key: bytes, fields: Fields, other_key: bytes) -> KeyValue:
    return key, dumps({**fields, "type": "purchase", "amount": float(rng.choice(("nan", "inf", "-inf")))})


def non_finite_value(rng: random.Random, key: bytes, fields: Fields, other_key: bytes) -> KeyValue:
    return key, dumps({**fields, "value": float(rng.choice(("nan", "inf", "-inf")))})


def nan_string_value(rng: random.Random, key: bytes, fields: Fields, other_key: bytes) -> KeyValue:
    return key, dumps({**fields, "value": "NaN"})


def value_as_string(rng: random.Random, key: bytes, fields: Fields, other_key: bytes) -> KeyValue:
    return key, dumps({**fields, "value": str(fields["value"])})


_COMMON: dict[str, Corruption] = {
    "not_json": not_json,
    "json_array": json_array,
    "ts_as_string": ts_as_string,
    "latin1_bytes": latin1_bytes,
    "key_mismatch": key_mismatch,
    "null_value": null_value,
}

EVENT_CORRUPTIONS: dict[str, Corruption] = {
    **_COMMON,
    "missing_field": _missing(("event_id", "user_id", "type", "ts")),
    "unknown_type": unknown_event_type,
    "non_finite_amount": non_finite_amount,
}

METRIC_CORRUPTIONS: dict[str, Corruption] = {
    **_COMMON,
    "missing_field": _missing(("series_id", "ts", "value")),
    "non_finite_value": non_finite_value,
    "nan_string_value": nan_string_value,
    "value_as_string": value_as_string,
}
