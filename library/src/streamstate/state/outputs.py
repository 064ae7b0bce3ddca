"""What a user function returns, and how each output, snapshot and dead letter is encoded, once.

The Spark processor (:mod:`streamstate.state.keyrun`) and the in-memory tester
(:mod:`streamstate.state.tester`) both turn a function's result into rows here, so an
output is encoded the same way, and only once, on both. A plain output is the function's
value as JSON under the state key, of kind ``output``. An :class:`Emit` is a record with its
own kind and key (an alert keyed by its id, a dead letter keyed by its source coordinates)
whose payload goes into the row as it is, so it reaches Kafka byte for byte as the function
wrote it, with no envelope to decode downstream.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from streamstate.state.kinds import RowKind
from streamstate.state.state import DEAD_LETTER_VALUE_LIMIT, checked_size, cut, lenient_json, to_json


class Emit(NamedTuple):
    """A record the function emits with its own ``kind`` and ``key`` (both text).

    ``payload`` is text (already encoded: it is written as it is), a pydantic model (written as
    its ``model_dump_json()``) or any JSON value; ``None`` makes a row with a null payload.
    ``kind`` is any name but ``snapshot`` (the state layer's own); ``output`` puts the record
    among :attr:`StateResult.outputs` under its own key.
    """

    kind: str
    key: str
    payload: Any


def as_outputs(result: Any, per_record: bool) -> list:
    """A per-record result is None, a list of outputs, or one output; a batch result is an iterable."""
    if result is None:
        return []
    if per_record:
        return result if isinstance(result, list) else [result]
    return list(result)


def output_row(output: Any, key_text: str, limit_bytes: int) -> tuple[str, str, str | None]:
    """``(kind, key, payload)`` of one output; :class:`~streamstate.state.state.OutputTooLarge`
    when the payload is over ``limit_bytes``, ``TypeError``/``ValueError`` when it cannot be written."""
    if not isinstance(output, Emit):
        return RowKind.OUTPUT.value, key_text, checked_size(to_json(output), limit_bytes, "output")
    kind, key, payload = output
    if not isinstance(kind, str) or kind == RowKind.SNAPSHOT:
        raise ValueError(f"Emit kind must be a name other than {RowKind.SNAPSHOT.value!r}, got {kind!r}")
    if not isinstance(key, str):
        raise TypeError(f"Emit key must be text, got {type(key).__name__}")
    if payload is None:
        return str(kind), key, None
    if not isinstance(payload, str):
        dump = getattr(payload, "model_dump_json", None)
        payload = dump() if dump is not None else to_json(payload)
    return str(kind), key, checked_size(payload, limit_bytes, "output")


def snapshot_payload(view: Any, limit_bytes: int) -> str | None:
    """A snapshot function's result as a row's payload: text as it is, ``None`` a tombstone,
    anything else as JSON; over ``limit_bytes`` it is refused like an output."""
    payload = view if view is None or isinstance(view, str) else to_json(view)
    return None if payload is None else checked_size(payload, limit_bytes, "snapshot")


def dead_letter_value(value: Any) -> str:
    """A failing record's value as its dead letter carries it: JSON for diagnostics, cut to size."""
    return cut(lenient_json(value), DEAD_LETTER_VALUE_LIMIT)
