"""Test a window operation without Spark: :class:`WindowTester` runs a
:class:`~streamstate.state.windows.WindowOp` on the in-memory
:class:`~streamstate.state.tester.StateTester`, batch by batch, with the semantics the Spark
functions of :mod:`streamstate.state.window_operators` have (they run the same spec). Example::

    import operator
    from streamstate.state.windows import WindowOp
    from streamstate.state.window_tester import WindowTester

    op = WindowOp.reduce_by_key_and_window(operator.add, operator.sub, "10 seconds", "5 seconds")
    tester = WindowTester(op, watermark_delay_ms=1_000)
    tester.run_batch([("a", 1, 1_000), ("a", 2, 6_000), ("b", 5, 7_000)])
    rows = tester.run_batch([("a", 1, 16_000)])      # the watermark moves to 15,000: windows up to it close
    assert tester.windows(rows) == [("a", 0, 10_000, 3), ("a", 5_000, 15_000, 2), ("b", 0, 10_000, 5), ("b", 5_000, 15_000, 5)]

Records are ``(key, value[, event_time_ms])`` for ``reduce_by_key_and_window``, else
``(value[, event_time_ms])`` (the record itself for ``window``); on processing time
(:meth:`WindowOp.on_processing_time`) each record is at its batch's ``processing_time_ms``.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, NamedTuple

from streamstate.state.kinds import RowKind
from streamstate.state.tester import Row, StateTester
from streamstate.state.windows import WindowOp, window_spec


class Window(NamedTuple):
    """One emitted window: the key as text (the value for ``count_by_value_and_window``, ``""``
    for the operations without a key), its start and end (epoch ms) and its value."""

    key: str
    start: int
    end: int
    value: Any


class WindowTester:
    """Feeds batches through a window operation; the engine's rows are in :attr:`rows`."""

    def __init__(self, op: WindowOp, watermark_delay_ms: int = 0):
        self.op = op
        self.state = StateTester(window_spec(op, "event_time" if op.step.event_time else None), watermark_delay_ms)

    def run_batch(self, records: Iterable[tuple], processing_time_ms: int = 0) -> list[Row]:
        """One micro-batch (then its due windows, and a no-data batch when the watermark moved)."""
        return self.state.run_batch([self.op.engine_record(record) for record in records], processing_time_ms)

    def tick(self, processing_time_ms: int) -> list[Row]:
        """A batch without data: on processing time, the windows ending by then close."""
        return self.state.tick(processing_time_ms)

    @property
    def rows(self) -> list[Row]:
        return self.state.rows

    @property
    def watermark_ms(self) -> int:
        return self.state.watermark_ms

    @staticmethod
    def windows(rows: Iterable[Any]) -> list[Window]:
        """The windows among ``rows`` (engine rows ``kind, key, payload, ...``), sorted."""
        found = []
        for kind, key, payload, *_ in rows:
            if kind == RowKind.OUTPUT:
                output = json.loads(payload)
                found.append(Window(key, output["start"], output["end"], output["value"]))
        return sorted(found, key=lambda w: (w.key, w.start, json.dumps(w.value, sort_keys=True)))
