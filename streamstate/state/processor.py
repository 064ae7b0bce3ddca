"""The Spark side: one ``StatefulProcessor`` per query, grouped by bucket of the key.

``transformWithStateInPandas`` calls it once per bucket and batch with the bucket's packed
rows (:mod:`streamstate.state.packing`) and once per expired timer; each call is one
:class:`~streamstate.state.buckets.Bucket` visit: about three state calls (the hot set in,
the hot set out, the timer) plus one per key fetched from or evicted to the cold map, instead
of several round trips and one Arrow message per key.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues
from pyspark.sql.types import BinaryType, DataType, LongType, StringType, StructField, StructType

from streamstate.state.buckets import Bucket, initial_entries
from streamstate.state.columns import records_by_key
from streamstate.state.keyrun import OUTPUT_COLUMNS, Plan
from streamstate.state.packing import BLOB, rows_by_key, unpack

if TYPE_CHECKING:
    import pandas as pd


def _schema(*fields: tuple[str, DataType]) -> StructType:
    return StructType([StructField(name, kind, nullable=True) for name, kind in fields])


# The state variables' schemas as StructTypes, not DDL text: a DDL schema costs each task a
# round trip to the JVM to parse it, in every batch (about 17 ms of a task's 73-90 ms of
# registering the three variables, measured). Equal to the DDL "blob BINARY", "key STRING",
# "state BINARY, deadline LONG", "tick LONG", "keys BINARY", which existing checkpoints
# recorded (tests/integration/test_state_api.py compares them with Spark's parse).
HOT_SCHEMA = _schema(("blob", BinaryType()))
COLD_KEY_SCHEMA, COLD_VALUE_SCHEMA = _schema(("key", StringType())), _schema(("state", BinaryType()), ("deadline", LongType()))
WHEEL_KEY_SCHEMA, WHEEL_VALUE_SCHEMA = _schema(("tick", LongType())), _schema(("keys", BinaryType()))


class _Store:
    """:class:`~streamstate.state.buckets.BucketStore` over the processor's state variables."""

    def __init__(self, handle: StatefulProcessorHandle):
        self.handle = handle
        self.hot = handle.getValueState("hot", HOT_SCHEMA)
        self.cold = handle.getMapState("cold", COLD_KEY_SCHEMA, COLD_VALUE_SCHEMA)
        self.wheel = handle.getMapState("wheel", WHEEL_KEY_SCHEMA, WHEEL_VALUE_SCHEMA)

    def load_hot(self) -> bytes | None:
        stored = self.hot.get()
        return None if stored is None else bytes(stored[0])

    def save_hot(self, blob: bytes) -> None:
        self.hot.update((blob,))

    def cold_get(self, key: str) -> tuple[bytes, int | None] | None:
        stored = self.cold.getValue((key,))
        return None if stored is None else (bytes(stored[0]), stored[1])

    def cold_put(self, key: str, stored: bytes, deadline: int | None) -> None:
        self.cold.updateValue((key,), (stored, deadline))

    def cold_remove(self, key: str) -> None:
        self.cold.removeKey((key,))

    def wheel_get(self, tick: int) -> bytes | None:
        stored = self.wheel.getValue((tick,))
        return None if stored is None else bytes(stored[0])

    def wheel_put(self, tick: int, blob: bytes) -> None:
        self.wheel.updateValue((tick,), (blob,))

    def wheel_remove(self, tick: int) -> None:
        self.wheel.removeKey((tick,))

    def register_timer(self, at_ms: int) -> None:
        self.handle.registerTimer(at_ms)

    def delete_timer(self, at_ms: int) -> None:
        self.handle.deleteTimer(at_ms)


def _frame(rows: list[tuple]) -> pd.DataFrame:
    import pandas as pd  # here, not at the top: a query's planning unpickles this module in a fresh process

    # Object columns: the nullable partition and offset stay exact Python ints (a float64 column
    # would round offsets above 2**53), and pandas builds the frame in one pass, about 5x faster
    # than typed nullable arrays; Spark converts each column to its Arrow type on the way out.
    return pd.DataFrame(rows, columns=list(OUTPUT_COLUMNS), dtype=object)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection during a bucket visit; it runs again after.

    A visit allocates a row, a value dict and the rule's state for every record, and the
    collector, triggered by allocation counts, scanned those live objects again and again for
    no garbage: the engine and the jobs' rules make no reference cycles (a user function's
    wait until the visit ends). Paused, a sessions visit took 5-10% less CPU (docs/profile.md)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class BucketProcessor(StatefulProcessor):
    """Runs a :class:`Plan` under ``transformWithStateInPandas`` grouped by bucket."""

    def __init__(self, plan: Plan, time_mode: str, hot_capacity: int, tick_ms: int):
        self.plan = plan
        self.time_mode = time_mode
        self.hot_capacity = hot_capacity
        self.tick_ms = tick_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.store = _Store(handle)

    def _bucket(self, timer_values: TimerValues) -> Bucket:
        watermark = timer_values.getCurrentWatermarkInMs()
        processing_time = timer_values.getCurrentProcessingTimeInMs()
        # Without timers Spark gives no batch time (timeMode None): the wall clock stands in.
        now = processing_time if processing_time >= 0 else int(time.time() * 1000)
        clock = {"EventTime": watermark, "ProcessingTime": now}.get(self.time_mode)
        return Bucket(self.plan, self.store, watermark, now, clock, self.hot_capacity, self.tick_ms).load()

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        with _collector_paused():
            table = unpack(blob for frame in rows for blob in frame[BLOB])
            bucket = self._bucket(timerValues)
            if table is not None and self.plan.columnar:
                by_key, values = records_by_key(table, self.plan.event_time, self.plan.ordered_by_offset)
                bucket.apply_records(by_key.items(), values)
            elif table is not None:
                bucket.apply_records(rows_by_key(table).items())
            result = self._finish(bucket)
        if result is not None:
            yield result

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        with _collector_paused():
            bucket = self._bucket(timerValues)
            bucket.timer_fired(expiredTimerInfo.getExpiryTimeInMs())
            result = self._finish(bucket)
        if result is not None:
            yield result

    @staticmethod
    def _finish(bucket: Bucket) -> pd.DataFrame | None:
        """A visit's common end: the keys due (and, in every-batch mode, the rest), then the save."""
        bucket.apply_without_data()
        bucket.apply_due()
        bucket.save()
        return _frame(bucket.rows) if bucket.rows else None

    def handleInitialState(self, key: Any, initialState: pd.DataFrame, timerValues: TimerValues) -> None:
        bucket = self._bucket(timerValues)
        deadline = None
        if self.plan.timeout_ms is not None and self.time_mode == "ProcessingTime":
            deadline = bucket.processing_time_ms + self.plan.timeout_ms
        pairs = zip(initialState["key"].tolist(), initialState["state"].tolist())
        for state_key, text, state_deadline in initial_entries(self.plan, pairs, deadline):
            bucket.hot[state_key] = [text, state_deadline, False, bucket.visit, True]
        bucket.call_all_this_batch()
        bucket.save()

    def close(self) -> None:
        pass
