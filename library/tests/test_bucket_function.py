"""A bucket function (``StateSpec.over_buckets``) through the engine's visit, without Spark:
its records as one table, its state kept between visits, one timer on the watermark, its rows,
and a clear refusal of a state the per-key engine wrote."""

from __future__ import annotations

import pyarrow as pa
import pytest

from streamstate.state import Emit, StateSpec
from streamstate.state import bucket_function
from streamstate.state.bucket_function import BucketResult
from streamstate.state.buckets import TICK_MS, Bucket, MemoryBucketStore
from streamstate.state.keyrun import DEAD_LETTER, INPUT_COLUMNS, SNAPSHOT, Plan
from streamstate.state.state import StateLayoutError

IDLE_MS = 100


def totals(state, records, watermark_ms):
    """Per key: the sum of its values; a key idle IDLE_MS past its latest record is dropped."""
    state = dict(state or {})
    changed = set()
    if records is not None:
        for key, amount, ts in zip(*(records.column(n).to_pylist() for n in (bucket_function.KEY_COLUMN, "amount", "ts"))):
            total, latest = state.get(key, (0, ts))
            state[key] = (total + amount, max(latest, ts))
            changed.add(key)
    gone = sorted(k for k, (_, latest) in state.items() if latest + IDLE_MS <= watermark_ms and k not in changed)
    for key in gone:
        del state[key]
    outputs = [Emit("total", key, str(state[key][0])) for key in sorted(changed)]
    snapshots = [(key, f'{{"total":{state[key][0]}}}') for key in sorted(changed)] + [(key, None) for key in gone]
    timer = min((latest + IDLE_MS for _, latest in state.values()), default=None)
    return BucketResult(state or None, outputs, snapshots, timer)


def _per_key(key, values, state):  # the spec's reference function (not what these visits run)
    return []


SPEC = StateSpec.columnar_function(_per_key).event_time("ts").over_buckets(totals)


def _table(rows: list[tuple[str, int, int]]) -> pa.Table:
    keys = pa.array([r[0] for r in rows], pa.string())
    value = pa.StructArray.from_arrays(
        [pa.array([r[1] for r in rows], pa.int64()), pa.array([r[2] for r in rows], pa.int64())], names=["amount", "ts"],
    )
    n = len(rows)
    columns = [keys, value, pa.array([r[2] for r in rows], pa.int64()), pa.array(["t"] * n), pa.array([0] * n, pa.int32()),
               pa.array(range(n), pa.int64())]
    return pa.Table.from_arrays(columns, names=list(INPUT_COLUMNS))


def test_a_bucket_function_gets_its_records_as_one_table_and_keeps_its_state_and_one_timer():
    plan, store = Plan.of(SPEC), MemoryBucketStore()
    rows = bucket_function.visit(plan, store, _table([("a", 2, 10), ("b", 5, 20), ("a", 3, 30)]), watermark_ms=0)
    assert [(r[0], r[1], r[2]) for r in rows] == [
        ("total", "a", "5"), ("total", "b", "5"), (SNAPSHOT, "a", '{"total":5}'), (SNAPSHOT, "b", '{"total":5}'),
    ]
    assert store.timers == {120}  # b's latest (20) + IDLE_MS; a's is 130

    # The timer fires (Spark deletes it): b goes, a stays with the next timer.
    store.timers.discard(120)
    rows = bucket_function.visit(plan, store, None, watermark_ms=125, fired_ms=120)
    assert [(r[0], r[1], r[2]) for r in rows] == [(SNAPSHOT, "b", None)]
    assert store.timers == {130}

    # New records move the timer: the one set before is deleted, not left to fire for nothing.
    bucket_function.visit(plan, store, _table([("a", 1, 200)]), watermark_ms=125)
    assert store.timers == {300}
    store.timers.discard(300)
    rows = bucket_function.visit(plan, store, None, watermark_ms=300, fired_ms=300)
    assert [(r[0], r[1]) for r in rows] == [(SNAPSHOT, "a")] and store.timers == set()
    assert bucket_function.visit(plan, store, None, watermark_ms=400) == []


def test_an_output_over_the_limit_is_a_dead_letter_under_its_key_and_the_rest_is_written():
    def big(state, records, watermark_ms):
        return BucketResult(None, [Emit("x", "k1", "y" * 50), Emit("x", "k2", "ok")], [("k3", "z" * 50)], None)

    plan = Plan.of(StateSpec.columnar_function(_per_key).event_time("ts").max_output_bytes(10).over_buckets(big))
    rows = bucket_function.visit(plan, MemoryBucketStore(), None, watermark_ms=0)
    assert [(r[0], r[1]) for r in rows] == [(DEAD_LETTER, "k1"), ("x", "k2"), (DEAD_LETTER, "k3")]
    assert "exceeds max_output_bytes=10" in rows[0][3]


def _per_key_totals(key, values, state):
    """The per-key form of ``totals``, with a deadline far enough ahead to be filed in the wheel."""
    total, latest = state.get_option((0, 0))
    for amount, ts in zip(values["amount"], values["ts"]):
        total, latest = total + amount, max(latest, ts)
    state.update((total, latest))
    state.set_timeout_timestamp(latest + 10 * TICK_MS)
    return []


def _per_key_bucket(store: MemoryBucketStore, records: list[tuple[str, int, int]]) -> None:
    """The per-key engine's visit, with room for one hot key: the others go cold, their deadlines to the wheel."""
    plan = Plan.of(StateSpec.columnar_function(_per_key_totals).event_time("ts"))
    bucket = Bucket(plan, store, 0, 0, 0, 1, TICK_MS).load()
    by_key: dict = {}
    for offset, (key, amount, ts) in enumerate(records):
        by_key.setdefault(key, []).append((key, {"amount": amount, "ts": ts}, ts, "t", 0, offset))
    bucket.apply_records(by_key.items())
    bucket.save()


def test_a_checkpoint_the_per_key_engine_wrote_is_carried_on_by_from_keys():
    store = MemoryBucketStore()
    _per_key_bucket(store, [("a", 2, 10), ("b", 5, 20), ("c", 1, 30)])
    _per_key_bucket(store, [("a", 3, 40)])  # a hot again: its cold copy is older than its hot entry
    assert store.cold and store.wheel and store.timers  # the per-key layout in full: hot, cold, wheel, timers

    handed: list[dict] = []

    def from_keys(states):
        handed.append(states)
        return dict(states)

    plan = Plan.of(StateSpec.columnar_function(_per_key).event_time("ts").over_buckets(totals, from_keys=from_keys))
    rows = bucket_function.visit(plan, store, _table([("b", 1, 50)]), watermark_ms=0)
    assert handed == [{"a": (5, 40), "b": (5, 20), "c": (1, 30)}]
    assert [(r[0], r[1], r[2]) for r in rows] == [("total", "b", "6"), (SNAPSHOT, "b", '{"total":6}')]
    assert store.cold == {} and store.wheel == {} and store.timers == {30 + IDLE_MS}  # the per-key timers deleted
    bucket_function.visit(plan, store, None, watermark_ms=0)
    assert len(handed) == 1  # carried on once: the bucket's state is in the new layout from then on


def test_a_per_key_checkpoint_without_from_keys_and_the_other_way_round_are_refused_with_what_to_do():
    store = MemoryBucketStore()
    _per_key_bucket(store, [("a", 2, 10)])
    with pytest.raises(StateLayoutError, match="start the query from a new checkpoint"):
        bucket_function.visit(Plan.of(SPEC), store, None, watermark_ms=0)

    store = MemoryBucketStore()
    bucket_function.visit(Plan.of(SPEC), store, _table([("a", 2, 10)]), watermark_ms=0)
    per_key = Plan.of(StateSpec.columnar_function(_per_key).event_time("ts"))
    with pytest.raises(StateLayoutError, match="run it with its bucket function"):
        Bucket(per_key, store, 0, 0, 0, 100, TICK_MS).load()


def test_a_function_that_returns_something_else_is_named():
    plan = Plan.of(StateSpec.columnar_function(_per_key).event_time("ts").over_buckets(lambda s, r, w: None))
    with pytest.raises(TypeError, match="returns a BucketResult"):
        bucket_function.visit(plan, MemoryBucketStore(), None, watermark_ms=0)


@pytest.mark.parametrize("spec", [
    StateSpec.columnar_function(_per_key),
    StateSpec.columnar_function(_per_key).event_time("ts").timeout("1 minute"),
    StateSpec.columnar_function(_per_key).event_time("ts").initial_state([("a", 1)]),
])
def test_over_buckets_needs_event_time_and_nothing_per_key(spec):
    with pytest.raises(ValueError, match="keeps its own timers on the watermark"):
        spec.over_buckets(totals)


@pytest.mark.parametrize("after", [
    lambda spec: spec.timeout("1 minute"), lambda spec: spec.initial_state([("a", 1)]),
])
def test_what_over_buckets_refuses_is_refused_after_it_too(after):
    with pytest.raises(ValueError, match="runs a bucket function"):
        after(SPEC)
