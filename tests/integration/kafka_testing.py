"""Helpers for the Kafka I/O tests: produce with delivery reports, read a topic back
independently of the code under test, and run a streaming query collecting its batches."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from confluent_kafka import Producer
from pyspark.sql import DataFrame

from tests.scenario import read_topics


@dataclass(frozen=True)
class Delivered:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None, int]]) -> list[Delivered]:
    """Produce (key, value, partition) records; returns where the broker says each landed."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10_000})
    delivered: list[Delivered] = []
    errors: list[str] = []

    def report(error, message) -> None:
        if error is not None:
            errors.append(error.str())
        else:
            delivered.append(Delivered(message.partition(), message.offset(), message.key(), message.value()))

    for key, value, partition in records:
        while True:
            try:
                producer.produce(topic, key=key, value=value, partition=partition, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0 and not errors, errors[:3]
    return delivered


def transactional_producer(bootstrap: str) -> Producer:
    """A producer with a fresh transactional id, its transactions initialised."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"kafka-tests-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    return producer


def open_transaction(bootstrap: str, topic: str, partition: int, key: bytes = b"open", value: bytes = b"1") -> Producer:
    """A producer whose transaction holds one acknowledged record on ``partition``, still open
    (a job killed inside its transaction: open until it times out or is aborted)."""
    producer = transactional_producer(bootstrap)
    producer.begin_transaction()
    producer.produce(topic, key=key, value=value, partition=partition)
    producer.flush(30)
    return producer


def abort_then_commit(producer: Producer, topic: str, aborted: tuple[bytes, bytes, int], committed: tuple[bytes, bytes, int]) -> None:
    """One transaction of the (key, value, partition) ``aborted``, aborted; then one of ``committed``, committed."""
    for (key, value, partition), end in ((aborted, producer.abort_transaction), (committed, producer.commit_transaction)):
        producer.begin_transaction()
        producer.produce(topic, key=key, value=value, partition=partition)
        producer.flush(30)
        end(30)


def read_topic(bootstrap: str, topic: str, timeout_s: float = 30.0, isolation: str = "read_committed") -> list[Delivered]:
    """Every record of ``topic``, each partition read from offset 0 to its end
    (:func:`tests.scenario.read_topics`); fails when one sends no end within ``timeout_s`` of quiet."""
    return [Delivered(m.partition(), m.offset(), m.key(), m.value(), tuple(m.headers() or ()))
            for m in read_topics(bootstrap, [topic], timeout_s, isolation, until_ends=True)[topic]]


def collect_batches(df: DataFrame, checkpoint: str, columns: tuple[str, ...], available_now: bool = True) -> list[list[tuple]]:
    """Run a streaming query to the end of the available data; the rows of each micro-batch."""
    batches: list[list[tuple]] = []

    def keep(batch_df: DataFrame, batch_id: int) -> None:
        batches.append([tuple(row) for row in batch_df.select(*columns).collect()])

    writer = df.writeStream.foreachBatch(keep).option("checkpointLocation", checkpoint)
    if available_now:
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination(600)
    else:
        query = writer.trigger(processingTime="0 seconds").start()
        try:
            query.processAllAvailable()
        finally:
            query.stop()
    if query.exception() is not None:
        raise query.exception()
    return batches
