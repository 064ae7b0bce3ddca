"""PySpark's daemon collects garbage in a worker after every task; through the jobs' launcher
that collection walks only what the last task allocated (streamstate_jobs.spark_python): a
task run by a reused worker finds the heap that survived its earlier tasks frozen."""

from __future__ import annotations

import collections

import pytest

pytestmark = pytest.mark.spark


def _worker_and_its_collector(batches):
    import gc
    import os

    import pyarrow as pa

    for _ in batches:
        pass
    yield pa.RecordBatch.from_pylist([{"pid": os.getpid(), "collector": type(gc.collect).__name__, "frozen": gc.get_freeze_count()}])


def test_a_reused_worker_finds_what_its_earlier_tasks_left_frozen(spark):
    query = spark.range(1, numPartitions=1).mapInArrow(_worker_and_its_collector, "pid long, collector string, frozen long")
    runs = [tuple(query.collect()[0]) for _ in range(4)]
    assert {collector for _, collector, _ in runs} == {"BetweenTasksCollector"}, runs
    seen: collections.Counter[int] = collections.Counter()
    reused = []
    for pid, _, frozen in runs:
        if seen[pid]:
            reused.append(frozen)
        seen[pid] += 1
    assert reused, f"Spark reuses an idle worker for the next task: {runs}"
    assert all(frozen > 10_000 for frozen in reused), f"the modules a worker imported are frozen after its first task: {runs}"
