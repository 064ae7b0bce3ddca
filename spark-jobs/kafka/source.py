"""The Python streaming reader of Kafka (``pyspark.sql.datasource.DataSourceStreamReader``).

Driver side (one long-lived reader per query): ``initialOffset`` resolves
``startingOffsets``; ``latestOffset`` finds the true end of every subscribed partition
(:class:`PartitionView`) and applies ``maxOffsetsPerTrigger`` from where the previous
batch ended; ``partitions`` turns a (start, end) pair into one range per partition.
PySpark 4.1 gives a Python ``latestOffset`` no start offset, so the reader tracks the
end of the last planned batch itself; on restart the engine calls
``partitions(last, last)`` with the newest checkpointed offsets first
(``setLatestSeenOffset``), which is where that cursor is restored from.

PySpark 4.1 Python sources have no admission control, so ``Trigger.AvailableNow`` falls
back to a single batch: everything up to the end seen at start, but only one
``maxOffsetsPerTrigger``-sized batch when that option is set.

Executor side: ``read`` consumes one partition range with its own consumer
(``assign`` at the start offset, never ``subscribe``) and yields Arrow record batches.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, Message, TopicPartition
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from streamstate.jobs.kafka.broker import KafkaSourceError, PartitionView
from streamstate.jobs.kafka.offsets import (
    EARLIEST,
    LATEST,
    Offsets,
    describe,
    offsets_from_json,
    offsets_to_json,
    rate_limit,
)
from streamstate.jobs.kafka.options import SourceOptions
from streamstate.jobs.kafka.records import to_record_batch
from streamstate.kafka_clients import reader_config

log = logging.getLogger(__name__)

ROWS_PER_ARROW_BATCH = 10_000


@dataclass(frozen=True)
class KafkaRange(InputPartition):
    """Offsets [start, end) of one topic-partition: one Spark input partition."""

    topic: str
    partition: int
    start: int
    end: int
    client_conf: dict[str, str] = field(repr=False)  # may hold secrets: kept out of logged reprs
    poll_timeout_ms: int
    fail_on_data_loss: bool


class KafkaStreamReader(DataSourceStreamReader):
    """Offset planning on the driver, range reads on the executors; see the module docstring."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._cursor: Offsets | None = None
        self._view: PartitionView | None = None

    def __getstate__(self) -> dict:
        # The reader is pickled into executor tasks: clients and planning state stay behind.
        return {"options": self.options, "_cursor": None, "_view": None}

    @property
    def view(self) -> PartitionView:
        if self._view is None:
            self._view = PartitionView(self.options.client_conf, self.options.end_probe_timeout_ms)
        return self._view

    # ---- driver -------------------------------------------------------------------
    def initialOffset(self) -> dict:
        tps = self._existing_partitions()
        earliest, ends = self.view.ends(tps)
        starting = self.options.starting
        if starting == "earliest":
            initial = earliest
        elif starting == "latest":
            initial = ends
        else:
            assert isinstance(starting, dict)
            missing = sorted(set(tps) - set(starting))
            if missing:
                raise KafkaSourceError(
                    "startingOffsets must give every partition of the subscribed topics "
                    f"(-2 earliest, -1 latest); missing: {', '.join(f'{t}[{p}]' for t, p in missing)}"
                )
            unknown = sorted(set(starting) - set(tps))
            if unknown:
                raise KafkaSourceError(f"startingOffsets names partitions that do not exist: {describe({tp: starting[tp] for tp in unknown})}")
            initial = {
                tp: earliest[tp] if o == EARLIEST else ends[tp] if o == LATEST else o for tp, o in starting.items()
            }
        # The first batch starts here: resolving "latest" again later could move it.
        self._cursor = initial
        return offsets_to_json(initial)

    def latestOffset(self) -> dict:
        tps = self._existing_partitions(known=self._cursor)
        earliest, ends = self.view.ends(tps)
        start = dict(self._cursor) if self._cursor is not None else offsets_from_json(self.initialOffset())
        start = {tp: o for tp, o in start.items() if tp in ends}
        for tp in ends:
            # A partition that appeared since the last batch is read from its beginning, as Spark does.
            start.setdefault(tp, earliest[tp])
        shrunk = {tp: ends[tp] for tp in ends if ends[tp] < start[tp]}
        if shrunk:
            self._data_loss(f"partition end offsets went backwards (topic deleted and recreated?): now {describe(shrunk)}, "
                            f"previously read up to {describe({tp: start[tp] for tp in shrunk})}")
            start.update(shrunk)
        limit = self.options.max_offsets_per_trigger
        latest = rate_limit(start, ends, limit) if limit else ends
        self._cursor = latest
        return offsets_to_json(latest)

    def partitions(self, start: dict, end: dict) -> list[KafkaRange]:
        begin, finish = offsets_from_json(start), offsets_from_json(end)
        self._cursor = finish
        new = [tp for tp in finish if tp not in begin]
        if new:
            begin.update(self.view.earliest(new))
        earliest = self.view.earliest([tp for tp in finish if begin[tp] < finish[tp]])
        lost = {tp: begin[tp] for tp, low in earliest.items() if begin[tp] < low}
        if lost:
            self._data_loss(f"records before the earliest available offsets were removed: wanted {describe(lost)}, "
                            f"earliest now {describe({tp: earliest[tp] for tp in lost})}")
            begin.update({tp: earliest[tp] for tp in lost})
        o = self.options
        return [
            KafkaRange(t, p, begin[(t, p)], finish[(t, p)], o.client_conf, o.poll_timeout_ms, o.fail_on_data_loss)
            for (t, p) in sorted(finish)
            if begin[(t, p)] < finish[(t, p)]
        ]

    def commit(self, end: dict) -> None:
        """Nothing to do: progress lives in Spark's checkpoint, not in consumer groups."""

    def stop(self) -> None:
        if self._view is not None:
            self._view.close()

    def _existing_partitions(self, known: Offsets | None = None) -> list[tuple[str, int]]:
        tps, missing = self.view.partitions(self.options.topics)
        if missing:
            previously_read = {t for t, _ in (known or {})}
            deleted = [t for t in missing if t in previously_read]
            never_seen = [t for t in missing if t not in previously_read]
            if never_seen:
                raise KafkaSourceError(
                    f"Kafka topic(s) {never_seen} do not exist on {self.options.client_conf['bootstrap.servers']}; "
                    "create them first (subscribe does not create topics)"
                )
            self._data_loss(f"Kafka topic(s) {deleted} were deleted while being read")
        return tps

    def _data_loss(self, message: str) -> None:
        if self.options.fail_on_data_loss:
            raise KafkaSourceError(f"{message}. Set failOnDataLoss=false to log a warning and continue instead.")
        log.warning("%s; continuing because failOnDataLoss=false", message)

    # ---- executors -------------------------------------------------------------------
    def read(self, partition: KafkaRange) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return read_range(partition)


def read_range(r: KafkaRange, rows_per_batch: int = ROWS_PER_ARROW_BATCH) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``r`` in offset order as Arrow batches of ``KAFKA_SCHEMA``.

    Gaps inside the range are normal (compaction, transaction markers). The partition
    ending below ``r.end`` means records were deleted: an error under failOnDataLoss.
    """
    consumer = Consumer(reader_config(r.client_conf, "source"))
    try:
        consumer.assign([TopicPartition(r.topic, r.partition, r.start)])
        pending: list[Message] = []
        position = r.start
        deadline = time.monotonic() + r.poll_timeout_ms / 1000
        while position < r.end:
            messages = consumer.consume(min(rows_per_batch, r.end - position), timeout=0.5)
            if messages:
                deadline = time.monotonic() + r.poll_timeout_ms / 1000
            elif time.monotonic() > deadline:
                raise KafkaSourceError(
                    f"timed out after {r.poll_timeout_ms} ms reading {r.topic}[{r.partition}] at offset {position} "
                    f"(planned end {r.end}); raise kafkaConsumer.pollTimeoutMs if the broker is slow"
                )
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise KafkaSourceError(f"reading {r.topic}[{r.partition}] failed: {error.str()}")
                    if message.offset() < r.end:
                        _range_data_loss(r, message.offset())
                    position = r.end
                    break
                if message.offset() >= r.end:
                    position = r.end
                    break
                pending.append(message)
                position = message.offset() + 1
            if len(pending) >= rows_per_batch:
                yield to_record_batch(pending, r.topic, r.partition)
                pending = []
        if pending:
            yield to_record_batch(pending, r.topic, r.partition)
    finally:
        consumer.close()


def _range_data_loss(r: KafkaRange, true_end: int) -> None:
    message = (
        f"{r.topic}[{r.partition}] ends at offset {true_end}, below the planned end {r.end}: "
        "records were deleted (topic recreated or truncated)"
    )
    if r.fail_on_data_loss:
        raise KafkaSourceError(f"{message}. Set failOnDataLoss=false to continue instead.")
    log.warning("%s; continuing because failOnDataLoss=false", message)
