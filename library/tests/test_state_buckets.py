"""The bucket store without Spark: keys move between the hot set and the cold map without
changing what any key sees, timers fire at each key's exact deadline whether the key is hot
or cold, and a batch costs state calls for the keys it touches, not for the keys held.

A tiny driver plays Spark's part (visits per batch: data first, then expired timers in time
order) over an in-memory :class:`BucketStore` that counts calls; its results are compared
with the in-memory reference driver, which has no buckets at all."""

from __future__ import annotations

import pickle
import random
from collections import Counter

import pyarrow as pa
from hypothesis import given, settings as hsettings, strategies as st

from streamstate.state import StateSpec
from streamstate.state.buckets import COMPRESS_OVER_BYTES, TICK_MS, Bucket, MemoryBucketStore
from streamstate.state.keyrun import DEAD_LETTER, OUTPUT, SNAPSHOT, Plan
from streamstate.state.tester import StateTester, by_key


class OneBucket:
    """Spark's part for one bucket in event time: per batch, a visit with the data, then one
    visit per expired timer in time order; the watermark moves after the batch, and a batch
    without data runs when it moved (as Spark's no-data batch does)."""

    def __init__(self, spec: StateSpec, hot_capacity: int):
        self.plan = Plan.of(spec)
        self.store = MemoryBucketStore()
        self.hot_capacity = hot_capacity
        self.watermark = 0
        self.max_time: int | None = None
        self.rows: list[tuple] = []

    def _bucket(self) -> Bucket:
        return Bucket(self.plan, self.store, self.watermark, 0, self.watermark, self.hot_capacity, TICK_MS).load()

    def _timers(self) -> None:
        while True:
            expired = sorted(t for t in self.store.timers if t <= self.watermark)
            if not expired:
                return
            self.store.timers.discard(expired[0])
            bucket = self._bucket()
            bucket.timer_fired(expired[0])
            bucket.apply_due()
            bucket.save()
            self.rows += bucket.rows

    def batch(self, records: list[tuple]) -> None:
        by_key: dict = {}
        for offset, (key, value, time) in enumerate(records):
            by_key.setdefault(key, []).append((key, value, time, "t", 0, offset))
        if by_key:
            bucket = self._bucket()
            bucket.apply_records(by_key.items())
            bucket.apply_due()
            bucket.save()
            self.rows += bucket.rows
        self._timers()
        times = [r[2] for r in records if r[2] is not None]
        if times:
            self.max_time = max([*times, self.max_time or times[0]])
            moved = max(self.watermark, self.max_time)
            if moved > self.watermark:
                self.watermark = moved
                self._timers()


def count_with_timeout(key, value, state):
    if state.is_timing_out():
        return ("closed", state.get())
    state.update(state.get_option(0) + 1)
    return ("seen", state.get())


SPEC = StateSpec.function(count_with_timeout).timeout(5 * TICK_MS).event_time("t")


def comparable(rows) -> dict:
    return {key: [r for r in seq if r[0] in (OUTPUT, SNAPSHOT, DEAD_LETTER)] for key, seq in by_key(rows).items()}


@given(st.integers(0, 2**32), st.integers(1, 6), st.integers(1, 40))
@hsettings(max_examples=400, deadline=None)
def test_a_small_hot_set_changes_nothing_a_key_sees(seed, capacity, batches):
    """Keys evicted to cold, fetched back and brought back by the wheel give exactly the rows
    the reference gives (no buckets, no capacity)."""
    rng = random.Random(seed)
    keys = [f"k{i}" for i in range(12)]
    clock, plan = 0, []
    for _ in range(batches):
        clock += rng.choice([1_000, 30_000, TICK_MS, 3 * TICK_MS, 7 * TICK_MS])
        plan.append([(rng.choice(keys), 1, clock - rng.randint(0, 500)) for _ in range(rng.randint(0, 6))])
    bucketed = OneBucket(SPEC, capacity)
    reference = StateTester(SPEC)
    for records in plan:
        bucketed.batch(records)
        reference.run_batch(records)
    assert comparable(bucketed.rows) == comparable(reference.rows)


def test_a_batch_costs_calls_for_the_keys_it_touches_not_for_the_keys_held():
    def calls_for_batch(keys_held: int) -> Counter:
        bucket = OneBucket(StateSpec.function(count_with_timeout), hot_capacity=50)
        for start in range(0, keys_held, 1_000):
            bucket.batch([(f"k{i}", 1, None) for i in range(start, min(start + 1_000, keys_held))])
        bucket.batch([(f"k{i}", 1, None) for i in range(10)])  # the last 10 touched: hot by now
        bucket.store.calls.clear()
        bucket.batch([(f"k{i}", 1, None) for i in range(10)])
        return bucket.store.calls

    assert calls_for_batch(100) == calls_for_batch(10_000) == Counter({"hot": 2})


def test_a_cold_key_is_fetched_once_and_a_new_key_costs_no_call_while_cold_is_empty():
    bucket = OneBucket(StateSpec.function(count_with_timeout), hot_capacity=2)
    bucket.batch([("a", 1, None), ("b", 1, None)])
    assert bucket.store.calls["cold"] == 0
    bucket.batch([("c", 1, None)])  # over capacity: the least recently touched goes cold
    assert set(bucket.store.cold) == {"a"}
    bucket.store.calls.clear()
    bucket.batch([("a", 1, None)])
    assert bucket.store.calls["cold"] == 2  # fetched back, and b evicted in its place
    assert [r[2] for r in bucket.rows if r[1] == "a" and r[0] == OUTPUT] == ['["seen",1]', '["seen",2]']


def test_a_cold_key_times_out_at_its_exact_deadline():
    bucket = OneBucket(SPEC, hot_capacity=1)
    bucket.batch([("a", 1, 1_000)])
    bucket.batch([("b", 1, 2_000)])  # a goes cold, its deadline (301,000) filed in the wheel
    assert "a" in bucket.store.cold and bucket.store.wheel
    bucket.batch([("b", 1, 300_999)])
    assert not any(r[1] == "a" and "closed" in (r[2] or "") for r in bucket.rows)
    bucket.batch([("b", 1, 301_000)])  # the watermark reaches a's deadline
    closed = [r for r in bucket.rows if r[1] == "a" and r[0] == OUTPUT and "closed" in r[2]]
    assert closed == [(OUTPUT, "a", '["closed",1]', None, None, None, None)]
    assert "a" not in bucket.store.cold and [r for r in bucket.rows if r[1] == "a"][-1][:3] == (SNAPSHOT, "a", None)


class EveryBatchBucket:
    """Spark's part for one bucket of an every-batch spec (processing-time mode): per batch at
    time ``now``, a visit with the data if any, then a visit per timer due at ``now``."""

    def __init__(self, spec: StateSpec):
        self.plan = Plan.of(spec)
        self.store = MemoryBucketStore()
        self.rows: list[tuple] = []

    def _visit(self, now: int) -> Bucket:
        return Bucket(self.plan, self.store, -1, now, now, 10, TICK_MS).load()

    def batch(self, now: int, records: list[tuple]) -> None:
        if records:
            bucket = self._visit(now)
            bucket.apply_records({key: [(key, value, None, "t", 0, i)] for i, (key, value) in enumerate(records)}.items())
            bucket.apply_without_data()
            bucket.save()
            self.rows += bucket.rows
        for timer in sorted(t for t in self.store.timers if t <= now):
            self.store.timers.discard(timer)
            bucket = self._visit(now)
            bucket.timer_fired(timer)
            bucket.apply_without_data()
            bucket.save()
            self.rows += bucket.rows


def test_every_batch_calls_each_key_once_per_batch_with_or_without_records():
    """Records and the bucket's timer can both visit it in one batch: keys are still called
    once; in a batch without records the timer visit calls them all; eviction never runs."""
    calls = []

    def add(values, state):
        calls.append(list(values))
        return (state or 0) + sum(values)

    spec = StateSpec.updater(add)
    keys = [f"k{i}" for i in range(15)]  # over the hot capacity of 10
    engine, reference = EveryBatchBucket(spec), StateTester(spec)
    for now, records in [(100, [(k, 1) for k in keys]), (200, [("k0", 1)]), (300, []), (400, [("k1", 2)])]:
        engine.batch(now, records)
        reference.run_batch(records, processing_time_ms=now)
    assert by_key(engine.rows) == by_key(reference.rows)
    assert len(calls) == 2 * 4 * len(keys)  # once per key per batch, in each of the two
    assert engine.store.cold == {} and engine.store.calls["cold"] == 0


def test_a_large_hot_set_is_stored_compressed_in_seven_bits_and_older_forms_still_load():
    """Over COMPRESS_OVER_BYTES the hot set is written compressed, every byte below 0x80 (the
    state server's fast path); a bucket saved compressed as 8-bit zstd, or whole (a plain
    pickle), as earlier releases did, reads as it did."""
    spec = StateSpec.batch_function(lambda key, values, state: state.update(f"{key}:{sum(values)}" * 4))
    bucket = OneBucket(spec, hot_capacity=100_000)
    bucket.batch([(f"user-{i:05d}", i, 1_000) for i in range(20_000)])
    stored = bucket.store.hot
    assert stored is not None and stored.startswith(b"ssa1") and max(stored) < 0x80
    loaded = bucket._bucket()
    whole = pickle.dumps(loaded.hot, protocol=pickle.HIGHEST_PROTOCOL)
    assert len(loaded.hot) == 20_000 and len(stored) < len(whole) and len(whole) > COMPRESS_OVER_BYTES

    saved = pickle.dumps({"hot": loaded.hot, "cold": 0, "timer": None, "ticks": set(), "visit": 7}, protocol=5)
    zstd = pa.Codec("zstd", compression_level=1)
    for blob in (saved, b"ssz1" + len(saved).to_bytes(8, "little") + zstd.compress(saved, asbytes=True)):
        bucket.store.hot = blob  # as an earlier release saved it
        assert bucket._bucket().hot == loaded.hot
    bucket.batch([("user-00001", 5, 2_000)])
    assert bucket._bucket().hot["user-00001"] != loaded.hot["user-00001"]


BROKEN = {"now": True}


def close_on_own_timer(key, value, state):
    if state.has_timed_out():
        if BROKEN["now"]:
            raise RuntimeError("cannot close")
        state.remove()
        return ("closed", key)
    state.update(value)
    state.set_timeout_timestamp(value + 10)
    return None


def test_an_own_timer_whose_call_raised_is_registered_again_and_fires_at_the_next_watermark():
    """Issue 51: the bucket keeps a timer for a key whose own-timer call raised, past the clock
    of that call, so the key is called again with no data of its own; as the tester does."""
    spec = StateSpec.function(close_on_own_timer).event_time("t")
    engine, reference = OneBucket(spec, hot_capacity=2), StateTester(spec)
    batches = [[("a", 100, 100)], [("clock", 200, 200)], [("clock", 300, 300)]]
    BROKEN["now"] = True
    try:
        for step, batch in enumerate(batches):
            BROKEN["now"] = step < 2
            engine.batch(batch)
            reference.run_batch(batch)
    finally:
        BROKEN["now"] = True
    assert by_key(engine.rows)["a"] == by_key(reference.rows)["a"] == [
        (SNAPSHOT, "100", None), (DEAD_LETTER, None, "RuntimeError: cannot close"), (OUTPUT, '["closed","a"]', None),
        (SNAPSHOT, None, None),
    ]
    assert all(timer > 300 for timer in engine.store.timers) or not engine.store.timers
