"""mapWithState and updateStateByKey for PySpark Structured Streaming (the seeds' state API).

Built on ``GroupedData.transformWithState`` (row-based, Spark 4.1), because it was the fastest
of Spark's arbitrary stateful operators measured here (1,000,000 events over 100,000 users,
local[2], RocksDB, one batch, same per-user session logic):

=====================================================  =========  ===========
operator                                               rows/s     vs native
=====================================================  =========  ===========
native ``session_window`` aggregation                  38.8k      1.00
``transformWithState`` (rows), one ValueState           12.9k      0.33
``transformWithStateInPandas``                          6.7k       0.17
``applyInPandasWithState`` (EventTimeTimeout)           6.4k       0.16
=====================================================  =========  ===========

Its cost is per touched key (a state call is a socket round trip from the Python worker;
pandas frames per group are slower still), so the processor keeps one ValueState per key
holding the JSON state and its timer deadline: one read and at most one write per touched
key per batch, and a timer moved only when the deadline changes. Untouched keys cost nothing
in ``map_with_state``; ``update_state_by_key`` calls every key every batch, as DStream's did
(each bucket then keeps all its keys hot and a processing-time timer for the next batch,
so it is visited with or without records). It also has
per-key timers in processing or event time and an initial-state input, which the seeds'
``timeout`` and ``initialState`` need. State lives in the RocksDB store (``build_spark``).

Public API::

    from streamstate.state import StateSpec, State, Emit, map_with_state, update_state_by_key, StateTypeError
    from streamstate.state import Columns   # what a StateSpec.columnar_function gets
    from streamstate.state.tester import StateTester   # run a spec in memory, without Spark

    # The DStream window family, on the same engine (streamstate.state.windows: the pure logic)
    from streamstate.state import window, count_by_window, reduce_by_window, reduce_by_key_and_window, count_by_value_and_window
    from streamstate.state.window_tester import WindowTester
"""

from streamstate.state.columns import Columns
from streamstate.state.operators import StateResult, map_with_state, update_state_by_key
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

__all__ = [
    "Columns",
    "Emit",
    "State",
    "StateResult",
    "StateSpec",
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
