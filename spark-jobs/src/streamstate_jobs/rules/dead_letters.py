"""Dead letters of *valid* records that a rule refuses after validation (late, overflowing).

The job and the reference pipeline both build them here, so they agree byte for byte. Such
a record passed its contract, so its dead letter carries the validated record re-encoded
(the fields the job keeps) and the entity id as key; its source coordinates find the
original bytes on the input topic.
"""

from __future__ import annotations

from typing import Any, Sequence

from streamstate_pipeline.contracts import DeadLetter, Metric, UserEvent


def refused(stage: str, reason: str, key: str, record: UserEvent | Metric, source: Sequence[Any]) -> DeadLetter:
    """``source`` is (topic, partition, offset, Kafka timestamp ms)."""
    topic, partition, offset, kafka_ts = source
    return DeadLetter(
        reason=reason,
        stage=stage,
        source_topic=topic,
        source_partition=partition,
        source_offset=offset,
        key=key,
        value=record.model_dump_json(exclude_none=True),
        ts=kafka_ts if kafka_ts is not None else 0,
    )


def refused_event(stage: str, reason: str, user_id: str, event: Sequence[Any]) -> DeadLetter:
    """A session rule's pending event ``[ts, event_id, type, amount, source]``."""
    ts, event_id, event_type, amount, source = event
    record = UserEvent.model_construct(event_id=event_id, user_id=user_id, type=event_type, ts=ts, page=None, amount=amount)
    return refused(stage, reason, user_id, record, source)


def refused_point(reason: str, series_id: str, ts: int, value: float, source: Sequence[Any]) -> DeadLetter:
    record = Metric.model_construct(series_id=series_id, ts=ts, value=value)
    return refused("state", reason, series_id, record, source)


def coordinates_key(letter: DeadLetter) -> str:
    """The dead-letter topic's key: where the record came from."""
    return f"{letter.source_topic}:{letter.source_partition}:{letter.source_offset}"
