"""Test a state function without Spark: ``StateTester`` runs a :class:`StateSpec` in memory,
micro-batch by micro-batch, with the semantics of ``map_with_state`` / ``update_state_by_key``.

It is the public way to unit-test your own function (as PySpark's ``TwsTester`` is for a
``StatefulProcessor``), and the oracle the project's Spark runs are compared with. It is written
separately from the Spark processor on purpose: only the :class:`State` (through its engine
interface, :class:`StateDriver`) and the way outputs, snapshots and dead letters are encoded
(:mod:`streamstate.state.outputs`) are shared, so a test that agrees with both checks the
processor against an independent reading of the semantics. Example::

    from streamstate.state import StateSpec
    from streamstate.state.tester import StateTester

    def count(word, one, state):
        if state.is_timing_out():
            return None                             # not updating: the key is removed
        total = one + state.get_option(0)
        state.update(total)
        return (word, total)

    tester = StateTester(StateSpec.function(count).timeout("60 seconds"))
    rows = tester.run_batch([("a", 1), ("b", 1), ("a", 1)], processing_time_ms=0)
    assert [r.payload for r in rows if r.kind == "output"] == ['["a",1]', '["a",2]', '["b",1]']
    assert tester.state_of("a") == 2
    tester.tick(processing_time_ms=61_000)          # idle for the timeout: both keys time out
    assert tester.state_of("a") is None

Records are ``(key, value)`` or ``(key, value, event_time_ms)``; every row has a ``kind``
(``output``, ``snapshot``, ``dead_letter``, or the kind of an :class:`Emit`), the key as text,
the payload as JSON text (``None`` for a tombstone snapshot) and, for a dead letter, the reason.

Semantics, per micro-batch (:meth:`StateTester.run_batch`):

1. each key with records is called (per record, in event-time order when the spec has an event
   time, else in input order; or once with all its values for a batch function); an exception
   dead-letters the record and restores the state from before it (a batch function that raises
   is called again with one record at a time, so only the failing records are dead-lettered);
   an output or snapshot larger than the spec's ``max_output_bytes`` counts as an exception;
   the key's snapshot (the spec's snapshot function, else the state's JSON) is taken after its
   records, and if taking it raises, the records are replayed one at a time with a snapshot
   after each, dead-lettering those after which it raises;
2. in every-batch mode (``update_state_by_key``'s default), every other key in state is called
   with no values (a call that raises is dead-lettered and leaves the state as it was);
3. then every key whose deadline is due (processing time, or the batch's watermark, at or past
   the deadline) is called once with no value: for the spec's idle ``timeout`` the call is
   timing out (``update``/``remove`` raise) and the key is removed after it (also when the call
   raised that way); for a timestamp the function set, the call may update, remove or keep the
   state (kept with no timer unless it sets one); a call that raises otherwise is dead-lettered,
   and the key keeps its state and is called again: an idle timeout one timeout later, a timer
   the function set at the first batch whose clock is past that call's (watermark or processing
   time plus 1 ms), as the engine re-arms them;
4. in event time the watermark then moves to ``max event time seen - watermark delay``; when it
   moved, a data-less batch runs step 3 with the new watermark (as Spark's no-data batch does).

A key's deadline is its last event time (or the batch processing time) plus the timeout,
set whenever a record of the key was processed and the key keeps a state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, NamedTuple, Sequence

from streamstate.state.kinds import RowKind
from streamstate.state.columns import ROW_VALUES, Columns
from streamstate.state.outputs import as_outputs, dead_letter_value, output_row, snapshot_payload
from streamstate.state.spec import StateSpec
from streamstate.state.state import NO_STATE, StateCodec, StateDriver, StateTypeError, describe_key, one_line

_NOT_SAVED = object()


class Record(NamedTuple):
    """One input record: the key, the value the function receives, and its event time (ms) if any."""

    key: Any
    value: Any
    time: int | None = None


class Row(NamedTuple):
    """One result row: ``kind`` is output | snapshot | dead_letter (or an :class:`Emit`'s kind);
    ``payload`` is JSON text (or None)."""

    kind: str
    key: str
    payload: str | None
    reason: str | None = None


@dataclass
class StateTester:
    """Feeds batches through a spec; collects every result row in order in :attr:`rows`.

    ``watermark_delay_ms`` is the input's ``withWatermark`` delay (event-time specs only).
    """

    spec: StateSpec
    watermark_delay_ms: int = 0
    store: dict[Any, bytes] = field(default_factory=dict)
    deadlines: dict[Any, int] = field(default_factory=dict)
    watermark_ms: int = 0
    max_event_time: int | None = None
    rows: list[Row] = field(default_factory=list)
    started: bool = False
    _snapshots: dict[Any, tuple] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.codec = StateCodec(self.spec.state_cls)
        self._refused = False  # the last call wrote to a timing-out state

    # ------------------------------------------------------------------ batches
    def run_batch(self, records: Iterable[Record | tuple], processing_time_ms: int = 0) -> list[Row]:
        """Process one micro-batch of records (then due timeouts, then a no-data batch if needed);
        returns the rows it produced (all rows so far are in :attr:`rows`)."""
        first = len(self.rows)
        batch = [Record(*r) for r in records]
        if not self.started:
            self._load_initial(processing_time_ms)
        by_key: dict[Any, list[Record]] = {}
        for record in batch:
            by_key.setdefault(record.key, []).append(record)
        for key, key_records in by_key.items():
            if self.spec.event_time_column is not None:
                key_records.sort(key=lambda r: (r.time is None, r.time or 0))
            self._process_key(key, key_records, processing_time_ms)
        if self.spec.every_batch:
            for key in sorted((k for k in self.store if k not in by_key), key=repr):
                self._process_without_data(key, processing_time_ms)
        self._fire_timers(processing_time_ms)
        if self.spec.event_time_column is not None:
            times = [r.time for r in batch if r.time is not None]
            if times:
                self.max_event_time = max([*times, self.max_event_time or times[0]])
                new_watermark = max(self.watermark_ms, self.max_event_time - self.watermark_delay_ms)
                if new_watermark > self.watermark_ms:
                    self.watermark_ms = new_watermark
                    self._fire_timers(processing_time_ms)
        return self.rows[first:]

    def tick(self, processing_time_ms: int) -> list[Row]:
        """A batch without data at this processing time (timers only); returns its rows."""
        return self.run_batch([], processing_time_ms)

    def state_of(self, key: Any, default: Any = None) -> Any:
        """The key's state now (decoded, as the function would see it), or ``default``."""
        text = self.store.get(key)
        return default if text is None else self.codec.decode(key, text)

    def deadline_of(self, key: Any) -> int | None:
        """When the key times out (epoch ms of the watermark or the clock), if it has a timer."""
        return self.deadlines.get(key)

    def _load_initial(self, processing_time_ms: int) -> None:
        self.started = True
        for key, value in self.spec.initial or []:
            self.store[key] = self.codec.encode(value)
            if self.spec.timeout_ms is not None and self.spec.event_time_column is None:
                self.deadlines[key] = processing_time_ms + self.spec.timeout_ms

    # ------------------------------------------------------------------ one key
    def _driver(self, key: Any, processing_time_ms: int) -> StateDriver:
        text = self.store.get(key)
        value = NO_STATE if text is None else self.codec.decode(key, text)
        return StateDriver(
            key, value, watermark_ms=self.watermark_ms, processing_time_ms=processing_time_ms,
            idle_timeout=self.spec.timeout_ms is not None,
        )

    def _is_late(self, record: Record) -> bool:
        return (
            self.spec.late_records == "dead_letter"
            and record.time is not None
            and record.time <= self.watermark_ms
        )

    def _dead_letter(self, key: Any, record: Record | None, reason: str) -> Row:
        value = None if record is None else dead_letter_value(record.value)
        return Row(RowKind.DEAD_LETTER.value, describe_key(key), value, reason)

    def _process_key(self, key: Any, records: list[Record], processing_time_ms: int) -> None:
        before = self.store.get(key)
        on_time = []
        for record in records:
            if self._is_late(record):
                reason = (
                    f"late record: event time {record.time} ms is at or behind the watermark {self.watermark_ms} ms"
                )
                self.rows.append(self._dead_letter(key, record, reason))
            else:
                on_time.append(record)
        if not on_time:
            return
        saved = self._save(key)
        if self.spec.per_record:
            self._each(key, on_time, processing_time_ms)
        elif self._call(key, [r.value for r in on_time], on_time, processing_time_ms, timer=False) is not None:
            self._restore(key, saved)
            self._each(key, on_time, processing_time_ms)
        if self._snapshot(key, before) is not None:
            self._restore(key, saved)
            self._each(key, on_time, processing_time_ms, snapshot_against=(before,))
        self._emit_snapshot(key, before)

    def _each(
        self, key: Any, records: list[Record], processing_time_ms: int, snapshot_against: tuple | None = None
    ) -> None:
        """Each record in its own call; with ``snapshot_against=(state before the batch,)`` a
        snapshot must also succeed after each."""
        for record in records:
            saved = self._save(key)
            arg = record.value if self.spec.per_record else [record.value]
            error = self._call(key, arg, [record], processing_time_ms, timer=False)
            if error is None and snapshot_against is not None:
                error = self._snapshot(key, snapshot_against[0])
            if error is not None:
                self._restore(key, saved)
                self.rows.append(self._dead_letter(key, record, one_line(error)))

    def _process_without_data(self, key: Any, processing_time_ms: int) -> None:
        before = self.store.get(key)
        saved = self._save(key)
        error = self._call(key, [], [], processing_time_ms, timer=False)
        if error is None:
            error = self._snapshot(key, before)
        if error is not None:
            self._restore(key, saved)
            self.rows.append(self._dead_letter(key, None, one_line(error)))
            return
        self._emit_snapshot(key, before)

    def _save(self, key: Any) -> tuple:
        return self.store.get(key), self.deadlines.get(key), len(self.rows), self._snapshots.get(key, _NOT_SAVED)

    def _restore(self, key: Any, saved: tuple) -> None:
        text, deadline, rows, snapshot = saved
        for mapping, value in ((self.store, text), (self.deadlines, deadline), (self._snapshots, snapshot)):
            if value is None or value is _NOT_SAVED:
                mapping.pop(key, None)
            else:
                mapping[key] = value
        del self.rows[rows:]

    def _snapshot(self, key: Any, before: Any) -> Exception | None:
        """The key's snapshot payload if its state differs from ``before``; the error, if any."""
        after = self.store.get(key)
        if after == before:
            self._snapshots.pop(key, None)
            return None
        try:
            if self.spec.snapshot_fn is None:
                view = None if after is None else self.codec.to_json(self.codec.decode(key, after))
            else:
                view = self.spec.snapshot_fn(key, None if after is None else self.codec.decode(key, after))
            payload = snapshot_payload(view, self.spec.output_limit_bytes)
        except StateTypeError:
            raise
        except Exception as error:  # noqa: BLE001 - becomes a dead letter
            return error
        self._snapshots[key] = (payload,)
        return None

    def _emit_snapshot(self, key: Any, before: Any) -> None:
        if self.store.get(key) != before and key in self._snapshots:
            self.rows.append(Row(RowKind.SNAPSHOT.value, describe_key(key), self._snapshots.pop(key)[0]))

    def _idle_deadline(self, key: Any, group: list[Record], processing_time_ms: int) -> int | None:
        """A key's deadline after a call with records: last event time (or now) plus the timeout."""
        timeout = self.spec.timeout_ms
        if timeout is None:
            return None
        if self.spec.event_time_column is None:
            return processing_time_ms + timeout
        candidates = [r.time + timeout for r in group if r.time is not None]
        if key in self.deadlines:
            candidates.append(self.deadlines[key])
        return max(candidates, default=None)

    def _call(
        self, key: Any, arg: Any, group: list[Record], processing_time_ms: int, timer: bool
    ) -> Exception | None:
        driver = self._driver(key, processing_time_ms)
        state = driver.begin_call(timer)
        if self.spec.columnar:
            arg = Columns(ROW_VALUES, arg)
        try:
            result = self.spec.func(key, arg, state)
            key_text = describe_key(key)
            encoded = [output_row(o, key_text, self.spec.output_limit_bytes) for o in as_outputs(result, self.spec.per_record)]
            text: bytes | None = None
            if driver.exists and not driver.timing_out:
                text = self.codec.encode(driver.value) if driver.touched else self.store[key]
        except StateTypeError:
            raise
        except Exception as error:  # noqa: BLE001 - user errors become dead letters
            self._refused = driver.refused_write
            return error
        self.rows.extend(Row(*row) for row in encoded)
        deadline = None
        if text is None:
            self.store.pop(key, None)
        else:
            self.store[key] = text
            # After its timer fired the key keeps no timer until new data, unless the call set one.
            idle = None if timer else self._idle_deadline(key, group, processing_time_ms)
            deadline = driver.timeout_after_call(idle)
        if deadline is None:
            self.deadlines.pop(key, None)
        else:
            self.deadlines[key] = deadline
        return None

    def _fire_timers(self, processing_time_ms: int) -> None:
        now = self.watermark_ms if self.spec.event_time_column is not None else processing_time_ms
        due = sorted((d, repr(k), k) for k, d in self.deadlines.items() if d <= now)
        for _, _, key in due:
            before = self.store.get(key)
            saved = self._save(key)
            del self.deadlines[key]
            error = self._call(key, None if self.spec.per_record else [], [], processing_time_ms, timer=True)
            refused = error is not None and self._refused
            if error is None:
                error = self._snapshot(key, before)
            if error is not None:
                self._restore(key, saved)
                self.rows.append(self._dead_letter(key, None, one_line(error)))
                if not refused:
                    # Tried again one timeout later, or (the function's own timer) at the next clock past now.
                    if key in self.store:
                        self.deadlines[key] = now + (self.spec.timeout_ms if self.spec.timeout_ms is not None else 1)
                    continue
                # A write the timing-out contract refuses would fail every retry: the key goes.
                self.store.pop(key, None)
                self.deadlines.pop(key, None)
                if self._snapshot(key, before) is not None:
                    self._snapshots[key] = (None,)
            self._emit_snapshot(key, before)


def run_map_with_state(
    spec: StateSpec,
    batches: Sequence[Iterable[Record | tuple]],
    *,
    processing_times_ms: Sequence[int] | None = None,
    watermark_delay_ms: int = 0,
) -> list[Row]:
    """All result rows of ``spec`` over ``batches`` (each a list of ``(key, value, event_time_ms)``)."""
    run = StateTester(spec, watermark_delay_ms=watermark_delay_ms)
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
    every_batch: bool = True,
) -> list[Row]:
    """``update_state_by_key`` semantics over ``batches``; outputs are the new states as JSON."""
    spec = StateSpec.updater(func, every_batch=every_batch).initial_state(initial_state).state_type(state_type)
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
