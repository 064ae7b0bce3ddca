"""The Spark processor's visit without Spark, over an in-memory store: the collector is paused
while a bucket is visited and comes back after, whatever the visit did; the processor travels
pickled as Spark sends it, and unpickling it imports PySpark and nothing heavier."""

from __future__ import annotations

import gc
import json
import subprocess
import sys

import pandas as pd
import pyarrow as pa
import pytest

from pyspark import cloudpickle

from bench.profile_buckets import Clock
from streamstate_jobs.sessions import job as sessions_job
from streamstate_jobs.validation import validated_spec
from streamstate_pipeline.settings import Settings
from streamstate.state import StateSpec
from streamstate.state.buckets import TICK_MS, MemoryBucketStore
from streamstate.state.keyrun import INPUT_COLUMNS, OUTPUT, SNAPSHOT, Plan
from streamstate.state.packing import BLOB, BUCKET, pack
from streamstate.state.operators import bucket_processor
from streamstate.state.processor import BucketProcessor


def _packed(keys: list[str]) -> pd.DataFrame:
    table = pa.table({
        INPUT_COLUMNS[0]: keys,
        INPUT_COLUMNS[1]: list(range(len(keys))),
        INPUT_COLUMNS[2]: pa.array([None] * len(keys), pa.int64()),
        INPUT_COLUMNS[3]: ["t"] * len(keys),
        INPUT_COLUMNS[4]: pa.array([0] * len(keys), pa.int32()),
        INPUT_COLUMNS[5]: list(range(len(keys))),
        BUCKET: pa.array([0] * len(keys), pa.int32()),
    })
    return pa.Table.from_batches(list(pack(table.to_batches()))).select([BLOB]).to_pandas()


def _visit(func, store=None, as_sent=False) -> list[tuple]:
    processor = BucketProcessor(Plan.of(StateSpec.batch_function(func)), "ProcessingTime", 10, TICK_MS)
    if as_sent:  # pickled as Spark sends it to the workers
        processor = cloudpickle.loads(cloudpickle.dumps(processor))
    processor.store = store or MemoryBucketStore()
    frames = processor.handleInputRows((0,), iter([_packed(["a", "b"])]), Clock())
    return [tuple(row) for frame in frames for row in frame.itertuples(index=False)]


def test_the_collector_is_paused_during_a_visit_and_back_after():
    seen = []

    def count(key, values, state):
        seen.append(gc.isenabled())
        state.update(len(values))
        return [key]

    assert gc.isenabled()
    rows = _visit(count)
    assert seen == [False, False]
    assert gc.isenabled()
    assert [(kind, key, payload) for kind, key, payload, *_ in rows] == [
        (OUTPUT, "a", '"a"'), (SNAPSHOT, "a", "1"), (OUTPUT, "b", '"b"'), (SNAPSHOT, "b", "1"),
    ]


def test_the_visits_objects_are_freed_before_the_collector_is_back_on(monkeypatch):
    """Enabled over a visit's rows, values and states still alive, the collector's first run
    scanned every one of them (about 10,000 objects for this visit; 23 ms a bucket of 2,500
    users of the sessions job): a visit leaves only its output behind when the collector comes back."""
    keys = [f"user-{i}" for i in range(5_000)]
    processor = BucketProcessor(Plan.of(StateSpec.batch_function(lambda key, values, state: state.update(len(values)))),
                                "ProcessingTime", 10, TICK_MS)
    processor.store = MemoryBucketStore()
    packed = _packed(keys)
    tracked_at_enable = []
    enable = gc.enable
    monkeypatch.setattr(gc, "enable", lambda: (tracked_at_enable.append(len(gc.get_objects(0))), enable())[1])
    gc.collect()
    before = len(gc.get_objects(0))
    frames = list(processor.handleInputRows((0,), iter([packed]), Clock()))
    assert sum(len(frame) for frame in frames) == len(keys)  # a snapshot each: the visit did its work
    assert len(tracked_at_enable) == 1 and tracked_at_enable[0] - before < 1_000, (before, tracked_at_enable)


def test_a_visit_that_fails_leaves_the_collector_on():
    class Broken(MemoryBucketStore):
        def load_hot(self):
            raise RuntimeError("state store unavailable")

    with pytest.raises(RuntimeError, match="unavailable"):
        _visit(lambda key, values, state: [], Broken())
    assert gc.isenabled()


def test_a_collector_the_caller_turned_off_stays_off():
    gc.disable()
    try:
        _visit(lambda key, values, state: [])
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_processor_sent_pickled_visits_as_before():
    def count(key, values, state):
        state.update(len(values) + 1)
        return [key]

    assert _visit(count, as_sent=True) == _visit(count)
    assert [(kind, key, payload) for kind, key, payload, *_ in _visit(count, as_sent=True)] == [
        (OUTPUT, "a", '"a"'), (SNAPSHOT, "a", "2"), (OUTPUT, "b", '"b"'), (SNAPSHOT, "b", "2"),
    ]


HEAVY_MODULES = ("pandas", "pyarrow", "numpy", "pydantic", "streamstate.state.operators", "streamstate_jobs.sessions.job")


def test_unpickling_a_jobs_processor_imports_nothing_heavier_than_pyspark(tmp_path):
    # Spark unpickles the processor in a fresh driver-side process at each query's start only
    # to call init(); what that process imports is part of every query's first batch.
    processor = bucket_processor(validated_spec(sessions_job.state_spec(Settings())), ordered_by_offset=True)
    pickled = tmp_path / "processor.pickle"
    pickled.write_bytes(cloudpickle.dumps(processor))
    script = (
        "import json, pickle, sys; "
        f"processor = pickle.loads(open({str(pickled)!r}, 'rb').read()); "
        f"print(json.dumps([name for name in {HEAVY_MODULES!r} if name in sys.modules]))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == []
