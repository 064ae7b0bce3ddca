"""``StateSpec``: what a stateful mapping needs (function, initial state, partitions, timeout, clock).

A spec is a plain, picklable description; it is shipped to the Spark workers as part of
the stateful processor, and the in-memory reference driver reads the same object.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Literal, Sequence

from streamstate.state.defaults import DEFAULT_BUCKETS, DEFAULT_HOT_KEYS
from streamstate.state.placement import are_bucket_labels

_UNIT_MS = {
    "ms": 1,
    "millisecond": 1,
    "milliseconds": 1,
    "s": 1000,
    "sec": 1000,
    "second": 1000,
    "seconds": 1000,
    "m": 60_000,
    "min": 60_000,
    "minute": 60_000,
    "minutes": 60_000,
    "h": 3_600_000,
    "hour": 3_600_000,
    "hours": 3_600_000,
    "d": 86_400_000,
    "day": 86_400_000,
    "days": 86_400_000,
}
_DURATION = re.compile(r"^\s*(\d+)\s*([a-z]+)\s*$")

Duration = str | int | dt.timedelta
LateRecords = Literal["process", "dead_letter"]


def duration_ms(duration: Duration, what: str = "timeout") -> int:
    """Milliseconds of ``"30 minutes"`` (Spark-style text), an int of milliseconds, or a timedelta;
    ``what`` names the duration in the errors (a window length, a slide interval).

    >>> duration_ms("30 minutes"), duration_ms(1500), duration_ms(dt.timedelta(seconds=2))
    (1800000, 1500, 2000)
    """
    if isinstance(duration, bool):
        raise ValueError(f"{what} must be a duration, got {duration!r}")
    if isinstance(duration, dt.timedelta):
        ms = int(duration.total_seconds() * 1000)
    elif isinstance(duration, int):
        ms = duration
    elif isinstance(duration, str):
        match = _DURATION.match(duration.lower())
        if not match or match.group(2) not in _UNIT_MS:
            raise ValueError(
                f"cannot read duration {duration!r}: expected e.g. '30 minutes', '10 seconds', '500 ms'"
            )
        ms = int(match.group(1)) * _UNIT_MS[match.group(2)]
    else:
        raise ValueError(f"{what} must be a str, int (ms) or timedelta, got {type(duration).__name__}")
    if ms <= 0:
        raise ValueError(f"{what} must be positive, got {duration!r}")
    return ms


# Kafka's default record limit is about 1 MB (message.max.bytes): a larger output or snapshot
# could never be written, and its batch would fail on every retry.
DEFAULT_OUTPUT_LIMIT_BYTES = 1_000_000


# (key, value | None, state) -> output | None | list of outputs
RecordFunction = Callable[[Any, Any, Any], Any]
# (key, values, state) -> iterable of outputs
BatchFunction = Callable[[Any, list, Any], Iterable[Any] | None]
# (key, values as Columns, state) -> iterable of outputs
ColumnarFunction = Callable[[Any, Any, Any], Iterable[Any] | None]
# (bucket state | None, records as an Arrow table | None, watermark ms) -> BucketResult
BucketFunction = Callable[[Any, Any, int], Any]


@dataclass(frozen=True)
class StateSpec:
    """How to keep per-key state: build with :meth:`function`, :meth:`batch_function` or
    :meth:`columnar_function`, then chain.

    Every chained method returns a new spec (a spec is immutable, so one spec can be reused).
    """

    func: Callable[..., Any]
    per_record: bool = True
    initial: Any = None
    partitions: int | None = None
    timeout_ms: int | None = None
    event_time_column: str | None = None
    late_records: LateRecords = "process"
    state_cls: Any = None
    snapshot_fn: Callable[[Any, Any], Any] | None = None
    output_limit_bytes: int = DEFAULT_OUTPUT_LIMIT_BYTES
    bucket_count: int = DEFAULT_BUCKETS
    bucket_labels: tuple[int, ...] | None = None
    hot_key_capacity: int = DEFAULT_HOT_KEYS
    every_batch: bool = False
    processing_timers: bool = False
    columnar: bool = False
    bucket_func: BucketFunction | None = None
    bucket_from_keys: Callable[[dict[str, Any]], Any] | None = None

    @classmethod
    def function(cls, func: RecordFunction) -> StateSpec:
        """Per-record mapping function ``func(key, value | None, state) -> output | None | list``.

        It is called once per record, in event-time order when :meth:`event_time` is set
        (else in source order), and once with ``value=None`` when the key is timing out.
        A returned ``list`` is several outputs; any other non-None value (a tuple too) is one.
        """
        if not callable(func):
            raise TypeError(f"StateSpec.function needs a callable, got {type(func).__name__}")
        return cls(func=func, per_record=True)

    @classmethod
    def batch_function(cls, func: BatchFunction) -> StateSpec:
        """Per-key batch function ``func(key, values: list, state) -> iterable of outputs``.

        It is called once per key with that key's values of the micro-batch (sorted by the
        event-time column when set), and with ``values=[]`` only when the key is timing out.
        """
        if not callable(func):
            raise TypeError(f"StateSpec.batch_function needs a callable, got {type(func).__name__}")
        return cls(func=func, per_record=False)

    @classmethod
    def columnar_function(cls, func: ColumnarFunction) -> StateSpec:
        """Per-key batch function that gets its values as columns: ``func(key, values: Columns, state)
        -> iterable of outputs``, where ``values["ts"]`` lists the key's records' ``ts`` in the
        order :meth:`batch_function` would give them, and ``values.num_rows`` counts them.

        Everything else is the batch function's: when it is called, timeouts (``num_rows == 0``,
        every column empty), isolation (a call that raises is re-run one record at a time, each
        with one row) and dead letters. What it saves is a dict per record: the engine converts
        each field of a bucket's records from Arrow once, when a function first reads it. A value
        that is one column (``value="amount"``) is the column ``values["value"]``.
        """
        if not callable(func):
            raise TypeError(f"StateSpec.columnar_function needs a callable, got {type(func).__name__}")
        return cls(func=func, per_record=False, columnar=True)

    @classmethod
    def updater(cls, func: Callable[[list, Any], Any], every_batch: bool = True) -> StateSpec:
        """DStream ``updateStateByKey`` as a spec: ``func(new_values, old_state | None) -> new_state | None``;
        ``None`` removes the key, and the new state is the key's output.

        ``every_batch`` (the default, as in Spark): every key in state is called in every batch, with
        no values when it has none. Otherwise only keys with values are called, and keys idle for
        the spec's ``timeout`` once more with no values: that call ends the key, whatever it returns.
        """
        if not callable(func):
            raise TypeError(f"StateSpec.updater needs a callable, got {type(func).__name__}")

        def update(key: Any, values: list, state) -> list:
            new_state = func(values, state.get_option())
            if state.is_timing_out():
                return []  # the key goes after this call (State's timing-out contract)
            if new_state is None:
                if state.exists():
                    state.remove()
                return []
            state.update(new_state)
            return [new_state]

        return replace(cls.batch_function(update), every_batch=every_batch)

    def over_buckets(self, func: BucketFunction, from_keys: Callable[[dict[str, Any]], Any] | None = None) -> StateSpec:
        """Run ``func(state, records, watermark_ms) -> BucketResult`` once per bucket visit in
        Spark, instead of this spec's per-key function, which stays its reference (the in-memory
        tester runs it).

        ``state`` is the bucket's own value (None at first), ``records`` the visit's records as an
        Arrow table (the key column ``__ss_key``, then the value's fields; None when a timer fired)
        and ``watermark_ms`` the batch's watermark. The function does for all of the bucket's keys
        what the per-key engine does for one: it orders their records, keeps their states in
        whatever layout it likes, emits each changed key's snapshot, and names the watermark at
        which it has work again (:class:`~streamstate.state.bucket_function.BucketResult`). It is
        for rules whose per-key Python is the cost: a test should hold it equal to the per-key
        function. Needs :meth:`event_time`; no timeout, initial state or every-batch mode.

        ``from_keys(states)`` carries on a checkpoint the per-key engine wrote: at a bucket's first
        visit it gets every key's state (``{key as text: state}``) and returns the bucket
        function's state. Without it such a checkpoint is refused (``StateLayoutError``).
        """
        if not callable(func):
            raise TypeError(f"StateSpec.over_buckets needs a callable, got {type(func).__name__}")
        refused = [what for what, set_ in (
            ("a timeout", self.timeout_ms is not None), ("an initial state", self.initial is not None),
            ("every-batch mode", self.every_batch), ("processing-time timers", self.processing_timers),
        ) if set_]
        if self.event_time_column is None or refused:
            raise ValueError(
                "a bucket function keeps its own timers on the watermark: the spec needs event_time() and none of "
                f"{', '.join(refused) or 'a timeout, an initial state, every-batch mode'}"
            )
        return replace(self, bucket_func=func, bucket_from_keys=from_keys)

    def initial_state(self, initial: Any) -> StateSpec:
        """Start from a DataFrame with columns ``(key, state)`` or a list of ``(key, state)`` pairs.

        A string ``state`` column is read as JSON text; other columns are taken as values.
        """
        self._refuse_over_buckets("an initial state")
        return replace(self, initial=initial)

    def num_partitions(self, partitions: int) -> StateSpec:
        """Repartition the input by key into this many partitions before the state operator."""
        if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1:
            raise ValueError(f"num_partitions must be a positive int, got {partitions!r}")
        return replace(self, partitions=partitions)

    def timeout(self, idle: Duration) -> StateSpec:
        """Time a key out after this idle duration since its last record (see :meth:`event_time`):
        it is called once more, timing out, and removed (see ``State.is_timing_out``)."""
        self._refuse_on_every_batch("a timeout")
        self._refuse_over_buckets("a timeout")
        return replace(self, timeout_ms=duration_ms(idle))

    def event_time(self, column: str, late: LateRecords = "process") -> StateSpec:
        """Order records and run timeouts in event time, from this timestamp (or epoch-ms) column.

        The input needs a watermark (``df.withWatermark(column, ...)``); a key times out once the
        watermark passes its last event time plus the timeout. ``late="dead_letter"`` sends records
        at or behind the watermark to the dead letters instead of the function.
        """
        if late not in ("process", "dead_letter"):
            raise ValueError(f"late must be 'process' or 'dead_letter', got {late!r}")
        self._refuse_on_every_batch("an event-time clock")
        return replace(self, event_time_column=column, late_records=late)

    def processing_time_timers(self) -> StateSpec:
        """Run the timers the function sets (``State.set_timeout_timestamp``) on the batches'
        processing time, in a spec with neither a timeout nor an event time: Spark keeps no
        clock for a stateful operator that asks for none, so without this they never fire."""
        if self.event_time_column is not None:
            raise ValueError("this spec runs on event time: its timers follow the watermark")
        self._refuse_over_buckets("processing-time timers")
        return replace(self, processing_timers=True)

    def snapshots(self, snapshot: Callable[[Any, Any], Any]) -> StateSpec:
        """Publish ``snapshot(key, state)`` in :meth:`StateResult.state_snapshots` instead of the raw
        state JSON (``state`` is None when the key was removed; returning None makes a tombstone).
        Lets a job keep rich internal state and publish a public record derived from it."""
        if not callable(snapshot):
            raise TypeError(f"StateSpec.snapshots needs a callable, got {type(snapshot).__name__}")
        return replace(self, snapshot_fn=snapshot)

    def max_output_bytes(self, limit: int) -> StateSpec:
        """Refuse an output or snapshot whose JSON is larger than ``limit`` UTF-8 bytes (default
        1,000,000, under Kafka's default record limit): the record that produced it is
        dead-lettered instead of failing the batch on every retry."""
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"max_output_bytes must be a positive int, got {limit!r}")
        return replace(self, output_limit_bytes=limit)

    def buckets(self, count: int, labels: Sequence[int] | None = None) -> StateSpec:
        """Group keys into ``count`` buckets (default 64), each grouped under its INT in ``labels``
        (default: its number, ``0..count-1``). Spark places a bucket's state by its label, so
        :func:`streamstate.state.placement.balanced_labels` gives labels that spread the buckets
        evenly over the state partitions. Both are fixed for the life of a checkpoint, like the
        partition count: a bucket is where a key's state lives."""
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"buckets must be a positive int, got {count!r}")
        if labels is None:
            return replace(self, bucket_count=count, bucket_labels=None)
        labels = tuple(labels)
        if not are_bucket_labels(labels, count):
            raise ValueError(f"bucket labels must be {count} distinct ints in 0..2**31-1, got {labels!r}")
        # Numbered labels are the default: no per-row lookup for them (a checkpoint from before labels).
        return replace(self, bucket_count=count, bucket_labels=None if labels == tuple(range(count)) else labels)

    def hot_keys(self, capacity: int) -> StateSpec:
        """Keep up to ``capacity`` recently touched keys (all buckets together, default 200,000) where
        touching them again costs no state call; beyond that the least recently touched are moved
        to a per-key map (one state call each way)."""
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
            raise ValueError(f"hot_keys must be a positive int, got {capacity!r}")
        return replace(self, hot_key_capacity=capacity)

    def _refuse_on_every_batch(self, what: str) -> None:
        if self.every_batch:
            raise ValueError(
                f"this spec calls every key in every batch (updateStateByKey's default), which leaves nothing for {what} "
                "to do: a key is dropped when the function returns None. Call only keys with data, and idle ones once "
                "at their timeout, with every_batch=False"
            )

    def _refuse_over_buckets(self, what: str) -> None:
        if self.bucket_func is not None:
            raise ValueError(f"this spec runs a bucket function (over_buckets), which keeps its own timers and state: no {what}")

    def state_type(self, state_cls: Any) -> StateSpec:
        """Keep the state as this type (a pydantic model, dataclass, or any pydantic-validatable type)."""
        return replace(self, state_cls=state_cls)
