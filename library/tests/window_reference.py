"""The plain-Python reference of the window operations: what each batch must emit, computed
from the definition (every window holding a record, all its records reduced), with no panes,
no running values and no state engine. The window tests compare the tester and Spark with it.

Its model of streaming is the state API's: in event time, a record at or behind the watermark
when its batch runs is late (dead-lettered); after a batch the watermark is the newest event
time seen minus the delay (never moving back); a window is emitted (append) in the first
batch after which the clock reached its end. On processing time every record of a batch is
at the batch's time, and the clock is that time. In update mode, each batch emits every
window holding one of its records, with all the window's records so far.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import reduce
from typing import Any, Callable


@dataclass(frozen=True)
class Record:
    key: Any
    value: Any
    time: int | None = None


def window_starts(time: int, window_ms: int, slide_ms: int) -> list[int]:
    """The starts of every window ``[start, start + window)``, start a multiple of the slide, holding ``time``."""
    first = (time - window_ms) // slide_ms + 1
    return [k * slide_ms for k in range(first, time // slide_ms + 1)]


@dataclass
class ReferenceWindows:
    """Feed it the batches one at a time; each returns ``(windows, late records)``, windows as
    sorted ``(key, start, end, value)``."""

    window_ms: int
    slide_ms: int
    func: Callable[[Any, Any], Any]
    mode: str = "append"
    watermark_delay_ms: int = 0
    event_time: bool = True
    filter_func: Callable[[Any, Any], bool] | None = None
    watermark_ms: int = 0
    accepted: list[Record] = field(default_factory=list)
    emitted: set = field(default_factory=set)

    def batch(self, records: list[Record], processing_time_ms: int = 0) -> tuple[list[tuple], list[Record]]:
        if not self.event_time:
            records = [Record(r.key, r.value, processing_time_ms) for r in records]
        late = [r for r in records if self.event_time and r.time <= self.watermark_ms]
        new = [r for r in records if not (self.event_time and r.time <= self.watermark_ms)]
        self.accepted += new
        out = []
        if self.mode == "update":
            changed = {(r.key, start) for r in new for start in window_starts(r.time, self.window_ms, self.slide_ms)}
            out = [w for key, start in changed if (w := self._window(key, start)) is not None]
        if self.event_time:
            if records:
                self.watermark_ms = max(self.watermark_ms, max(r.time for r in records) - self.watermark_delay_ms)
            clock = self.watermark_ms
        else:
            clock = processing_time_ms
        if self.mode == "append":
            holding = {(r.key, start) for r in self.accepted for start in window_starts(r.time, self.window_ms, self.slide_ms)}
            closing = [w for w in holding if w[1] + self.window_ms <= clock and w not in self.emitted]
            self.emitted.update(closing)
            out = [w for key, start in closing if (w := self._window(key, start)) is not None]
        return sorted(out, key=lambda w: (str(w[0]), w[1])), late

    def _window(self, key: Any, start: int) -> tuple | None:
        end = start + self.window_ms
        values = [r.value for r in sorted(self.accepted, key=lambda r: r.time) if r.key == key and start <= r.time < end]
        value = reduce(self.func, values)
        if self.filter_func is not None and not self.filter_func(key, value):
            return None
        return (key, start, end, value)
