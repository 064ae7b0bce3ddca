"""Producing Arrow batches of (key, value[, headers][, topic]) to Kafka, all-or-error.

Every record must be acknowledged before :func:`produce_batches` returns; any delivery
error (or records still unacknowledged at the flush deadline) raises
:class:`KafkaDeliveryError`, which fails the Spark task and therefore the batch, so the
batch is retried rather than silently dropped. Kafka output is at-least-once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, Producer

from streamstate.kafka_clients import producer_config

FLUSH_TIMEOUT_S = 120.0


class KafkaDeliveryError(RuntimeError):
    """A record was not acknowledged by the broker; the whole write must be retried."""


def _as_bytes(value: object) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(f"Kafka keys and values must be string or binary, got {type(value).__name__}")


def _headers(value: object) -> list[tuple[str, bytes | None]] | None:
    # Spark's Kafka sink: headers is array<struct<key: string, value: binary>>.
    if not value:
        return None
    return [(h["key"], _as_bytes(h["value"])) for h in value]  # type: ignore[index, union-attr]


def produce_batches(batches: Iterable[pa.RecordBatch], client_conf: Mapping[str, str], topic: str | None) -> int:
    """Produce every row; returns the number acknowledged. ``topic`` overrides a topic column."""
    # Bounded retries: a record not acknowledged within a minute fails the batch, which Spark retries.
    producer = Producer(producer_config(client_conf, **{"delivery.timeout.ms": 60_000}))
    failures: list[str] = []
    written = 0

    def on_delivery(error: KafkaError | None, message) -> None:
        if error is not None:
            failures.append(f"{message.topic()}: {error.str()}")

    for batch in batches:
        columns = batch.schema.names
        if "value" not in columns:
            raise ValueError(f"a Kafka sink needs a value column; got columns {columns}")
        if topic is None and "topic" not in columns:
            raise ValueError("a Kafka sink needs a topic option or a topic column")
        rows = batch.to_pydict()
        keys = rows.get("key") or [None] * batch.num_rows
        headers = rows.get("headers") or [None] * batch.num_rows
        topics = [topic] * batch.num_rows if topic is not None else rows["topic"]
        for target, key, value, header in zip(topics, keys, rows["value"], headers):
            if target is None:
                raise ValueError("a row has a null topic")
            record = {"key": _as_bytes(key), "value": _as_bytes(value), "headers": _headers(header), "on_delivery": on_delivery}
            while True:
                try:
                    producer.produce(target, **record)
                    break
                except BufferError:
                    producer.poll(0.1)  # queue full: serve delivery reports, then retry this record
                except KafkaException as exc:
                    raise KafkaDeliveryError(f"cannot produce to {target}: {exc}") from None
            written += 1
        producer.poll(0)
    unacknowledged = producer.flush(FLUSH_TIMEOUT_S)
    if failures:
        raise KafkaDeliveryError(f"{len(failures)} of {written} records were not delivered; first: {failures[0]}")
    if unacknowledged:
        raise KafkaDeliveryError(f"{unacknowledged} of {written} records unacknowledged after {FLUSH_TIMEOUT_S:.0f}s")
    return written
