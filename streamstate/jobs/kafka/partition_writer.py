"""Writing a micro-batch's output rows to Kafka from the tasks that computed them.

The rows of a batch leave the stateful stage in (kind, key, payload) form. Each task produces
its rows with confluent-kafka and hands back one small summary (rows per kind, alert kind,
dead-letter stage and counter; the payloads a gauge reads), so a whole batch is ONE Spark job:
no persist of the batch, no counting pass, no second pass to write, no collect of payloads.
Spark's own Kafka sink needs each of those as a job of its own, and each costs a stage's
scheduling and its tasks' start whatever the rows, which at low rates is most of a batch.

A task returns only once every record it produced is acknowledged (``acks=all``, idempotent,
so a retry inside the producer neither duplicates nor reorders a key's records); any delivery
error fails the task, so Spark retries it and, failing that, the batch. Records go to the
partition Kafka's Java clients choose for their key (murmur2), as Spark's sink put them, so a
key of a compacted topic stays in the partition where its earlier records are.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import KafkaException, Producer
from pyspark.sql import DataFrame

from streamstate.errors import JobError
from streamstate.jobs.declaration import count_key
from streamstate.kafka_clients import ClientConfig, producer_config
from streamstate.kinds import Kind

# A task's summary: one row per (kind, alert kind, dead-letter stage, counter) with its rows and
# counter total, and one row per payload a gauge reads (rows 0).
_SUMMARY_ARROW = pa.schema(
    [("kind", pa.string()), ("alert_kind", pa.string()), ("stage", pa.string()), ("counter", pa.string()),
     ("rows", pa.int64()), ("total", pa.int64()), ("payload", pa.string())]
)
SUMMARY_SCHEMA = ", ".join(f"{f.name} {'long' if f.type == pa.int64() else 'string'}" for f in _SUMMARY_ARROW)
WRITER_TUNING = {
    "enable.idempotence": True,
    "partitioner": "murmur2_random",  # the Java client's partition for a key
    "linger.ms": 2,  # a task flushes its records at its end: lingering would only delay the first send
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
    # A record is delivered or refused within this (retries included), so a broker outage
    # shorter than it delays the batch, and a longer one fails the task.
    "message.timeout.ms": 120_000,
}
FLUSH_TIMEOUT_S = 150.0  # past message.timeout.ms: every record has its outcome by then

# One producer per Python worker process and configuration: Spark reuses its Python workers
# across tasks and batches, and a new producer would pay its broker connections every batch.
_producers: dict[str, Producer] = {}


class OutputNotDeclared(JobError, ValueError):
    """A row of a kind (or a count of a counter) that the job does not declare."""


class OutputNotDelivered(JobError, RuntimeError):
    """Kafka refused or lost records of a batch: the task fails and Spark retries it."""


@dataclass(frozen=True)
class OutputPlan:
    """Where a job's rows go: a topic per kind, the counters its COUNT rows may name, and the
    kinds whose payloads its gauges read. Anything else fails the task before it writes the
    Arrow batch that holds it."""

    job: str
    topics: Mapping[str, str]
    counters: frozenset[str]
    read_kinds: frozenset[str] = frozenset()

    def check(self, batch: pa.RecordBatch) -> None:
        kinds = set(pc.unique(batch.column("kind")).to_pylist())
        unknown = kinds - set(self.topics) - {Kind.COUNT.value}
        if unknown:
            raise OutputNotDeclared(f"rows of kind {sorted(unknown, key=str)}: not among the outputs job {self.job!r} declares {sorted(self.topics)}")
        if Kind.COUNT.value in kinds:
            keys = pc.filter(batch.column("key"), pc.equal(batch.column("kind"), Kind.COUNT.value))
            names = {count_key(key)[0] for key in pc.unique(keys).to_pylist()}
            if names - self.counters:
                raise OutputNotDeclared(
                    f"counts of {sorted(names - self.counters)}: not among the counters and gauges job {self.job!r} declares "
                    f"{sorted(self.counters)}"
                )


@dataclass
class BatchSummary:
    """What a batch's tasks wrote and counted, merged on the driver."""

    rows: list[dict[str, Any]] = field(default_factory=list)  # kind, alert_kind, stage, counter, rows, total
    payloads: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # per read kind, decoded

    @property
    def counts(self) -> dict[str, int]:
        totals: Counter[str] = Counter()
        for row in self.rows:
            totals[row["kind"]] += row["rows"]
        return dict(totals)


def write_partitions(rows: DataFrame, settings: Any, plan: OutputPlan) -> BatchSummary:
    """Write ``rows`` (kind, key, payload) to the topic of each row's kind, from their own
    tasks, and return the batch's summary. Rows of kind ``count`` are counted, not written."""
    config = producer_config(settings, **{key.replace(".", "__"): value for key, value in WRITER_TUNING.items()})
    plan = OutputPlan(plan.job, dict(plan.topics), plan.counters, plan.read_kinds)  # a plain dict pickles

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from _summary_batches(_write_task(batches, config, plan))

    collected = rows.select("kind", "key", "payload").mapInArrow(write, SUMMARY_SCHEMA).collect()
    summary = BatchSummary()
    merged: dict[Group, dict[str, Any]] = {}  # the tasks' rows of one group as one
    for row in collected:
        if row["payload"] is not None:
            summary.payloads.setdefault(row["kind"], []).append(json.loads(row["payload"]))
            continue
        group = (row["kind"], row["alert_kind"], row["stage"], row["counter"])
        if group in merged:
            merged[group]["rows"] += row["rows"]
            if row["total"] is not None:
                merged[group]["total"] += row["total"]
        else:
            merged[group] = row.asDict()
    summary.rows = list(merged.values())
    return summary



Group = tuple[str, str | None, str | None, str | None]  # kind, alert kind, dead-letter stage, counter


def _write_task(batches: Iterator[pa.RecordBatch], config: ClientConfig, plan: OutputPlan) -> tuple[dict[Group, list[int]], list[tuple[str, str]]]:
    """Produce a task's rows; return its (rows, total) per group and the payloads the plan's gauges read."""
    producer = _producer(config)
    groups: dict[Group, list[int]] = {}
    read: list[tuple[str, str]] = []
    delivery = _Delivery()
    for batch in batches:
        plan.check(batch)
        for kind, key, payload in zip(*(batch.column(name).to_pylist() for name in ("kind", "key", "payload")), strict=True):
            if kind == Kind.COUNT:
                counted = groups.setdefault((kind, None, None, key), [0, 0])
                counted[0] += 1
                counted[1] += int(payload or 0)
                continue
            if kind in plan.read_kinds and payload is not None:
                read.append((kind, payload))
            # Only alerts and dead letters are parsed: the metrics count them by kind and stage.
            alert_kind = json.loads(payload).get("kind") if kind == Kind.ALERT and payload else None
            stage = json.loads(payload).get("stage") if kind == Kind.DEAD_LETTER and payload else None
            groups.setdefault((kind, alert_kind, stage, None), [0, 0])[0] += 1
            _produce(producer, plan.topics[kind], key, payload, delivery)
        producer.poll(0)  # serve delivery reports as they come, not all at the end
    delivery.check(producer.flush(FLUSH_TIMEOUT_S))
    return groups, read


def _summary_batches(written: tuple[dict[Group, list[int]], list[tuple[str, str]]]) -> Iterator[pa.RecordBatch]:
    groups, read = written
    rows: list[tuple[Any, ...]] = [(*group, n, total if group[0] == Kind.COUNT else None, None) for group, (n, total) in groups.items()]
    rows += [(kind, None, None, None, 0, None, payload) for kind, payload in read]
    columns = {name: [row[i] for row in rows] for i, name in enumerate(_SUMMARY_ARROW.names)}
    yield pa.RecordBatch.from_pydict(columns, schema=_SUMMARY_ARROW)


class _Delivery:
    """Counts a task's records as they are acknowledged, keeping the first errors."""

    def __init__(self) -> None:
        self.sent = self.acknowledged = self.failed = 0
        self.first_errors: list[str] = []

    def __call__(self, error, message) -> None:
        if error is None:
            self.acknowledged += 1
            return
        self.failed += 1
        if len(self.first_errors) < 3:
            self.first_errors.append(f"{message.topic()}: {error}")

    def check(self, unflushed: int) -> None:
        if self.failed or unflushed or self.acknowledged != self.sent:
            raise OutputNotDelivered(
                f"{self.acknowledged} of {self.sent} records acknowledged, {self.failed} refused, {unflushed} still "
                f"queued after {FLUSH_TIMEOUT_S:.0f} s" + (f": {'; '.join(self.first_errors)}" if self.first_errors else "")
            )


def _produce(producer: Producer, topic: str, key: str | None, payload: str | None, delivery: _Delivery) -> None:
    while True:
        try:
            producer.produce(topic, value=payload, key=key, on_delivery=delivery)
            delivery.sent += 1
            return
        except BufferError:  # the local queue is full: let deliveries drain it
            producer.poll(0.05)
        except KafkaException as error:
            raise OutputNotDelivered(f"producing to {topic}: {error}") from error


def _producer(config: ClientConfig) -> Producer:
    identity = json.dumps(config, sort_keys=True, default=str)
    producer = _producers.get(identity)
    if producer is None:
        producer = _producers[identity] = Producer(config)
    return producer
