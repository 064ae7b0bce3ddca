"""The Python streaming reader of Kinesis Data Streams (``DataSourceStreamReader``).

Driver side: ``latestOffset`` lists the shards, works out which may be read now (parents
before children, :mod:`~streamstate_jobs.kinesis.planning`), and reads each readable shard
forward from where the previous batch ended, up to its share of ``maxRecordsPerTrigger``.
Kinesis has no end-offset call like Kafka's, so this read is how the driver learns where the
batch ends; it keeps only the last sequence number and the count of each shard. The batch's
end is those positions, checkpointed by Spark. ``partitions`` turns (start, end) into one
range per shard, and on the executors ``read`` fetches exactly that range again (from the
start position to the end sequence number), numbering the records from the start's ordinal.
So every batch, replays after a crash included, holds exactly the same records with the same
ordinals, and state checkpointed with it is exactly-once. The price is that every record is
fetched twice, once by the driver and once by an executor (see README, "Kinesis source").

The offsets also carry the stream's creation time, and before planning each batch the driver
compares it with the stream's: a stream deleted and created again under the checkpoint has
the same shard ids, and the comparison stops the query with a source reset before any old
position is used on the new stream (:mod:`~streamstate_jobs.kinesis.identity`).

As in the Kafka reader, PySpark 4.1 gives ``latestOffset`` no start offset: the reader keeps
the end of the last planned batch, restored on restart from the ``partitions`` call the engine
makes with the checkpointed offsets; ``Trigger.AvailableNow`` runs one batch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from streamstate_jobs.kinesis.client import ShardCursor, StreamClient
from streamstate_jobs.kinesis.identity import check_same_stream
from streamstate_jobs.kinesis.offsets import (
    ShardPosition,
    StreamPositions,
    created_from_json,
    offsets_from_json,
    offsets_to_json,
    shard_index,
    shard_order,
)
from streamstate_jobs.kinesis.options import KinesisOptions
from streamstate_jobs.kinesis.planning import read_in_shares, readable, reconcile
from streamstate_jobs.kinesis.arrow_batches import to_record_batch
from streamstate_jobs.kinesis.retry import KinesisSourceError

log = logging.getLogger(__name__)

ROWS_PER_ARROW_BATCH = 10_000
# Empty GetRecords answers in a row before a shard counts as caught up although Kinesis says
# it is behind: a sparse stretch of a shard can take several calls to cross.
MAX_EMPTY_FETCHES = 5
EMPTY_FETCH_PAUSE_S = 0.2


@dataclass(frozen=True)
class ShardRange(InputPartition):
    """Records of one shard after ``start`` up to and including sequence number ``end_after``."""

    options: KinesisOptions
    shard_id: str
    start: ShardPosition
    end_after: str
    end_n: int


class KinesisStreamReader(DataSourceStreamReader):
    """Planning on the driver, range reads on the executors; see the module docstring."""

    def __init__(self, options: KinesisOptions) -> None:
        self.options = options
        self._cursor: StreamPositions | None = None
        self._created: int | None = None  # creation time (epoch ms) of the stream _cursor was read from
        self._client: StreamClient | None = None
        self._cursors: dict[str, ShardCursor] = {}  # the driver's open iterators, by shard

    def __getstate__(self) -> dict:
        # The reader is pickled into executor tasks: clients and planning state stay behind.
        return {"options": self.options, "_cursor": None, "_created": None, "_client": None, "_cursors": {}}

    @property
    def client(self) -> StreamClient:
        if self._client is None:
            self._client = StreamClient(self.options)
        return self._client

    # ---- driver -------------------------------------------------------------------
    def initialOffset(self) -> dict:
        listed = self.client.list_shards()
        o = self.options
        if o.starting_position == "TRIM_HORIZON":
            start = ShardPosition()
        else:
            # LATEST is pinned as "arrived from now on", so a replay of the first batch reads the same records.
            start = ShardPosition(at_ms=o.starting_timestamp_ms if o.starting_position == "AT_TIMESTAMP" else int(time.time() * 1000))
        self._cursor = {s.shard_id: start for s in listed}
        self._created = self.client.created_ms()
        return offsets_to_json(o.stream, self._cursor, self._created)

    def latestOffset(self) -> dict:  # type: ignore[override]  # the form without admission control, which Spark still calls
        if self._cursor is None:
            self.initialOffset()
        assert self._cursor is not None
        self._check_same_stream()
        listed = self.client.list_shards()
        plan = reconcile(listed, self._cursor, ShardPosition())
        if plan.lost:
            self._data_loss(f"shard(s) {plan.lost} of {self.options.stream} expired (retention) before they were read to their end")
        if plan.added:
            log.info("Kinesis stream %s: new shard(s) %s", self.options.stream, plan.added)
        positions = dict(plan.positions)

        def fetch(shard_id: str, max_records: int | None) -> int:
            cursor = self._driver_cursor(shard_id, positions[shard_id])
            got = advance(cursor, max_records, self.options.max_records_per_fetch)
            positions[shard_id] = cursor.position
            return got

        read_in_shares(readable(listed, positions), self.options.max_records_per_trigger, fetch)
        self._cursor = positions
        return offsets_to_json(self.options.stream, positions, self._created)

    def _check_same_stream(self) -> None:
        """Raise SourceResetError if the stream was recreated since ``_cursor`` was read from it."""
        current = self.client.created_ms()
        check_same_stream(self.options.stream, self._created, current)
        self._created = current  # adopted when the offsets had none (a checkpoint from before)

    def _driver_cursor(self, shard_id: str, position: ShardPosition) -> ShardCursor:
        cursor = self._cursors.get(shard_id)
        if cursor is None or cursor.position != position:
            cursor = ShardCursor(self.client, shard_id, position)
            self._cursors[shard_id] = cursor
        return cursor

    def partitions(self, start: dict, end: dict) -> list[ShardRange]:
        begin = offsets_from_json(start, self.options.stream)
        finish = offsets_from_json(end, self.options.stream)
        self._cursor = finish
        self._created = created_from_json(end)
        ranges = []
        for shard_id in sorted(finish, key=shard_order):
            first, last = begin.get(shard_id, ShardPosition()), finish[shard_id]
            if last.n < first.n:
                raise KinesisSourceError(f"offsets of {shard_id} go backwards: {first} -> {last}")
            if last.n > first.n:
                assert last.after is not None
                ranges.append(ShardRange(self.options, shard_id, first, last.after, last.n))
        return ranges

    def commit(self, end: dict) -> None:
        """Nothing to do: progress lives in Spark's checkpoint."""

    def stop(self) -> None:
        self._cursors.clear()

    def _data_loss(self, message: str) -> None:
        if self.options.fail_on_data_loss:
            raise KinesisSourceError(f"{message}. Set failOnDataLoss=false to log a warning and continue instead.")
        log.warning("%s; continuing because failOnDataLoss=false", message)

    # ---- executors -------------------------------------------------------------------
    def read(self, partition: ShardRange) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return read_range(partition)


def advance(cursor: ShardCursor, max_records: int | None, per_fetch: int) -> int:
    """Read ``cursor``'s shard forward by up to ``max_records`` (None: until caught up); returns how many."""
    got, empty = 0, 0
    while not cursor.position.done and (max_records is None or got < max_records):
        limit = per_fetch if max_records is None else min(per_fetch, max_records - got)
        fetched = cursor.fetch(limit)
        got += len(fetched.records)
        if fetched.next_iterator is None:
            break
        if fetched.records:
            empty = 0
            if fetched.behind_ms == 0 and len(fetched.records) < limit:
                break  # at the tip of the shard
        elif fetched.behind_ms == 0 or empty >= MAX_EMPTY_FETCHES:
            break
        else:
            empty += 1
    return got


def read_range(r: ShardRange, rows_per_batch: int = ROWS_PER_ARROW_BATCH) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``r`` in sequence order, ordinals from ``r.start.n``, as Arrow batches.

    The range was planned from records the driver saw, so they must all be there again; a shard
    that ends, or a sequence that passes ``end_after``, before the planned count means records
    were trimmed (retention) or the stream was recreated: an error under failOnDataLoss.
    """
    o = r.options
    cursor = ShardCursor(StreamClient(o), r.shard_id, r.start)
    partition, end_seq = shard_index(r.shard_id), int(r.end_after)
    pending: list[dict] = []
    first_ordinal = r.start.n
    deadline = time.monotonic() + o.read_timeout_ms / 1000
    while cursor.position.n < r.end_n:
        fetched = cursor.fetch(min(o.max_records_per_fetch, r.end_n - cursor.position.n))
        records = fetched.records
        overshoot = [rec for rec in records if int(rec["SequenceNumber"]) > end_seq]
        if overshoot or (cursor.position.n >= r.end_n and cursor.position.after != r.end_after):
            _range_data_loss(r, f"sequence number {r.end_after} is not record {r.end_n - 1} of the shard as planned")
            records = [rec for rec in records if int(rec["SequenceNumber"]) <= end_seq]
            pending.extend(records)
            break
        pending.extend(records)
        if records:
            deadline = time.monotonic() + o.read_timeout_ms / 1000
        elif fetched.next_iterator is None and cursor.position.n < r.end_n:
            _range_data_loss(r, f"the shard ended after {cursor.position.n - r.start.n} of {r.end_n - r.start.n} planned records")
            break
        elif time.monotonic() > deadline:
            raise KinesisSourceError(
                f"timed out after {o.read_timeout_ms} ms reading {o.stream}/{r.shard_id} at record {cursor.position.n} "
                f"(planned end {r.end_n}, sequence number {r.end_after}); raise readTimeoutMs if Kinesis is slow"
            )
        else:
            time.sleep(EMPTY_FETCH_PAUSE_S)
        while len(pending) >= rows_per_batch:
            yield to_record_batch(pending[:rows_per_batch], o.stream, r.shard_id, partition, first_ordinal)
            first_ordinal += rows_per_batch
            pending = pending[rows_per_batch:]
    if pending:
        yield to_record_batch(pending, o.stream, r.shard_id, partition, first_ordinal)


def _range_data_loss(r: ShardRange, detail: str) -> None:
    message = (
        f"{r.options.stream}/{r.shard_id}: {detail}: records were trimmed (retention) or the stream was recreated"
    )
    if r.options.fail_on_data_loss:
        raise KinesisSourceError(f"{message}. Set failOnDataLoss=false to continue instead.")
    log.warning("%s; continuing because failOnDataLoss=false", message)
