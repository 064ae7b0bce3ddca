"""A tiny in-memory driver with mapWithState / updateStateByKey semantics, batch by batch.

It is the oracle the Spark runs are compared with (and a way to try a state function without
Spark). It is written separately from the Spark processor on purpose: only the JSON encoding
conventions and the :class:`State` object are shared.

Semantics, per micro-batch (``run_batch``):

1. each key with records is called (per record, in event-time order when the spec has an event
   time, else in input order; or once with all its values for a batch function); an exception
   dead-letters the record(s) and restores the state from before it (before the batch for a
   batch function);
2. then every key whose deadline is due (processing time, or the batch's watermark, at or past
   the deadline) is called once with no value while timing out; unless it updates its state
   then, the key is removed;
3. in event time the watermark then moves to ``max event time seen - watermark delay``; when it
   moved, a data-less batch runs step 2 with the new watermark (as Spark's no-data batch does).

A key's deadline is its last event time (or the batch processing time) plus the timeout,
set whenever a record of the key was processed and the key keeps a state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, NamedTuple, Sequence

from streamstate.jobs.state.api import _state_updater
from streamstate.jobs.state.spec import StateSpec
from streamstate.jobs.state.state import (
    _MISSING,
    State,
    StateCodec,
    StateTypeError,
    describe_key,
    lenient_json,
    one_line,
    to_json,
)


class Record(NamedTuple):
    """One input record: the key, the value the function receives, and its event time (ms) if any."""

    key: Any
    value: Any
    time: int | None = None


class Row(NamedTuple):
    """One result row: ``kind`` is output | snapshot | dead_letter; ``payload`` is JSON (or None)."""

    kind: str
    key: str
    payload: str | None
    reason: str | None = None


@dataclass
class ReferenceRun:
    """Feeds batches through a spec; collects every result row in order in :attr:`rows`."""

    spec: StateSpec
    watermark_delay_ms: int = 0
    store: dict[Any, str] = field(default_factory=dict)
    deadlines: dict[Any, int] = field(default_factory=dict)
    watermark_ms: int = 0
    max_event_time: int | None = None
    rows: list[Row] = field(default_factory=list)
    started: bool = False

    def __post_init__(self) -> None:
        self.codec = StateCodec(self.spec.state_cls)

    # ------------------------------------------------------------------ batches
    def run_batch(self, records: Iterable[Record | tuple], processing_time_ms: int = 0) -> None:
        """Process one micro-batch of records (then due timeouts, then a no-data batch if needed)."""
        records = [Record(*r) for r in records]
        if not self.started:
            self._load_initial(processing_time_ms)
        by_key: dict[Any, list[Record]] = {}
        for record in records:
            by_key.setdefault(record.key, []).append(record)
        for key, key_records in by_key.items():
            if self.spec.event_time_column is not None:
                key_records.sort(key=lambda r: (r.time is None, r.time or 0))
            self._process_key(key, key_records, processing_time_ms)
        self._fire_timers(processing_time_ms)
        if self.spec.event_time_column is not None:
            times = [r.time for r in records if r.time is not None]
            if times:
                self.max_event_time = max([*times, self.max_event_time or times[0]])
                new_watermark = max(self.watermark_ms, self.max_event_time - self.watermark_delay_ms)
                if new_watermark > self.watermark_ms:
                    self.watermark_ms = new_watermark
                    self._fire_timers(processing_time_ms)

    def tick(self, processing_time_ms: int) -> None:
        """A batch without data at this processing time (timers only)."""
        self.run_batch([], processing_time_ms)

    def _load_initial(self, processing_time_ms: int) -> None:
        self.started = True
        for key, value in self.spec.initial or []:
            self.store[key] = self.codec.encode(value)
            if self.spec.timeout_ms is not None and self.spec.event_time_column is None:
                self.deadlines[key] = processing_time_ms + self.spec.timeout_ms

    # ------------------------------------------------------------------ one key
    def _state(self, key: Any, processing_time_ms: int) -> State:
        text = self.store.get(key)
        value = _MISSING if text is None else self.codec.decode(key, text)
        return State(key, value, watermark_ms=self.watermark_ms, processing_time_ms=processing_time_ms)

    def _is_late(self, record: Record) -> bool:
        return (
            self.spec.late_records == "dead_letter"
            and record.time is not None
            and record.time <= self.watermark_ms
        )

    def _process_key(self, key: Any, records: list[Record], processing_time_ms: int) -> None:
        before = self.store.get(key)
        on_time = []
        for record in records:
            if self._is_late(record):
                reason = (
                    f"late record: event time {record.time} ms is at or behind the watermark {self.watermark_ms} ms"
                )
                self.rows.append(Row("dead_letter", describe_key(key), lenient_json(record.value), reason))
            else:
                on_time.append(record)
        groups = [[r] for r in on_time] if self.spec.per_record else ([on_time] if on_time else [])
        for group in groups:
            arg = group[0].value if self.spec.per_record else [r.value for r in group]
            if self._call(key, arg, group, processing_time_ms, timing_out=False):
                self._touch_deadline(key, group, processing_time_ms)
        after = self.store.get(key)
        if after != before:
            self.rows.append(Row("snapshot", describe_key(key), after))

    def _touch_deadline(self, key: Any, group: list[Record], processing_time_ms: int) -> None:
        timeout = self.spec.timeout_ms
        if timeout is None or key not in self.store:
            self.deadlines.pop(key, None)
            return
        if self.spec.event_time_column is None:
            self.deadlines[key] = processing_time_ms + timeout
            return
        candidates = [r.time + timeout for r in group if r.time is not None]
        if key in self.deadlines:
            candidates.append(self.deadlines[key])
        if candidates:
            self.deadlines[key] = max(candidates)

    def _call(self, key: Any, arg: Any, group: list[Record], processing_time_ms: int, timing_out: bool) -> bool:
        state = self._state(key, processing_time_ms)
        state._begin_call(timing_out)
        try:
            result = self.spec.func(key, arg, state)
            if result is None:
                outputs = []
            elif self.spec.per_record:
                outputs = result if isinstance(result, list) else [result]
            else:
                outputs = list(result)
            encoded = [to_json(o) for o in outputs]
            keeps = state.exists() and (state._touched or not timing_out)
            text = None
            if keeps:
                text = self.codec.encode(state.get()) if state._touched else self.store[key]
        except StateTypeError:
            raise
        except Exception as error:  # noqa: BLE001 - user errors become dead letters
            for record in group or [None]:
                value = None if record is None else lenient_json(record.value)
                self.rows.append(Row("dead_letter", describe_key(key), value, one_line(error)))
            return False
        self.rows.extend(Row("output", describe_key(key), o) for o in encoded)
        if text is None:
            self.store.pop(key, None)
            self.deadlines.pop(key, None)
        else:
            self.store[key] = text
        return True

    def _fire_timers(self, processing_time_ms: int) -> None:
        now = self.watermark_ms if self.spec.event_time_column is not None else processing_time_ms
        due = sorted((d, repr(k), k) for k, d in self.deadlines.items() if d <= now)
        for _, _, key in due:
            before = self.store.get(key)
            del self.deadlines[key]
            self._call(key, None if self.spec.per_record else [], [], processing_time_ms, timing_out=True)
            after = self.store.get(key)
            if after != before or after is None:
                self.rows.append(Row("snapshot", describe_key(key), after))


def run_map_with_state(
    spec: StateSpec,
    batches: Sequence[Iterable[Record | tuple]],
    *,
    processing_times_ms: Sequence[int] | None = None,
    watermark_delay_ms: int = 0,
) -> list[Row]:
    """All result rows of ``spec`` over ``batches`` (each a list of ``(key, value, event_time_ms)``)."""
    run = ReferenceRun(spec, watermark_delay_ms=watermark_delay_ms)
    for index, batch in enumerate(batches):
        run.run_batch(batch, processing_times_ms[index] if processing_times_ms else 0)
    return run.rows


def run_update_state_by_key(
    func: Any,
    batches: Sequence[Iterable[Record | tuple]],
    *,
    initial_state: Any = None,
    timeout: Any = None,
    event_time: bool = False,
    state_type: Any = None,
    processing_times_ms: Sequence[int] | None = None,
    watermark_delay_ms: int = 0,
) -> list[Row]:
    """``update_state_by_key`` semantics over ``batches``; outputs are the new states as JSON."""
    spec = StateSpec.batch_function(_state_updater(func)).initial_state(initial_state).state_type(state_type)
    if timeout is not None:
        spec = spec.timeout(timeout)
    if event_time:
        spec = spec.event_time("event_time")
    return run_map_with_state(
        spec, batches, processing_times_ms=processing_times_ms, watermark_delay_ms=watermark_delay_ms
    )


def by_key(rows: Iterable[Any]) -> dict[str, list[tuple]]:
    """Rows grouped per key, in order: the comparable form (order across keys is not defined)."""
    grouped: dict[str, list[tuple]] = {}
    for row in rows:
        kind, key, payload, reason = row[0], row[1], row[2], row[3]
        grouped.setdefault(key, []).append((kind, payload, reason))
    return grouped
