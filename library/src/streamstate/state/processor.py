"""The Spark side: one ``StatefulProcessor`` per query, grouped by bucket of the key.

``transformWithStateInPandas`` calls it once per bucket and batch with the bucket's packed
rows (:mod:`streamstate.state.packing`) and once per expired timer; each call is one
:class:`~streamstate.state.buckets.Bucket` visit (:mod:`streamstate.state.visits`): about three
state calls (the hot set in, the hot set out, the timer) plus one per key fetched from or
evicted to the cold map, instead of several round trips and one Arrow message per key.

This module imports PySpark and nothing heavier, and the processor carries its plan pickled:
at a query's first batch Spark unpickles the processor on the driver in a fresh Python
process only to call :meth:`BucketProcessor.init` (the state schemas), and importing the
engine and the job's rule there (pyarrow, NumPy, pydantic) cost 0.4 s of every query start.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

from pyspark import cloudpickle
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues
from pyspark.sql.types import BinaryType, DataType, LongType, StringType, StructField, StructType

if TYPE_CHECKING:
    import pandas as pd

    from streamstate.state.buckets import BucketStore
    from streamstate.state.keyrun import Plan
    from streamstate.state.visits import BucketVisits


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

    def cold_items(self) -> Iterator[tuple[str, bytes]]:
        for key, value in self.cold.iterator():
            yield key[0], bytes(value[0])

    def cold_clear(self) -> None:
        self.cold.clear()

    def wheel_clear(self) -> None:
        self.wheel.clear()

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


class BucketProcessor(StatefulProcessor):
    """Runs a :class:`~streamstate.state.keyrun.Plan` under ``transformWithStateInPandas``
    grouped by bucket. ``store`` is the state (set by :meth:`init`; in memory in the tests)."""

    store: BucketStore

    def __init__(self, plan: Plan, time_mode: str, hot_capacity: int, tick_ms: int):
        self._plan: Plan | None = plan
        self._pickled_plan: bytes | None = None
        self.time_mode = time_mode
        self.hot_capacity = hot_capacity
        self.tick_ms = tick_ms

    def __getstate__(self) -> dict[str, Any]:
        # The plan travels pickled inside the processor's pickle and is unpickled at the first
        # visit (see the module docstring); cloudpickle, as Spark's own, so that a function
        # defined in a notebook travels by value.
        state = {name: value for name, value in vars(self).items() if name != "visits"}
        if self._plan is not None:
            state["_plan"], state["_pickled_plan"] = None, cloudpickle.dumps(self._plan)
        return state

    @cached_property
    def visits(self) -> BucketVisits:
        from streamstate.state.visits import BucketVisits  # in the workers only: see the module docstring

        plan = self._plan if self._plan is not None else pickle.loads(cast(bytes, self._pickled_plan))
        return BucketVisits(plan, self.time_mode, self.hot_capacity, self.tick_ms)

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.store = _Store(handle)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        result = self.visits.input_rows(self.store, rows, timerValues)
        if result is not None:
            yield result

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        result = self.visits.expired_timer(self.store, timerValues, expiredTimerInfo.getExpiryTimeInMs())
        if result is not None:
            yield result

    def handleInitialState(self, key: Any, initialState: pd.DataFrame, timerValues: TimerValues) -> None:
        self.visits.initial_state(self.store, initialState, timerValues)

    def close(self) -> None:
        pass
