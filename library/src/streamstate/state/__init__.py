"""mapWithState and updateStateByKey for PySpark Structured Streaming (the seeds' state API).

Built on Spark's ``transformWithState`` family. Grouped by key, Spark's arbitrary stateful
operators measured here (1,000,000 events over 100,000 users, local[2], RocksDB, one batch,
the same per-user session logic, when the engine was first chosen) were all far from native:

=====================================================  =========  ===========
operator                                               rows/s     vs native
=====================================================  =========  ===========
native ``session_window`` aggregation                  38.8k      1.00
``transformWithState`` (rows), one ValueState           12.9k      0.33
``transformWithStateInPandas``                          6.7k       0.17
``applyInPandasWithState`` (EventTimeTimeout)           6.4k       0.16
=====================================================  =========  ===========

Their cost is per group and per state call, so the engine runs ``transformWithStateInPandas``
grouped by *bucket* of keys rather than by key (:mod:`streamstate.state.processor`; the
README's benchmarks give today's figures): a stateless step packs each bucket's records into
one Arrow blob (:mod:`~streamstate.state.packing`), and a bucket visit
(:mod:`~streamstate.state.buckets`, :mod:`~streamstate.state.visits`) runs the per-key logic
(:mod:`~streamstate.state.keyrun`) for each of its keys with new data or a due timer, over the
bucket's hot set (one state value), a cold map for keys evicted from it and a timer wheel.
A spec can run one function over a whole bucket instead (``StateSpec.over_buckets``,
:mod:`~streamstate.state.bucket_function`): the bucket's records as one table and its state in
a layout of the function's own, so a rule's per-key Python becomes array operations.
Untouched keys cost nothing in ``map_with_state``; ``update_state_by_key`` calls every key
every batch, as DStream's did (each bucket then keeps all its keys hot and a processing-time
timer for the next batch, so it is visited with or without records). Per-key timers in
processing or event time and an initial-state input give the seeds' ``timeout`` and
``initialState``. State lives in Spark's RocksDB state store (the session needs
``spark.sql.streaming.stateStore.providerClass`` set to its provider).

The names below are loaded on first use (PEP 562): Spark imports this package in a fresh
Python process at each query's start only to read the processor's state schemas, and the
operators' imports (pyarrow, NumPy, pydantic) were most of that process's 0.4 s. The
``TYPE_CHECKING`` imports say where each name lives, for type checkers and editors.

Public API::

    from streamstate.state import StateSpec, State, Emit, map_with_state, update_state_by_key, StateTypeError
    from streamstate.state import Columns   # what a StateSpec.columnar_function gets
    from streamstate.state.bucket_function import BucketResult   # what a StateSpec.over_buckets function returns
    from streamstate.state.tester import StateTester   # run a spec in memory, without Spark

    # The DStream window family, on the same engine (streamstate.state.windows: the pure logic)
    from streamstate.state import window, count_by_window, reduce_by_window, reduce_by_key_and_window, count_by_value_and_window
    from streamstate.state.window_tester import WindowTester
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streamstate.state.columns import Columns
    from streamstate.state.operators import StateResult, StateStoreUnsupported, map_with_state, update_state_by_key
    from streamstate.state.outputs import Emit
    from streamstate.state.spec import StateSpec, duration_ms
    from streamstate.state.state import State, StateTypeError, StateUsageError
    from streamstate.state.window_operators import (
        WindowResult,
        count_by_value_and_window,
        count_by_window,
        reduce_by_key_and_window,
        reduce_by_window,
        window,
    )
    from streamstate.state.windows import WindowError

# Where each public name lives: the TYPE_CHECKING imports above, as data.
_HOMES = {
    "Columns": "columns",
    "StateResult": "operators",
    "StateStoreUnsupported": "operators",
    "map_with_state": "operators",
    "update_state_by_key": "operators",
    "Emit": "outputs",
    "StateSpec": "spec",
    "duration_ms": "spec",
    "State": "state",
    "StateTypeError": "state",
    "StateUsageError": "state",
    "WindowResult": "window_operators",
    "count_by_value_and_window": "window_operators",
    "count_by_window": "window_operators",
    "reduce_by_key_and_window": "window_operators",
    "reduce_by_window": "window_operators",
    "window": "window_operators",
    "WindowError": "windows",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOMES})


__all__ = [
    "Columns",
    "Emit",
    "State",
    "StateResult",
    "StateSpec",
    "StateStoreUnsupported",
    "StateTypeError",
    "StateUsageError",
    "WindowError",
    "WindowResult",
    "count_by_value_and_window",
    "count_by_window",
    "duration_ms",
    "map_with_state",
    "reduce_by_key_and_window",
    "reduce_by_window",
    "update_state_by_key",
    "window",
]
