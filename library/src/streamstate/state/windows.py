"""The DStream window family's logic, independent of Spark: which window a time falls in, the
per-key partial values, and ``reduceByKeyAndWindow``'s incremental add and subtract.

Windows are Spark's: ``[k * slide, k * slide + window)`` for every integer ``k``, in epoch
milliseconds, each emitted once the clock (the watermark in event time, the batch's
processing time otherwise) reaches its end. Time is cut into *panes* of ``gcd(window, slide)``
ms (the slide itself when it divides the window), so that every window and every slide is a
whole number of panes, and a key's state holds one partial value per pane with data: a
window's value is its panes' partials combined with ``func``, and nothing older than the
oldest open window is kept.

With ``inv_func`` (and append mode) the state also holds the running value of the next window
to close. Closing it moves the running value one slide on: ``inv_func`` takes out the panes
that left the window and ``func`` adds those that entered, so a slide costs the panes of one
slide, not the records of a window. A key whose window becomes empty is recomputed from its
panes when data comes back (never subtracted down to a "zero"), and dropped when it has no
pane left. Floats drift under that subtraction (``docs/windows.md``).

:class:`WindowStep` is the batch function the state engine runs per key (a
:class:`~streamstate.state.spec.StateSpec` built by :func:`window_spec`), so checkpoints, dead
letters, typed state and the in-memory tester are the engine's. A data call only adds to the
panes (a record whose ``func`` raises is dead-lettered and leaves no trace); closing runs in
the key's own timer at the next window end, so a ``func``/``inv_func`` that raises there is
dead-lettered for the whole close and tried again at the next batch whose clock moves on (or
when the key next gets data, if sooner).
"""

from __future__ import annotations

import inspect
import operator
from dataclasses import dataclass, replace
from functools import reduce
from math import gcd
from typing import Any, Callable, Generic, Literal, TypeVar

from typing_extensions import TypedDict

from streamstate.errors import StateError
from streamstate.state.spec import Duration, StateSpec, duration_ms

OutputMode = Literal["append", "update"]
Inputs = Literal["keyed", "global", "by_value"]  # what keys the records: a key column, nothing, the value itself
GLOBAL_KEY = ""  # the one key of window, count_by_window and reduce_by_window, as DStream's single stream
TIME, VALUE = "t", "v"  # the fields of the value the engine hands a window step: {"t": event time ms, "v": value}

V = TypeVar("V")


class WindowError(StateError, ValueError):
    """A window operation asked for something it cannot do (a slide longer than its window, an
    unknown output mode, event time without its column)."""


class WindowState(TypedDict, Generic[V]):
    """A key's stored state: ``panes`` (pane index -> partial value), the running ``value`` of
    window ``window`` (incremental mode only, else None) and ``next``, the first window not
    yet closed (None until one closed)."""

    panes: dict[int, V]
    window: int | None
    value: V | None
    next: int | None


@dataclass(frozen=True)
class Slides:
    """Window and slide lengths in ms, and the arithmetic of windows ``k`` and panes ``q``."""

    window_ms: int
    slide_ms: int

    @classmethod
    def of(cls, window: Duration, slide: Duration | None = None) -> Slides:
        """From Spark-style durations (``"10 minutes"``); no slide: tumbling windows."""
        try:
            window_ms = duration_ms(window, "the window length")
            slide_ms = window_ms if slide is None else duration_ms(slide, "the slide interval")
        except ValueError as error:
            raise WindowError(str(error)) from None
        if slide_ms > window_ms:
            raise WindowError(
                f"the slide ({slide!r}) is longer than the window ({window!r}): records between windows would "
                "belong to none (Spark's window() refuses it too)"
            )
        return cls(window_ms, slide_ms)

    @property
    def pane_ms(self) -> int:
        return gcd(self.window_ms, self.slide_ms)

    @property
    def panes_per_window(self) -> int:
        return self.window_ms // self.pane_ms

    @property
    def panes_per_slide(self) -> int:
        return self.slide_ms // self.pane_ms

    def pane_of(self, time_ms: int) -> int:
        return time_ms // self.pane_ms

    def first_window_of(self, pane: int) -> int:
        """The earliest window holding ``pane``: ``ceil((pane - n + 1) / m)``."""
        return -((self.panes_per_window - 1 - pane) // self.panes_per_slide)

    def last_window_of(self, pane: int) -> int:
        return pane // self.panes_per_slide

    def windows_of_pane(self, pane: int) -> range:
        return range(self.first_window_of(pane), self.last_window_of(pane) + 1)

    def panes_of(self, window: int) -> range:
        first = window * self.panes_per_slide
        return range(first, first + self.panes_per_window)

    def start_ms(self, window: int) -> int:
        return window * self.slide_ms

    def end_ms(self, window: int) -> int:
        return window * self.slide_ms + self.window_ms


def _collect(partial: list, records: list) -> list:
    return partial + records


@dataclass(frozen=True)
class WindowStep:
    """One key's window work per call of the state engine (``StateSpec.batch_function``):
    ``step(key, values, state) -> outputs``, each output ``{"start", "end", "value"}`` (ms).

    ``records``: the values are records collected per window (DStream ``window``; ``func``
    concatenates lists) and emitted one output each. ``incremental``: ``inv_func`` keeps the next
    window's running value."""

    slides: Slides
    func: Callable[[Any, Any], Any]
    inv_func: Callable[[Any, Any], Any] | None = None
    filter_func: Callable[[Any, Any], bool] | None = None
    mode: OutputMode = "append"
    event_time: bool = True
    records: bool = False

    def __post_init__(self) -> None:
        if self.mode not in ("append", "update"):
            raise WindowError(
                f"output mode must be 'append' or 'update', got {self.mode!r}: complete mode would keep every "
                "window for ever, and a window operation's state is bounded by its window length"
            )

    @property
    def incremental(self) -> bool:
        return self.inv_func is not None and self.mode == "append"

    # ------------------------------------------------------------------ the engine's call
    def __call__(self, key: Any, values: list, state: Any) -> list:
        if state.has_timed_out():
            kept: WindowState = state.get()
            outputs = self._close(key, kept, state.watermark_ms if self.event_time else state.processing_time_ms)
        else:
            kept = state.get_option() or WindowState(panes={}, window=None, value=None, next=None)
            outputs = self._add(key, kept, values, state.processing_time_ms)
        if kept["panes"]:
            state.update(kept)
            state.set_timeout_timestamp(self.due_ms(kept))
        elif state.exists():
            state.remove()
        return outputs

    def snapshot(self, key: Any, kept: WindowState | None) -> dict | None:
        """What a key's state snapshot publishes: its pane count and next close (the partials
        themselves can be a window of records, too large for one record)."""
        if kept is None:
            return None
        return {"panes": len(kept["panes"]), "next_close_ms": self.due_ms(kept)}

    def due_ms(self, kept: WindowState) -> int:
        """When the key's timer is due: the next window to close (append), or when its oldest
        pane leaves every window (update: only to drop it)."""
        if self.mode == "update":
            return self.slides.end_ms(self.slides.last_window_of(min(kept["panes"])))
        window = kept["window"] if self.incremental else self._next_window(kept)
        assert window is not None  # a key with panes has a window to close
        return self.slides.end_ms(window)

    # ------------------------------------------------------------------ data
    def _add(self, key: Any, kept: WindowState, values: list, now_ms: int) -> list:
        panes, changed, outputs = kept["panes"], set(), []
        for record in values:
            time = record[TIME] if self.event_time else now_ms
            pane = self.slides.pane_of(time)
            if self.records and self.mode == "update":
                # Each record with every window it falls in, as it arrives: nothing to keep.
                outputs += [self._output(window, record[VALUE]) for window in self.slides.windows_of_pane(pane)]
                continue
            value = [record[VALUE]] if self.records else record[VALUE]
            panes[pane] = self.func(panes[pane], value) if pane in panes else value
            changed.add(pane)
            if self.incremental:
                self._follow(kept, pane, value)
        if self.mode == "update":
            windows = sorted({window for pane in changed for window in self.slides.windows_of_pane(pane)})
            outputs += [out for window in windows for out in self._emit(key, window, self._combined(panes, window))]
        return outputs

    def _follow(self, kept: WindowState, pane: int, value: Any) -> None:
        """Keep the running value on the earliest open window with data, after ``value`` went into ``pane``.
        Every window holding a new record is open (the record is past the clock), so ``candidate`` is."""
        candidate = self.slides.first_window_of(pane)
        current = kept["window"]
        if current is None or candidate < current:
            kept["window"], kept["value"] = candidate, self._combined(kept["panes"], candidate)
        elif pane in self.slides.panes_of(current):
            kept["value"] = self.func(kept["value"], value)

    # ------------------------------------------------------------------ closing
    def _close(self, key: Any, kept: WindowState, clock_ms: int) -> list:
        outputs: list = []
        if self.mode == "update":  # windows were emitted as they changed: only forget what every window left
            for pane in [p for p in kept["panes"] if self.slides.end_ms(self.slides.last_window_of(p)) <= clock_ms]:
                del kept["panes"][pane]
            return outputs
        while kept["panes"]:
            window = kept["window"] if self.incremental else self._next_window(kept)
            if window is None or self.slides.end_ms(window) > clock_ms:
                break
            value = kept["value"] if self.incremental else self._combined(kept["panes"], window)
            outputs += self._emit(key, window, value)
            self._slide(kept, window)
        return outputs

    def _slide(self, kept: WindowState, window: int) -> None:
        """Window ``window`` closed: drop the panes no open window holds; move the running value on."""
        panes, per_slide = kept["panes"], self.slides.panes_per_slide
        leaving = [panes.pop(pane) for pane in range(window * per_slide, (window + 1) * per_slide) if pane in panes]
        kept["next"] = window + 1
        if not self.incremental:
            return
        following = window + 1
        if not panes:
            kept["window"], kept["value"] = None, None
        elif not any(pane in panes for pane in self.slides.panes_of(following)):
            # The window empties: restart from the next data, exactly, instead of subtracting down to "zero".
            restart = self.slides.first_window_of(min(panes))
            kept["window"], kept["value"] = restart, self._combined(panes, restart)
        else:
            assert self.inv_func is not None  # incremental
            value = kept["value"]
            if leaving:
                value = self.inv_func(value, reduce(self.func, leaving))
            last = self.slides.panes_of(following)[-per_slide:]
            entering = [panes[pane] for pane in last if pane in panes]
            if entering:
                value = self.func(value, reduce(self.func, entering))
            kept["window"], kept["value"] = following, value

    def _next_window(self, kept: WindowState) -> int | None:
        """The first open window with data: the earliest holding the oldest pane, not yet closed."""
        if not kept["panes"]:
            return None
        window = self.slides.first_window_of(min(kept["panes"]))
        return window if kept["next"] is None else max(window, kept["next"])

    # ------------------------------------------------------------------ values and outputs
    def _combined(self, panes: dict, window: int) -> Any:
        partials = [panes[pane] for pane in self.slides.panes_of(window) if pane in panes]
        return reduce(self.func, partials)

    def _emit(self, key: Any, window: int, value: Any) -> list:
        if self.records:
            return [self._output(window, record) for record in value]
        if self.filter_func is not None and not self.filter_func(key, value):
            return []
        return [self._output(window, value)]

    def _output(self, window: int, value: Any) -> dict:
        return {"start": self.slides.start_ms(window), "end": self.slides.end_ms(window), "value": value}


@dataclass(frozen=True)
class WindowOp:
    """One of the DStream window operations, without Spark: its :class:`WindowStep`, what keys
    its records (``inputs``) and whether each record counts as 1. Build with the constructors,
    named after the DStream calls; :func:`window_spec` makes its ``StateSpec``."""

    step: WindowStep
    inputs: Inputs
    counts: bool = False
    state_type: Any = None

    @classmethod
    def window(cls, window: Duration, slide: Duration | None = None, *, event_time: bool = True, output_mode: OutputMode = "append") -> WindowOp:
        """DStream ``window(windowLength, slideInterval)``: every record of each window."""
        step = WindowStep(Slides.of(window, slide), _collect, mode=output_mode, event_time=event_time, records=True)
        return cls(step, "global")

    @classmethod
    def count_by_window(cls, window: Duration, slide: Duration | None = None, *, event_time: bool = True, output_mode: OutputMode = "append") -> WindowOp:
        """DStream ``countByWindow``: the number of records in each window."""
        return cls(_counting(window, slide, event_time, output_mode), "global", counts=True)

    @classmethod
    def reduce_by_window(
        cls, func: Callable[[Any, Any], Any], inv_func: Callable[[Any, Any], Any] | None, window: Duration,
        slide: Duration | None = None, *, event_time: bool = True, output_mode: OutputMode = "append", state_type: Any = None,
    ) -> WindowOp:
        """DStream ``reduceByWindow(func, invFunc, ...)``: all values of each window reduced with ``func``."""
        return cls(_reducing(func, inv_func, window, slide, None, event_time, output_mode), "global", state_type=state_type)

    @classmethod
    def reduce_by_key_and_window(
        cls, func: Callable[[Any, Any], Any], inv_func: Callable[[Any, Any], Any] | None, window: Duration,
        slide: Duration | None = None, filter_func: Callable[[Any, Any], bool] | None = None, *,
        event_time: bool = True, output_mode: OutputMode = "append", state_type: Any = None,
    ) -> WindowOp:
        """DStream ``reduceByKeyAndWindow(func, invFunc, ..., filterFunc)``: each key's values of each window."""
        return cls(_reducing(func, inv_func, window, slide, filter_func, event_time, output_mode), "keyed", state_type=state_type)

    @classmethod
    def count_by_value_and_window(
        cls, window: Duration, slide: Duration | None = None, *, event_time: bool = True, output_mode: OutputMode = "append",
    ) -> WindowOp:
        """DStream ``countByValueAndWindow``: how often each value occurs in each window."""
        return cls(_counting(window, slide, event_time, output_mode), "by_value", counts=True)

    def on_processing_time(self) -> WindowOp:
        """The same operation with windows of batch processing time (each record at its batch's time)."""
        return replace(self, step=replace(self.step, event_time=False))

    def engine_record(self, record: tuple) -> tuple:
        """A record of this operation (``(key, value[, time])`` when keyed, else ``(value[, time])``)
        as the engine's ``(key, {"t": time, "v": value}, time)``."""
        if self.inputs == "keyed":
            key, value, *rest = record
        else:
            value, *rest = record
            key = value if self.inputs == "by_value" else GLOBAL_KEY
        time = rest[0] if rest else None
        return key, {TIME: time, VALUE: 1 if self.counts else value}, time


def _counting(window: Duration, slide: Duration | None, event_time: bool, output_mode: OutputMode) -> WindowStep:
    inverse = operator.sub if output_mode == "append" else None
    return WindowStep(Slides.of(window, slide), operator.add, inverse, mode=output_mode, event_time=event_time)


def _reducing(
    func: Callable, inv_func: Callable | None, window: Duration, slide: Duration | None, filter_func: Callable | None,
    event_time: bool, output_mode: OutputMode,
) -> WindowStep:
    for name, given in (("func", func), ("inv_func", inv_func), ("filter_func", filter_func)):
        if given is not None and not callable(given):
            raise TypeError(f"{name} must be callable, got {type(given).__name__}")
    if filter_func is not None and not _takes_two(filter_func):
        # DStream's filterFunc takes one (key, value) tuple: such a function would raise at every
        # close, each dead-lettered, and the key's panes would never be cleared.
        raise WindowError(
            "filter_func is called as filter_func(key, value) and must take two arguments (DStream's filterFunc "
            "took one (key, value) tuple): write `lambda key, value: ...`"
        )
    if inv_func is not None and output_mode == "update":
        # Update mode emits each window as it grows and never moves a window on: nothing to subtract.
        inv_func = None
    return WindowStep(Slides.of(window, slide), func, inv_func, filter_func, output_mode, event_time)


def _takes_two(function: Callable) -> bool:
    """Whether ``function(key, value)`` binds (a callable without a signature is given the benefit)."""
    try:
        inspect.signature(function).bind(None, None)
    except TypeError:
        return False
    except ValueError:  # no signature to read (some builtins)
        return True
    return True


def window_spec(op: WindowOp, event_time_column: str | None) -> StateSpec:
    """The state engine's spec of ``op``: its step as a batch function, on the records' event
    time (late records dead-lettered) or on processing time, with its compact snapshots."""
    spec = StateSpec.batch_function(op.step).snapshots(op.step.snapshot)
    if op.step.event_time:
        if event_time_column is None:
            raise WindowError("an event-time window operation needs its event-time column")
        spec = spec.event_time(event_time_column, late="dead_letter")
    else:
        spec = spec.processing_time_timers()
    if op.state_type is not None:
        spec = spec.state_type(WindowState[op.state_type])  # type: ignore[name-defined]  # a type given at run time
    return spec
