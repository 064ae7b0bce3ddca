"""A job's bucket visits without Spark: what the state engine's Python costs per key.

    .venv/bin/python -m bench.profile_buckets [--job sessions|anomalies] [--keys 20000]
        [--records-per-batch 200000] [--batches 1] [--settle] [--profile]

Generates the benchmark's fixed-seed records with the project's producers, lays them out as
the job's stateful operator receives them (the validated columns the rule reads plus the
dead-letter columns, as one value struct; typed by the job's Spark schema), packs them per
bucket with the engine's own ``pack``, and runs ``BucketProcessor.handleInputRows`` for every
bucket over in-memory stores (``MemoryBucketStore``), batch after batch, the watermark
following the events as the job's would. With ``--settle`` a batch without data follows, as
an ``availableNow`` run of the job ends: each bucket's expired timers fire at the watermark the
last batch moved on to (the sessions job folds its users' held events there and writes their
sessions and alerts). A visit runs whatever the job's spec runs: the anomalies job's function key
by key, the sessions job's bucket function (``StateSpec.over_buckets``) once for the bucket's
users together; the time per key divides by every generated key. Prints the time per batch
and per key, the state calls a state server would have served, and the hot sets' size; with
``--profile`` the functions cProfile finds busiest in the last batch.

What it leaves out is Spark's side: the shuffle, the Arrow exchange with the JVM, the state
server's round trips (counted, not timed), RocksDB. docs/profile.md compares the two.
Buckets are chosen by CRC-32 here (Spark: ``xxhash64``); only their sizes matter.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import time
import zlib
from collections import Counter
from dataclasses import dataclass
from functools import partial

import pandas as pd
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema

from bench.__main__ import SEED
from streamstate_pipeline.contracts import Metric, UserEvent
from streamstate_jobs.anomalies import job as anomalies_job
from streamstate_jobs.sessions import job as sessions_job
from streamstate.state.buckets import MemoryBucketStore
from streamstate.state.keyrun import INPUT_COLUMNS
from streamstate.state.packing import BLOB, BUCKET, pack
from streamstate.state.operators import bucket_processor
from streamstate_jobs.validation import DEAD_LETTER_COLUMNS, validated_schema, validated_spec
from streamstate_producers.generators import MetricGenerator, UserEventGenerator
from streamstate_pipeline.settings import Settings

JOBS = {
    "sessions": (sessions_job, UserEvent, "user_id", lambda keys: UserEventGenerator(seed=SEED, users=keys, topic="bench")),
    "anomalies": (anomalies_job, Metric, "series_id", lambda keys: MetricGenerator(seed=SEED, series=keys, topic="bench", anomaly_rate=0.001)),
}
PARTITIONS = 4


@dataclass
class Expired:
    """The ExpiredTimerInfo a timer's visit reads."""

    expiry_ms: int

    def getExpiryTimeInMs(self) -> int:  # noqa: N802 - Spark's ExpiredTimerInfo interface
        return self.expiry_ms


@dataclass
class Clock:
    """The TimerValues a visit reads: the watermark follows the batches, processing time is fixed."""

    watermark_ms: int = -1

    def getCurrentWatermarkInMs(self) -> int:  # noqa: N802 - Spark's TimerValues interface
        return self.watermark_ms

    def getCurrentProcessingTimeInMs(self) -> int:  # noqa: N802
        return 0


def packed_batch(records: list[dict], first_offset: int, key: str, value_type: pa.StructType, buckets: int) -> pa.Table:
    """The records as the operator's input rows, packed per bucket by the engine."""
    rows = [
        record | {"topic": "bench", "partition": i % PARTITIONS, "offset": first_offset + i, "kafka_ts": record["ts"]}
        for i, record in enumerate(records)
    ]
    fields = [pa.array([row.get(f.name) for row in rows], f.type) for f in value_type]
    value = pa.StructArray.from_arrays(fields, fields=list(value_type))
    named = dict(zip(value_type.names, fields))
    keys = named[key]
    table = pa.Table.from_arrays(
        [keys, value, named["ts"], named["topic"], named["partition"], named["offset"],
         pa.array([zlib.crc32(k.encode()) % buckets for k in keys.to_pylist()], pa.int32())],
        names=[*INPUT_COLUMNS, BUCKET],
    )
    return pa.Table.from_batches(list(pack(iter(table.to_batches(max_chunksize=10_000)))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", choices=sorted(JOBS), default="sessions")
    parser.add_argument("--keys", type=int, default=20_000, help="users or series")
    parser.add_argument("--records-per-batch", type=int, default=200_000)
    parser.add_argument("--batches", type=int, default=1)
    parser.add_argument("--settle", action="store_true", help="end with a batch without data: the expired timers fire")
    parser.add_argument("--profile", action="store_true", help="cProfile the last batch")
    args = parser.parse_args()

    job, contract, key, generator = JOBS[args.job]
    settings = Settings()
    spec = job.state_spec(settings)
    schema = to_arrow_schema(validated_schema(contract))
    value_type = pa.struct([schema.field(name) for name in (*job.STATE_COLUMNS, *DEAD_LETTER_COLUMNS)])

    total = args.records_per_batch * args.batches
    print(f"generating {total:,} {args.job} records over {args.keys:,} keys ...", flush=True)
    records = [json.loads(record.value) for record in generator(args.keys).take(total)]
    batches = []
    for start in range(0, total, args.records_per_batch):
        chunk = records[start:start + args.records_per_batch]
        packed = packed_batch(chunk, start, key, value_type, spec.bucket_count)
        batches.append((packed, max(r["ts"] for r in chunk)))

    processor = bucket_processor(validated_spec(spec), ordered_by_offset=True)  # as map_validated builds it
    stores: dict[int, MemoryBucketStore] = {}
    clock = Clock()

    def visit_all(packed: pa.Table) -> int:
        # One visit per bucket with all its blobs, as Spark groups the packed rows by bucket.
        blobs_by_bucket: dict[int, list[bytes]] = {}
        for bucket, blob in zip(packed.column(BUCKET).to_pylist(), packed.column(BLOB).to_pylist()):
            blobs_by_bucket.setdefault(bucket, []).append(blob)
        rows = 0
        for bucket, blobs in blobs_by_bucket.items():
            processor.store = stores.setdefault(bucket, MemoryBucketStore())
            for frame in processor.handleInputRows((bucket,), iter([pd.DataFrame({BLOB: blobs})]), clock):
                rows += len(frame)
        return rows

    def settle_all() -> int:
        # The batch without data: Spark calls each bucket whose timer the watermark has passed.
        rows = 0
        for bucket, store in stores.items():
            due = [at for at in store.timers if at <= clock.watermark_ms]
            if not due:
                continue
            processor.store = store
            for frame in processor.handleExpiredTimer((bucket,), clock, Expired(min(due))):
                rows += len(frame)
        return rows

    # (name, what it reads, the visit, its newest event time or None, the keys it is counted over)
    visits = [(f"batch {index}", f"{args.records_per_batch:,} records", partial(visit_all, packed), newest_ts,
               len(set(packed_keys(packed))))
              for index, (packed, newest_ts) in enumerate(batches)]
    if args.settle:
        visits.append(("batch without data", "expired timers", settle_all, None, args.keys))
    for index, (name, what, visit, newest_ts, touched) in enumerate(visits):
        last = index == len(visits) - 1
        profiler = cProfile.Profile() if args.profile and last else None
        started = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        rows = visit()
        if profiler is not None:
            profiler.disable()
        seconds = time.perf_counter() - started
        calls = sum((store.calls for store in stores.values()), Counter())
        hot_bytes = sum(len(store.hot or b"") for store in stores.values())
        note = " (under cProfile)" if profiler is not None else ""
        print(
            f"{name}: {what}, {touched:,} keys: {seconds * 1000:,.0f} ms{note} = "
            f"{seconds / touched * 1000:.3f} ms/key; {rows:,} output rows; state calls so far {dict(calls)}; "
            f"hot sets {hot_bytes / 1e6:.1f} MB",
            flush=True,
        )
        if newest_ts is not None:
            clock.watermark_ms = newest_ts - settings.watermark_delay_ms
        if profiler is not None:
            pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


def packed_keys(packed: pa.Table):
    """Every key of a packed batch (read back from the blobs)."""
    for blob in packed.column(BLOB).to_pylist():
        yield from pa.ipc.open_stream(blob).read_all().column(0).to_pylist()


if __name__ == "__main__":
    main()
