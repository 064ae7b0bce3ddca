"""The Spark processor's visit without Spark, over an in-memory store: the collector is paused
while a bucket is visited and comes back after, whatever the visit did."""

from __future__ import annotations

import gc

import pandas as pd
import pyarrow as pa
import pytest

from bench.profile_buckets import Clock
from streamstate.state import StateSpec
from streamstate.state.buckets import TICK_MS, MemoryBucketStore
from streamstate.state.keyrun import INPUT_COLUMNS, OUTPUT, SNAPSHOT, Plan
from streamstate.state.packing import BLOB, BUCKET, pack
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


def _visit(func, store=None) -> list[tuple]:
    processor = BucketProcessor(Plan.of(StateSpec.batch_function(func)), "ProcessingTime", 10, TICK_MS)
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
