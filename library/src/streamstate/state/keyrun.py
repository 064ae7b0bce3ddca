"""One key's work in one micro-batch, independent of Spark: the per-key semantics of the state API.

:class:`KeyRun` takes a key's stored state (the codec's bytes) and timer deadline, applies the spec's
function to the key's records of the batch (or times the key out), and leaves what to commit
(the new stored state and deadline), the snapshot to publish and the result rows. The Spark processor
runs one per touched key inside a bucket; the unit tests run it directly.

Input rows are tuples laid out as ``INPUT_COLUMNS`` by :mod:`streamstate.state.operators`, the
value a record of the run's value source (:mod:`streamstate.state.columns`: the value itself,
or its row in the bucket's Arrow table); result rows are ``OUTPUT_SCHEMA`` tuples, one per
output, state snapshot or dead letter.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence, cast

from streamstate.state.kinds import RowKind
from streamstate.state.columns import NO_VALUES, ROW_VALUES, Columns, KeyRecords, ValueSource
from streamstate.state.outputs import as_outputs, dead_letter_value, output_row, snapshot_payload
from streamstate.state.state import NO_STATE, StateCodec, StateDriver, StateTypeError, describe_key, one_line

if TYPE_CHECKING:
    from streamstate.state.spec import StateSpec

KEY, VALUE, TIME, TOPIC, PARTITION, OFFSET = range(6)
INPUT_COLUMNS = ("__ss_key", "__ss_value", "__ss_time", "__ss_topic", "__ss_partition", "__ss_offset")
OUTPUT_SCHEMA = (
    "kind STRING, key STRING, payload STRING, reason STRING, topic STRING, `partition` INT, `offset` LONG"
)
OUTPUT_COLUMNS = ("kind", "key", "payload", "reason", "topic", "partition", "offset")

# Plain str values: they go into pandas frames and Arrow batches.
OUTPUT, SNAPSHOT, DEAD_LETTER = RowKind.OUTPUT.value, RowKind.SNAPSHOT.value, RowKind.DEAD_LETTER.value


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
    output_limit_bytes: int = 1_000_000
    every_batch: bool = False  # every key in state is called in every batch (updateStateByKey)
    columnar: bool = False  # the function gets its values as Columns, not a list of dicts
    bucket_func: Any = None  # run once per bucket visit instead (StateSpec.over_buckets)
    bucket_from_keys: Any = None  # its state from per-key states (a checkpoint of the per-key engine)

    @classmethod
    def of(cls, spec: StateSpec, ordered_by_offset: bool = True) -> Plan:
        """The plan of ``spec``; ``ordered_by_offset``: the input has source offsets to order a key's records by."""
        return cls(
            func=spec.func,
            per_record=spec.per_record,
            codec=StateCodec(spec.state_cls),
            timeout_ms=spec.timeout_ms,
            event_time=spec.event_time_column is not None,
            late_to_dead_letter=spec.late_records == "dead_letter",
            ordered_by_offset=ordered_by_offset,
            snapshot=spec.snapshot_fn,
            output_limit_bytes=spec.output_limit_bytes,
            every_batch=spec.every_batch,
            columnar=spec.columnar,
            bucket_func=spec.bucket_func,
            bucket_from_keys=spec.bucket_from_keys,
        )


def sort_records(plan: Plan, rows: list[tuple]) -> None:
    """Sort a key's rows in place: event time first when set (rows without one last), then
    source position (a missing one counts as 0)."""
    if plan.event_time:
        # The plain tuples give the same order without a Python call per row, unless a None
        # meets a number, which raises: then the list is restored and sorted the long way.
        arrived = rows[:]
        try:
            rows.sort(key=_TIME_POSITION)
        except TypeError:
            rows[:] = arrived
            rows.sort(key=lambda row: (row[TIME] is None, row[TIME] or 0, row[PARTITION] or 0, row[OFFSET] or 0))
    elif plan.ordered_by_offset:
        rows.sort(key=lambda row: (row[PARTITION] or 0, row[OFFSET] or 0))


_TIME_POSITION = operator.itemgetter(TIME, PARTITION, OFFSET)


_UNCHANGED = object()


class KeyRun:
    """One key's work in one batch, independent of Spark: applies the function, keeps what to
    commit (stored state, timer deadline, snapshot) and collects the result rows.

    Isolation: whatever runs per record or per key (the user function, encoding its outputs
    and state, the snapshot) is guarded, and a failure dead-letters only the record that
    caused it, with the key's state as it was before that record. A batch function that
    raises is re-run one record at a time to find the failing ones; a snapshot that raises
    makes the key's records replay one at a time with a snapshot after each.
    """

    def __init__(
        self, plan: Plan, key: Any, text: bytes | None, deadline: int | None, watermark_ms: int, processing_time_ms: int,
        values: ValueSource = ROW_VALUES,
    ):
        self.plan = plan
        self.values = values
        self.key = key
        self.key_text = describe_key(key)
        self.started_with = text
        self.committed = text
        self.deadline = deadline
        self.rows: list[tuple] = []
        self.snapshot: Any = _UNCHANGED  # the snapshot payload to emit, once computed
        self.driver = StateDriver(
            key, self._decode(text), watermark_ms=watermark_ms, processing_time_ms=processing_time_ms,
            idle_timeout=plan.timeout_ms is not None,
        )

    @property
    def watermark_ms(self) -> int:
        return self.driver.state.watermark_ms

    def _decode(self, text: bytes | None) -> Any:
        return NO_STATE if text is None else self.plan.codec.decode(self.key, text)

    # ------------------------------------------------------------------ savepoints
    def _mark(self) -> tuple:
        return self.committed, self.deadline, len(self.rows)

    def _rollback(self, mark: tuple) -> None:
        self.committed, self.deadline, kept = mark
        del self.rows[kept:]
        # Re-decoded, not restored: the function may have mutated the value in place.
        self.driver.reset(self._decode(self.committed))

    # ------------------------------------------------------------------ calls
    def _call(self, arg: Any, timer: bool = False) -> Exception | None:
        """Run the function once; on error leave everything as it was and return the error."""
        state = self.driver.begin_call(timer)
        limit = self.plan.output_limit_bytes
        try:
            result = self.plan.func(self.key, arg, state)
            outputs = [output_row(o, self.key_text, limit) for o in as_outputs(result, self.plan.per_record)]
            text = self.committed
            if self.driver.touched:
                text = None if not self.driver.exists else self._encode()
        except StateTypeError:
            raise
        except Exception as error:  # noqa: BLE001 - any user error becomes a dead letter
            self.driver.reset(self._decode(self.committed))
            return error
        self.committed = text
        self.rows.extend((kind, key, payload, None, None, None, None) for kind, key, payload in outputs)
        return None

    def _encode(self) -> bytes:
        text = self.plan.codec.encode(self.driver.value)
        if self.plan.codec.state_cls is not None:
            # Later calls see the validated value, as the next batch will.
            self.driver.reset(self.plan.codec.decode(self.key, text))
        return text

    def _snapshot_error(self) -> Exception | None:
        """Compute the snapshot of a changed state (guarded); the error, if any."""
        if self.committed == self.started_with:
            self.snapshot = _UNCHANGED
            return None
        try:
            self.snapshot = self._snapshot_payload()
        except StateTypeError:
            raise
        except Exception as error:  # noqa: BLE001
            return error
        return None

    def _snapshot_payload(self) -> str | None:
        """What a snapshot row carries: the spec's snapshot of the state, else its JSON text."""
        if self.plan.snapshot is None:
            view = None if self.committed is None else self.plan.codec.to_json(self.driver.value)
        else:
            view = self.plan.snapshot(self.key, None if self.committed is None else self.driver.value)
        return snapshot_payload(view, self.plan.output_limit_bytes)

    def dead_letter(self, row: tuple | None, reason: str) -> tuple:
        if row is None:
            return (DEAD_LETTER, self.key_text, None, reason, None, None, None)
        value = dead_letter_value(self.values.row(row[VALUE]))
        return (DEAD_LETTER, self.key_text, value, reason, row[TOPIC], row[PARTITION], row[OFFSET])

    def is_late(self, row: tuple) -> bool:
        time = row[TIME]
        return self.plan.late_to_dead_letter and time is not None and time <= self.watermark_ms

    def late_reason(self, row: tuple) -> str:
        return f"late record: event time {row[TIME]} ms is at or behind the watermark {self.watermark_ms} ms"

    # ------------------------------------------------------------------ deadlines
    def touched_deadline(self, rows: Sequence[tuple], previous: int | None) -> int | None:
        """The idle deadline after ``rows``: their last event time (or now) plus the timeout."""
        if self.plan.timeout_ms is None or self.committed is None:
            return None
        if not self.plan.event_time:
            return self.driver.state.processing_time_ms + self.plan.timeout_ms
        times = rows.times() if type(rows) is KeyRecords else [row[TIME] for row in rows]
        candidates = [time + self.plan.timeout_ms for time in times if time is not None]
        if previous is not None:
            candidates.append(previous)
        return max(candidates, default=None)

    def _deadline_after_call(self, idle_deadline: int | None) -> int | None:
        return None if self.committed is None else self.driver.timeout_after_call(idle_deadline)

    # ------------------------------------------------------------------ per batch
    def _apply(self, rows: Sequence[tuple], kept_deadline: int | None) -> Exception | None:
        """One call with ``rows`` (one row per call for a per-record function)."""
        if self.plan.per_record:
            arg = self.values.row(rows[0][VALUE])
        elif self.plan.columnar:
            arg = Columns(self.values, rows.records if type(rows) is KeyRecords else [row[VALUE] for row in rows])
        else:
            value_of = self.values.row
            arg = [value_of(row[VALUE]) for row in rows]
        error = self._call(arg)
        if error is None:
            self.deadline = self._deadline_after_call(self.touched_deadline(rows, kept_deadline))
        return error

    def _kept_deadline(self) -> int | None:
        return self.deadline if self.committed is not None else None

    def _apply_each(self, rows: Sequence[tuple], with_snapshot: bool) -> None:
        """Every row on its own; a failing row is dead-lettered and leaves no trace."""
        for row in rows:
            mark = self._mark()
            error = self._apply([row], self._kept_deadline())
            if error is None and with_snapshot:
                error = self._snapshot_error()
            if error is not None:
                self._rollback(mark)
                self.rows.append(self.dead_letter(row, one_line(error)))

    def _no_values(self) -> Any:
        """What a call without records gets: no value, an empty list or empty columns."""
        return None if self.plan.per_record else NO_VALUES if self.plan.columnar else []

    def apply_rows(self, rows: Sequence[tuple]) -> None:
        if not self.values.sorted_by_key:  # then the rows are a list (KeyRecords are sorted)
            sort_records(self.plan, cast(list, rows))
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
        start = self._mark()
        if self.plan.per_record:
            self._apply_each(rows, with_snapshot=False)
        elif self._apply(rows, self._kept_deadline()) is not None:
            self._rollback(start)
            self._apply_each(rows, with_snapshot=False)
        if self._snapshot_error() is not None:
            self._rollback(start)
            self._apply_each(rows, with_snapshot=True)

    def apply_timeout(self) -> None:
        """The key's deadline passed. The spec's idle timeout: the call is timing out and the key
        goes after it. A timestamp the function set: the call may update, remove or keep the
        state (kept with no timer unless it sets one again)."""
        start = self._mark()
        error = self._call(self._no_values(), timer=True)
        if error is None:
            if self.driver.timing_out:
                self.committed = None
            self.deadline = self._deadline_after_call(None)
            error = self._snapshot_error()
        if error is None:
            return
        refused = self.driver.refused_write
        self._rollback(start)
        self.rows.append(self.dead_letter(None, one_line(error)))
        if refused:
            # A write the timing-out contract refuses would fail every retry: the key goes, as the timeout says.
            self.committed, self.deadline = None, None
            if self._snapshot_error() is not None:
                self.snapshot = None  # the derived snapshot failed: a plain tombstone
            return
        self.snapshot = _UNCHANGED
        self.deadline = self.retry_deadline()

    def apply_without_data(self) -> None:
        """Every-batch mode (updateStateByKey): a key in state without records in this batch is
        called with no values; a call that raises leaves the state as it was."""
        start = self._mark()
        error = self._call(self._no_values())
        if error is None:
            error = self._snapshot_error()
        if error is not None:
            self._rollback(start)
            self.snapshot = _UNCHANGED
            self.rows.append(self.dead_letter(None, one_line(error)))

    def retry_deadline(self) -> int | None:
        """When a timer call that raised is tried again: dropping its timer would keep the key,
        uncalled, until new data (for ever, for a key that gets none). The spec's idle timeout
        waits one timeout more (as if the key had idled once more); the function's own timer has
        no such length, and is due again just past this call's clock, so the next batch whose
        clock (watermark or processing time) moves on calls it. Never at or before the clock:
        Spark deletes the timer that fired after the call, and a timer set at that time with it."""
        if self.committed is None:
            return None
        now = self.driver.state.watermark_ms if self.plan.event_time else self.driver.state.processing_time_ms
        return now + (self.plan.timeout_ms if self.plan.timeout_ms is not None else 1)

    def snapshot_row(self) -> tuple | None:
        """The snapshot row of this batch, when the state changed (a null payload is a tombstone)."""
        if self.snapshot is _UNCHANGED:
            return None
        return (SNAPSHOT, self.key_text, self.snapshot, None, None, None, None)
