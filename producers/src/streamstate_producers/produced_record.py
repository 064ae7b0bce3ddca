"""The unit every producer part exchanges: one Kafka record plus what it is meant to be."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from streamstate_pipeline.contracts import ContractError, Metric, UserEvent, parse_input

RecordKind = Literal["event", "duplicate", "late", "malformed", "metric", "anomaly"]
RECORD_KINDS: tuple[RecordKind, ...] = ("event", "duplicate", "late", "malformed", "metric", "anomaly")


@dataclass(frozen=True, slots=True)
class ProducedRecord:
    """A record to send: topic, raw key and value bytes, and its expected fate.

    ``malformed_reason`` is the exact :class:`~streamstate_pipeline.contracts.ContractError` reason
    the record produces when validated (None for records that honour their contract).
    """

    topic: str
    key: bytes | None
    value: bytes | None
    malformed_reason: str | None
    kind: RecordKind


def expected_reason(model: type[UserEvent] | type[Metric], key: bytes | None, value: bytes | None) -> str:
    """The contract's own verdict on a deliberately broken record, so generator and contract never disagree."""
    try:
        parse_input(model, key, value)
    except ContractError as exc:
        return exc.reason
    raise AssertionError(f"a record meant to be malformed passes the {model.__name__} contract: {value!r}")
