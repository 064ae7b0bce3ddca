"""A bucket of keys: where per-key state lives, and which keys are due, with few state calls.

The Spark processor groups keys into a fixed number of buckets (``pmod(xxhash64(key), B)``)
and pays Spark's per-group cost once per bucket. Inside a bucket each key keeps its own
state, in one of two places:

* **hot**: the keys touched recently, with their stored state and timer deadline, in ONE value
  per bucket, read and written once per visit. A key touched again soon costs no state call.
* **cold**: every other key, one map entry per key, read when the key is touched again and
  written when it leaves the hot set (least recently touched first, once the hot set is over
  its capacity). A batch therefore touches state in proportion to the keys it touches, never
  to all the keys a bucket holds, and the hot value's size is bounded by the capacity.

Timers: a hot key's deadline is kept with it, and the bucket has one timer at the earliest hot
deadline. A cold key's deadline is filed in a coarse time wheel (a map entry per tick listing
its keys, with a timer at the tick's start): when the tick starts, its keys come back into the
hot set, where their exact deadlines apply. So every key still times out in the first visit
whose clock (watermark or processing time) reaches its deadline, as with one timer per key.

Pure Python over the :class:`BucketStore` interface: the Spark processor implements it with
transformWithState's state variables, :class:`MemoryBucketStore` in memory.
"""

from __future__ import annotations

import pickle
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Protocol, Sequence

import pyarrow as pa

from streamstate.state.columns import ROW_VALUES, ValueSource
from streamstate.state.keyrun import KeyRun, Plan
from streamstate.state.seven_bit import from_seven_bit, to_seven_bit
from streamstate.state.state import StateLayoutError, describe_key

# An entry of the hot set: [stored state, deadline or None, has a cold copy, last visit, changed since loaded].
TEXT, DEADLINE, IN_COLD, LAST_SEEN, DIRTY = range(5)
# Width of a wheel tick: a cold key returns to the hot set at most this long before its deadline.
TICK_MS = 60_000


# A hot set larger than this is stored compressed (zstd, level 1). The state server's write of
# one value costs far more than its compression: a bucket of the sessions benchmark's hot set
# (16 MB of pickled states, which compress about 2:1) took 150-650 ms to store, 40 ms to compress.
# The compressed bytes are stored in 7-bit form (:mod:`streamstate.state.seven_bit`): the state
# server's read of a value is about twice as fast so.
COMPRESS_OVER_BYTES = 256 * 1024
_SEVEN_BIT = b"ssa1"  # then the size uncompressed in decimal digits and ":", then the zstd frame in 7-bit form
_COMPRESSED = b"ssz1"  # as written before 7-bit form: the size uncompressed (8 bytes, little-endian), the zstd frame
_ZSTD = pa.Codec("zstd", compression_level=1)


def hot_blob(pickled: bytes) -> bytes:
    """A hot set as stored: large ones compressed, small ones as they are."""
    if len(pickled) <= COMPRESS_OVER_BYTES:
        return pickled
    return b"%s%d:%s" % (_SEVEN_BIT, len(pickled), to_seven_bit(_ZSTD.compress(pickled, asbytes=True)))


def hot_bytes(stored: bytes) -> bytes:
    """The pickled hot set of a stored one (a pickle never starts with a compressed marker)."""
    if stored.startswith(_SEVEN_BIT):
        colon = stored.index(b":", len(_SEVEN_BIT))
        size = int(stored[len(_SEVEN_BIT) : colon])
        return _ZSTD.decompress(from_seven_bit(memoryview(stored)[colon + 1 :]), decompressed_size=size, asbytes=True)
    if stored.startswith(_COMPRESSED):
        size = int.from_bytes(stored[4:12], "little")
        return _ZSTD.decompress(memoryview(stored)[12:], decompressed_size=size, asbytes=True)
    return stored


class BucketStore(Protocol):
    """The state calls a bucket makes (each one is a round trip to Spark's state server)."""

    def load_hot(self) -> bytes | None: ...
    def save_hot(self, blob: bytes) -> None: ...
    def cold_get(self, key: str) -> tuple[bytes, int | None] | None: ...
    def cold_put(self, key: str, stored: bytes, deadline: int | None) -> None: ...
    def cold_remove(self, key: str) -> None: ...
    def cold_items(self) -> Iterable[tuple[str, bytes]]: ...
    def cold_clear(self) -> None: ...
    def wheel_clear(self) -> None: ...
    def wheel_get(self, tick: int) -> bytes | None: ...
    def wheel_put(self, tick: int, blob: bytes) -> None: ...
    def wheel_remove(self, tick: int) -> None: ...
    def register_timer(self, at_ms: int) -> None: ...
    def delete_timer(self, at_ms: int) -> None: ...


class MemoryBucketStore:
    """A :class:`BucketStore` in memory that counts the calls a state server would get: for the
    unit tests and for profiling a bucket visit without Spark (``bench/profile_buckets.py``)."""

    def __init__(self) -> None:
        self.hot: bytes | None = None
        self.cold: dict[str, tuple[bytes, int | None]] = {}
        self.wheel: dict[int, bytes] = {}
        self.timers: set[int] = set()
        self.calls: Counter = Counter()

    def load_hot(self) -> bytes | None:
        self.calls["hot"] += 1
        return self.hot

    def save_hot(self, blob: bytes) -> None:
        self.calls["hot"] += 1
        self.hot = blob

    def cold_get(self, key: str) -> tuple[bytes, int | None] | None:
        self.calls["cold"] += 1
        return self.cold.get(key)

    def cold_put(self, key: str, stored: bytes, deadline: int | None) -> None:
        self.calls["cold"] += 1
        self.cold[key] = (stored, deadline)

    def cold_remove(self, key: str) -> None:
        self.calls["cold"] += 1
        self.cold.pop(key, None)

    def cold_items(self) -> Iterable[tuple[str, bytes]]:
        self.calls["cold"] += 1
        return [(key, stored) for key, (stored, _) in self.cold.items()]

    def cold_clear(self) -> None:
        self.calls["cold"] += 1
        self.cold.clear()

    def wheel_clear(self) -> None:
        self.calls["wheel"] += 1
        self.wheel.clear()

    def wheel_get(self, tick: int) -> bytes | None:
        self.calls["wheel"] += 1
        return self.wheel.get(tick)

    def wheel_put(self, tick: int, blob: bytes) -> None:
        self.calls["wheel"] += 1
        self.wheel[tick] = blob

    def wheel_remove(self, tick: int) -> None:
        self.calls["wheel"] += 1
        self.wheel.pop(tick, None)

    def register_timer(self, at_ms: int) -> None:
        self.calls["timer"] += 1
        self.timers.add(at_ms)

    def delete_timer(self, at_ms: int) -> None:
        self.calls["timer"] += 1
        self.timers.discard(at_ms)


@dataclass
class Bucket:
    """One visit of one bucket: load, process records / due keys / a wheel tick, save.

    ``now_ms`` is the clock deadlines are compared with (the watermark in event time, the batch's
    processing time otherwise; ``None`` when the spec has no timeouts)."""

    plan: Plan
    store: BucketStore
    watermark_ms: int
    processing_time_ms: int
    now_ms: int | None
    hot_capacity: int
    tick_ms: int
    hot: dict[Any, list] = field(default_factory=dict)
    cold_count: int = 0
    timer_ms: int | None = None  # the hot timer
    ticks: set[int] = field(default_factory=set)  # starts of the wheel ticks with a timer
    visit: int = 0
    called_all_at: int | None = None  # every-batch mode: the batch time of the last visit that called every key
    rows: list[tuple] = field(default_factory=list)
    values: ValueSource = ROW_VALUES  # where the visit's records' values are read
    _seen: set = field(default_factory=set)

    # ------------------------------------------------------------------ load and save
    def load(self) -> Bucket:
        blob = self.store.load_hot()
        if blob is not None:
            stored = pickle.loads(hot_bytes(blob))
            if "layout" in stored:
                raise StateLayoutError(
                    f"this bucket's state was written by a bucket function ({stored['layout']}; StateSpec.over_buckets), "
                    "and this spec runs per key: run it with its bucket function, or start from a new checkpoint"
                )
            self.hot, self.cold_count, self.visit = stored["hot"], stored["cold"], stored["visit"]
            self.timer_ms, self.ticks = stored["timer"], stored["ticks"]
            self.called_all_at = stored.get("called_all_at")
        self.visit += 1
        return self

    def save(self) -> None:
        self._evict()
        self._set_timer()
        blob = {
            "hot": self.hot, "cold": self.cold_count, "timer": self.timer_ms, "ticks": self.ticks, "visit": self.visit,
            "called_all_at": self.called_all_at,
        }
        self.store.save_hot(hot_blob(pickle.dumps(blob, protocol=pickle.HIGHEST_PROTOCOL)))

    # ------------------------------------------------------------------ keys
    def _entry(self, key: Any) -> list | None:
        """The key's entry, fetched from cold into the hot set when needed."""
        entry = self.hot.get(key)
        if entry is None and self.cold_count:
            stored = self.store.cold_get(describe_key(key))
            if stored is not None:
                entry = self.hot[key] = [stored[0], stored[1], True, self.visit, False]
        return entry

    def _run(self, key: Any) -> tuple[KeyRun, list | None]:
        entry = self._entry(key)
        text, deadline = (None, None) if entry is None else (entry[TEXT], entry[DEADLINE])
        return KeyRun(self.plan, key, text, deadline, self.watermark_ms, self.processing_time_ms, self.values), entry

    def _settle(self, key: Any, run: KeyRun, entry: list | None) -> None:
        """Keep what the run committed, and collect its rows."""
        self.rows.extend(run.rows)
        snapshot = run.snapshot_row()
        if snapshot is not None:
            self.rows.append(snapshot)
        self._seen.add(key)
        if run.committed is None:
            if entry is not None:
                if entry[IN_COLD]:
                    self.store.cold_remove(describe_key(key))
                    self.cold_count -= 1
                del self.hot[key]
            return
        if entry is None:
            self.hot[key] = [run.committed, run.deadline, False, self.visit, True]
            return
        if run.committed != entry[TEXT] or run.deadline != entry[DEADLINE]:
            entry[TEXT], entry[DEADLINE], entry[DIRTY] = run.committed, run.deadline, True
        entry[LAST_SEEN] = self.visit

    def apply_records(self, by_key: Iterable[tuple[Any, Sequence[tuple]]], values: ValueSource = ROW_VALUES) -> None:
        """Each key's records of the batch (rows laid out as ``INPUT_COLUMNS``, their values
        records of ``values``)."""
        self.values = values
        for key, key_rows in by_key:
            run, entry = self._run(key)
            run.apply_rows(key_rows)
            self._settle(key, run, entry)

    def apply_without_data(self) -> None:
        """Every-batch mode: call each key this batch has not called yet, with no values. A bucket
        is visited for its records and for its timer, possibly both in one batch: the batch time
        of the visit that called every key makes the second visit a no-op."""
        if not self.plan.every_batch or self.called_all_at == self.processing_time_ms:
            return
        for _, key in sorted((describe_key(k), k) for k in self.hot if k not in self._seen):
            run, entry = self._run(key)
            run.apply_without_data()
            self._settle(key, run, entry)
        self.called_all_at = self.processing_time_ms

    def call_all_this_batch(self) -> None:
        """Every-batch mode, initial state: a timer due now, so this very batch calls every key."""
        if self.plan.every_batch and self.hot:
            self.store.register_timer(self.processing_time_ms)
            self.timer_ms = self.processing_time_ms

    def apply_due(self) -> None:
        """Time out every hot key whose deadline the clock has reached."""
        if self.now_ms is None:
            return
        due = sorted(
            ((entry[DEADLINE], key) for key, entry in self.hot.items() if entry[DEADLINE] is not None and entry[DEADLINE] <= self.now_ms),
            key=lambda item: (item[0], describe_key(item[1])),
        )
        for _, key in due:
            run, entry = self._run(key)
            run.apply_timeout()
            self._settle(key, run, entry)

    def timer_fired(self, at_ms: int) -> None:
        """A timer fired (Spark deletes it): the hot timer, a wheel tick's, or both at once."""
        if at_ms == self.timer_ms:
            self.timer_ms = None
        if at_ms in self.ticks:
            self.ticks.discard(at_ms)
            self._bring_back(at_ms // self.tick_ms)

    def _bring_back(self, tick: int) -> None:
        """A wheel tick started: its cold keys return to the hot set (then :meth:`apply_due`)."""
        blob = self.store.wheel_get(tick)
        if blob is None:
            return
        self.store.wheel_remove(tick)
        for key in pickle.loads(blob):
            self._entry(key)  # a key removed since has no cold entry, and comes back as nothing

    # ------------------------------------------------------------------ capacity and timers
    def _tick_of(self, deadline: int) -> int:
        return deadline // self.tick_ms

    def _evict(self) -> None:
        """Move the least recently touched keys to cold until the hot set fits its capacity."""
        excess = len(self.hot) - self.hot_capacity
        if excess <= 0 or self.plan.every_batch:  # every key is called every batch: all stay hot
            return
        now_tick = None if self.now_ms is None else self._tick_of(self.now_ms)
        candidates = sorted(
            (entry[LAST_SEEN], describe_key(key), key)
            for key, entry in self.hot.items()
            # A key due within the next tick would come straight back: it stays.
            if key not in self._seen and (entry[DEADLINE] is None or now_tick is None or self._tick_of(entry[DEADLINE]) > now_tick + 1)
        )
        wheel: dict[int, list] = {}
        for _, _, key in candidates[:excess]:
            entry = self.hot.pop(key)
            if entry[DIRTY] or not entry[IN_COLD]:
                self.store.cold_put(describe_key(key), entry[TEXT], entry[DEADLINE])
            if not entry[IN_COLD]:
                self.cold_count += 1
            if entry[DEADLINE] is not None and self.now_ms is not None:
                wheel.setdefault(self._tick_of(entry[DEADLINE]), []).append(key)
        for tick, keys in wheel.items():
            start = tick * self.tick_ms
            filed = self.store.wheel_get(tick) if start in self.ticks else None
            self.store.wheel_put(tick, pickle.dumps((pickle.loads(filed) if filed else []) + keys, protocol=pickle.HIGHEST_PROTOCOL))
            if start not in self.ticks:
                if start != self.timer_ms:
                    self.store.register_timer(start)
                self.ticks.add(start)

    def _set_timer(self) -> None:
        """A timer at or before the earliest hot deadline (ticks have their own timers); none without a clock.

        A timer already set earlier than that stays: when it fires, the visit finds nothing due
        and sets the next one. Moving it instead would cost two state calls (delete, register)
        on nearly every visit, since every record of the earliest key pushes its deadline on."""
        if self.now_ms is None:
            return
        earliest = min((e[DEADLINE] for e in self.hot.values() if e[DEADLINE] is not None), default=None)
        if self.plan.every_batch and self.hot:
            # The next batch (a later processing time) visits this bucket, with or without records.
            earliest = self.processing_time_ms + 1 if earliest is None else min(earliest, self.processing_time_ms + 1)
        if self.timer_ms is not None and (earliest is None or self.timer_ms <= earliest):
            return
        if self.timer_ms is not None and self.timer_ms not in self.ticks:  # a tick shares it: kept
            self.store.delete_timer(self.timer_ms)
        if earliest is not None and earliest not in self.ticks:
            self.store.register_timer(earliest)
        self.timer_ms = earliest


def initial_entries(plan: Plan, pairs: Iterable[tuple[Any, str]], deadline: int | None) -> Iterable[tuple[Any, bytes, int | None]]:
    """(key, stored state, deadline) of initial states given as JSON text: a state that does not
    fit the spec's type fails here, naming the key."""
    for key, text in pairs:
        yield key, plan.codec.encode(plan.codec.from_json(key, text)), deadline
