"""A bucket visit: what :class:`~streamstate.state.processor.BucketProcessor` does with each
call Spark makes, kept apart from Spark's interface.

Spark unpickles the processor on the driver, in a fresh Python process, at a query's first
batch (to record its state variables' schemas); only the processor module is imported there.
This module, with pyarrow, NumPy and the job's own code behind it, is imported by the Python
workers at their first visit (docs/profile.md: 0.4 s of every query start).
"""

from __future__ import annotations

import functools
import gc
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, ParamSpec, TypeVar

import pandas as pd

from streamstate.state import bucket_function
from streamstate.state.buckets import Bucket, BucketStore, initial_entries
from streamstate.state.columns import records_by_key
from streamstate.state.keyrun import OUTPUT_COLUMNS, Plan
from streamstate.state.packing import BLOB, rows_by_key, unpack

P = ParamSpec("P")
R = TypeVar("R")

if TYPE_CHECKING:
    from pyspark.sql.streaming.stateful_processor import TimerValues


def _frame(rows: list[tuple]) -> pd.DataFrame:
    # Object columns: the nullable partition and offset stay exact Python ints (a float64 column
    # would round offsets above 2**53), and pandas builds the frame in one pass, about 5x faster
    # than typed nullable arrays; Spark converts each column to its Arrow type on the way out.
    return pd.DataFrame(rows, columns=list(OUTPUT_COLUMNS), dtype=object)


def _frame_of(rows: list[tuple]) -> pd.DataFrame | None:
    return _frame(rows) if rows else None


def _collector_paused(visit: Callable[P, R]) -> Callable[P, R]:
    """No cyclic garbage collection during a bucket visit; it runs again after.

    A visit allocates a row, a value dict and the rule's state for every record, and the
    collector, triggered by allocation counts, scanned those live objects again and again for
    no garbage: the engine and the jobs' rules make no reference cycles (a user function's
    wait until the visit ends). Paused, a sessions visit took 5-10% less CPU (docs/profile.md).
    The collector comes back once ``visit`` has returned, its rows, values and states freed by
    reference counting: enabled over them, its first run scanned every object the visit had
    made (23 ms a bucket of 2,500 users in bench/profile_buckets.py)."""

    @functools.wraps(visit)
    def paused(*args: P.args, **kwargs: P.kwargs) -> R:
        if not gc.isenabled():
            return visit(*args, **kwargs)
        gc.disable()
        try:
            return visit(*args, **kwargs)
        finally:
            gc.enable()

    return paused


class BucketVisits:
    """Runs a :class:`Plan` over one bucket's store per call: input rows, a timer, initial state."""

    def __init__(self, plan: Plan, time_mode: str, hot_capacity: int, tick_ms: int):
        self.plan = plan
        self.time_mode = time_mode
        self.hot_capacity = hot_capacity
        self.tick_ms = tick_ms

    def _bucket(self, store: BucketStore, timer_values: TimerValues) -> Bucket:
        watermark = timer_values.getCurrentWatermarkInMs()
        processing_time = timer_values.getCurrentProcessingTimeInMs()
        # Without timers Spark gives no batch time (timeMode None): the wall clock stands in.
        now = processing_time if processing_time >= 0 else int(time.time() * 1000)
        clock = {"EventTime": watermark, "ProcessingTime": now}.get(self.time_mode)
        return Bucket(self.plan, store, watermark, now, clock, self.hot_capacity, self.tick_ms).load()

    @_collector_paused
    def input_rows(self, store: BucketStore, rows: Iterator[pd.DataFrame], timer_values: TimerValues) -> pd.DataFrame | None:
        """The bucket's packed rows of this batch applied; the visit's output, if any."""
        table = unpack(blob for frame in rows for blob in frame[BLOB])
        if self.plan.bucket_func is not None:
            return _frame_of(bucket_function.visit(self.plan, store, table, timer_values.getCurrentWatermarkInMs()))
        bucket = self._bucket(store, timer_values)
        if table is not None and self.plan.columnar:
            by_key, values = records_by_key(table, self.plan.event_time, self.plan.ordered_by_offset)
            bucket.apply_records(by_key.items(), values)
        elif table is not None:
            bucket.apply_records(rows_by_key(table).items())
        return self._finish(bucket)

    @_collector_paused
    def expired_timer(self, store: BucketStore, timer_values: TimerValues, expiry_ms: int) -> pd.DataFrame | None:
        """The bucket's timer at ``expiry_ms`` fired; the visit's output, if any."""
        if self.plan.bucket_func is not None:
            watermark = timer_values.getCurrentWatermarkInMs()
            return _frame_of(bucket_function.visit(self.plan, store, None, watermark, fired_ms=expiry_ms))
        bucket = self._bucket(store, timer_values)
        bucket.timer_fired(expiry_ms)
        return self._finish(bucket)

    @staticmethod
    def _finish(bucket: Bucket) -> pd.DataFrame | None:
        """A visit's common end: the keys due (and, in every-batch mode, the rest), then the save."""
        bucket.apply_without_data()
        bucket.apply_due()
        bucket.save()
        return _frame_of(bucket.rows)

    def initial_state(self, store: BucketStore, initial: pd.DataFrame, timer_values: TimerValues) -> None:
        """The bucket's keys of the query's initial state, stored (each key is called this batch)."""
        bucket = self._bucket(store, timer_values)
        deadline = None
        if self.plan.timeout_ms is not None and self.time_mode == "ProcessingTime":
            deadline = bucket.processing_time_ms + self.plan.timeout_ms
        pairs = zip(initial["key"].tolist(), initial["state"].tolist())
        for state_key, text, state_deadline in initial_entries(self.plan, pairs, deadline):
            bucket.hot[state_key] = [text, state_deadline, False, bucket.visit, True]
        bucket.call_all_this_batch()
        bucket.save()
