"""The Spark side: one ``StatefulProcessor`` running a spec's user function per key.

Per touched key and batch it makes one state read and at most one state write (the store
holds the JSON text of the state and the key's timer deadline), and moves the timer only when
the deadline changes: each state call is a socket round trip from the Python worker, and those
round trips are what a batch costs.

Input rows are laid out by :mod:`streamstate.jobs.state.api` as ``INPUT_COLUMNS``; output rows
are ``OUTPUT_SCHEMA``, one row per output, state snapshot or dead letter.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

from pyspark.sql import Row
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

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

KEY, VALUE, TIME, TOPIC, PARTITION, OFFSET = range(6)
INPUT_COLUMNS = ("__ss_key", "__ss_value", "__ss_time", "__ss_topic", "__ss_partition", "__ss_offset")
OUTPUT_SCHEMA = (
    "kind STRING, key STRING, payload STRING, reason STRING, topic STRING, `partition` INT, `offset` LONG"
)
STORE_SCHEMA = "state STRING, deadline LONG"

OUTPUT, SNAPSHOT, DEAD_LETTER = "output", "snapshot", "dead_letter"
# The row-based operator serialises Rows by field name.
OutputRow = Row("kind", "key", "payload", "reason", "topic", "partition", "offset")


@dataclass(frozen=True)
class Plan:
    """Everything a worker needs to run one spec; picklable."""

    func: Any
    per_record: bool
    codec: StateCodec
    timeout_ms: int | None
    event_time: bool
    late_to_dead_letter: bool
    ordered_by_offset: bool
    snapshot: Any = None  # (key, state | None) -> snapshot payload; default: the state's JSON


def as_outputs(result: Any, per_record: bool) -> list:
    """A per-record result is None, a list of outputs, or one output; a batch result is an iterable."""
    if result is None:
        return []
    if per_record:
        return result if isinstance(result, list) else [result]
    return list(result)


def plain(value: Any) -> Any:
    """Spark struct values arrive as Rows; user functions get dicts."""
    return value.asDict(recursive=True) if isinstance(value, Row) else value


def record_order(plan: Plan):
    """Sort key for a key's rows: event time first when set, then source position."""
    if plan.event_time:
        return lambda row: (row[TIME] is None, row[TIME] or 0, row[PARTITION] or 0, row[OFFSET] or 0)
    if plan.ordered_by_offset:
        return lambda row: (row[PARTITION] or 0, row[OFFSET] or 0)
    return None


class KeyRun:
    """One key's work in one batch: applies the function, keeps what to commit, collects rows."""

    def __init__(self, plan: Plan, key: Any, text: str | None, deadline: int | None, timer_values: TimerValues):
        self.plan = plan
        self.key = key
        self.key_text = describe_key(key)
        self.committed = text
        self.deadline = deadline
        self.rows: list[tuple] = []
        value = _MISSING if text is None else plan.codec.decode(key, text)
        processing_time = timer_values.getCurrentProcessingTimeInMs()
        self.state = State(
            key,
            value,
            watermark_ms=timer_values.getCurrentWatermarkInMs(),
            # Without timers Spark gives no batch time (timeMode None): the wall clock stands in.
            processing_time_ms=processing_time if processing_time >= 0 else int(time.time() * 1000),
        )

    # ------------------------------------------------------------------ calls
    def call(self, arg: Any, records: list, timing_out: bool = False) -> bool:
        """Run the function once; on error dead-letter ``records`` and restore the committed state."""
        state = self.state
        state._begin_call(timing_out)
        try:
            outputs = [to_json(o) for o in as_outputs(self.plan.func(self.key, arg, state), self.plan.per_record)]
            text = self.committed
            if state._touched:
                text = None if not state.exists() else self._encode(state)
        except StateTypeError:
            raise
        except Exception as error:  # noqa: BLE001 - any user error becomes a dead letter
            reason = one_line(error)
            self.rows.extend(self.dead_letter(row, reason) for row in records or [None])
            state._reset(_MISSING if self.committed is None else self.plan.codec.decode(self.key, self.committed))
            return False
        self.committed = text
        self.rows.extend((OUTPUT, self.key_text, out, None, None, None, None) for out in outputs)
        return True

    def _encode(self, state: State) -> str:
        text = self.plan.codec.encode(state._value)
        if self.plan.codec.state_cls is not None:
            # Later calls see the validated value, as the next batch will.
            state._reset(self.plan.codec.decode(self.key, text))
        return text

    def dead_letter(self, row: tuple | None, reason: str) -> tuple:
        if row is None:
            return (DEAD_LETTER, self.key_text, None, reason, None, None, None)
        return (DEAD_LETTER, self.key_text, lenient_json(plain(row[VALUE])), reason, row[TOPIC], row[PARTITION], row[OFFSET])

    def is_late(self, row: tuple) -> bool:
        time = row[TIME]
        return self.plan.late_to_dead_letter and time is not None and time <= self.state.watermark_ms

    def late_reason(self, row: tuple) -> str:
        return (
            f"late record: event time {row[TIME]} ms is at or behind the watermark "
            f"{self.state.watermark_ms} ms"
        )

    # ------------------------------------------------------------------ deadlines
    def touched_deadline(self, times: Iterable[int | None], previous: int | None) -> int | None:
        """The idle deadline after data: last event time (or now) plus the timeout."""
        if self.plan.timeout_ms is None or self.committed is None:
            return None
        if not self.plan.event_time:
            return self.state.processing_time_ms + self.plan.timeout_ms
        candidates = [t + self.plan.timeout_ms for t in times if t is not None]
        if previous is not None:
            candidates.append(previous)
        return max(candidates, default=None)

    # ------------------------------------------------------------------ per batch
    def apply_rows(self, rows: list[tuple]) -> None:
        order = record_order(self.plan)
        if order is not None:
            rows.sort(key=order)
        if self.plan.late_to_dead_letter:
            on_time = []
            for row in rows:
                if self.is_late(row):
                    self.rows.append(self.dead_letter(row, self.late_reason(row)))
                else:
                    on_time.append(row)
            rows = on_time
        if not rows:
            return
        if self.plan.per_record:
            for row in rows:
                if self.call(plain(row[VALUE]), [row]):
                    kept = self.deadline if self.state.exists() else None
                    self.deadline = self._deadline_after_call(self.touched_deadline([row[TIME]], kept))
        elif self.call([plain(row[VALUE]) for row in rows], rows):
            kept = self.deadline if self.committed is not None else None
            self.deadline = self._deadline_after_call(self.touched_deadline([row[TIME] for row in rows], kept))

    def apply_timeout(self) -> None:
        if self.call(None if self.plan.per_record else [], [], timing_out=True):
            if not (self.state._touched and self.state.exists()):
                self.committed = None
            # Kept after a timeout: no timer until new data, unless the call set one.
            self.deadline = self._deadline_after_call(None)
        else:
            self.deadline = None

    def _deadline_after_call(self, idle_deadline: int | None) -> int | None:
        return None if self.committed is None else self.state._explicit_timeout(idle_deadline)

    def snapshot_payload(self) -> str | None:
        """What a snapshot row carries: the spec's snapshot of the state, else its JSON text."""
        if self.plan.snapshot is None:
            return self.committed
        view = self.plan.snapshot(self.key, None if self.committed is None else self.state._value)
        return view if view is None or isinstance(view, str) else to_json(view)


class MappingProcessor(StatefulProcessor):
    """Runs a :class:`Plan` under ``transformWithState`` (row-based)."""

    def __init__(self, plan: Plan):
        self.plan = plan

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.store = handle.getValueState("mapping_state", STORE_SCHEMA)

    def handleInitialState(self, key: Any, initialState: Row, timerValues: TimerValues) -> None:
        text = self.plan.codec.encode(self.plan.codec.decode(key[0], initialState[1]))
        deadline = None
        if self.plan.timeout_ms is not None and not self.plan.event_time:
            deadline = timerValues.getCurrentProcessingTimeInMs() + self.plan.timeout_ms
            self.handle.registerTimer(deadline)
        self.store.update((text, deadline))

    def handleInputRows(self, key: Any, rows: Iterator[Row], timerValues: TimerValues) -> Iterator[Row]:
        stored = self.store.get()
        text, deadline = (None, None) if stored is None else (stored[0], stored[1])
        run = KeyRun(self.plan, key[0], text, deadline, timerValues)
        run.apply_rows(list(rows))
        self._commit(run, text, deadline, deadline)
        return (OutputRow(*row) for row in run.rows)

    def handleExpiredTimer(
        self, key: Any, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[Row]:
        stored = self.store.get()
        if stored is None or stored[1] != expiredTimerInfo.getExpiryTimeInMs():
            return iter(())  # a timer left from an older deadline
        text, deadline = stored[0], stored[1]
        run = KeyRun(self.plan, key[0], text, deadline, timerValues)
        run.apply_timeout()
        # The expired timer itself is deleted by Spark after this call.
        self._commit(run, text, deadline, None)
        return (OutputRow(*row) for row in run.rows)

    def _commit(self, run: KeyRun, old_text: str | None, old_deadline: int | None, old_timer: int | None) -> None:
        if run.committed is None:
            if old_text is not None:
                self.store.clear()
                run.rows.append((SNAPSHOT, run.key_text, run.snapshot_payload(), None, None, None, None))
        elif run.committed != old_text or run.deadline != old_deadline:
            self.store.update((run.committed, run.deadline))
            if run.committed != old_text:
                run.rows.append((SNAPSHOT, run.key_text, run.snapshot_payload(), None, None, None, None))
        if run.deadline != old_timer:
            if old_timer is not None:
                self.handle.deleteTimer(old_timer)
            if run.deadline is not None:
                self.handle.registerTimer(run.deadline)

    def close(self) -> None:
        pass
