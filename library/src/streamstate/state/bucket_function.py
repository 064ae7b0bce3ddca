"""A function over whole buckets (``StateSpec.over_buckets``): one call per bucket visit.

The per-key engine (:mod:`~streamstate.state.buckets`) calls a spec's function once per touched
key, each with its own state; whatever the function does per key in Python is paid per key. A
bucket function is called once per visit instead, with the bucket's records as one Arrow table
and the bucket's state as one value it lays out itself (columns, typically), so a rule can work
on all of a bucket's keys with array operations. It answers with a :class:`BucketResult`: the
new state, the records to write, the snapshots of the keys whose state changed, and the
watermark at which the bucket has work again (its one timer, event time).

The engine's side is small: the bucket's state is one value (stored as the hot set is,
compressed when large), one timer, and the rows. Everything per key (ordering, timeouts,
snapshots, isolation of a failing key) is the function's, so a bucket function should be proved
against the spec's per-key function, which stays the spec's reference: the in-memory tester
(:mod:`~streamstate.state.tester`) runs that one.
"""

from __future__ import annotations

import pickle
from typing import TYPE_CHECKING, Any, NamedTuple, Sequence

import pyarrow as pa

from streamstate.state.buckets import BucketStore, hot_blob, hot_bytes
from streamstate.state.keyrun import DEAD_LETTER, INPUT_COLUMNS, KEY, SNAPSHOT, VALUE
from streamstate.state.outputs import Emit, output_row, snapshot_payload
from streamstate.state.buckets import TEXT
from streamstate.state.state import StateLayoutError, describe_key, one_line

if TYPE_CHECKING:
    from streamstate.state.keyrun import Plan

# The column of a bucket function's records that holds each record's key (a value's own fields
# follow it, so a field named "key" cannot collide with it).
KEY_COLUMN = INPUT_COLUMNS[KEY]
# What a bucket function's state is stored as, so that a state of the per-key layout is never
# read as one (and the other way round).
LAYOUT = "bucket-function/1"


class BucketResult(NamedTuple):
    """What a bucket function returns for one visit.

    ``state``: the bucket's new state (None: nothing kept). ``outputs``: records to write (an
    :class:`~streamstate.state.Emit` has its own kind and key). ``snapshots``: ``(key, payload)``
    for each key whose state changed (payload text, or None for a key whose state is gone).
    ``timer_ms``: visit the bucket again, without records, once the watermark reaches this.
    """

    state: Any
    outputs: Sequence[Emit]
    snapshots: Sequence[tuple[str, str | None]]
    timer_ms: int | None


def records(table: pa.Table) -> pa.Table:
    """A visit's packed rows as a bucket function gets them: the key column (:data:`KEY_COLUMN`),
    then the value's fields (a value that is not a struct is the column ``value``)."""
    value = table.column(INPUT_COLUMNS[VALUE]).combine_chunks()
    if pa.types.is_struct(value.type):
        names = [value.type.field(i).name for i in range(value.type.num_fields)]
        columns = value.flatten()  # applies the struct's own offset and nulls to each field
    else:
        names, columns = ["value"], [value]
    return pa.Table.from_arrays([table.column(INPUT_COLUMNS[KEY]), *columns], names=[KEY_COLUMN, *names])


def visit(plan: Plan, store: BucketStore, table: pa.Table | None, watermark_ms: int, fired_ms: int | None = None) -> list[tuple]:
    """One visit: the bucket's state loaded, the function called, the state, timer and rows kept.
    ``fired_ms``: the timer that fired (Spark has deleted it)."""
    blob = store.load_hot()
    saved = None if blob is None else pickle.loads(hot_bytes(blob))
    if saved is None:
        state, timer = None, None
    elif saved.get("layout") == LAYOUT:
        state, timer = saved["state"], saved["timer"]
    else:
        state, timer = _from_per_key(plan, store, saved, fired_ms), None
    if timer is not None and timer == fired_ms:
        timer = None
    result = plan.bucket_func(state, None if table is None else records(table), watermark_ms)
    if not isinstance(result, BucketResult):
        raise TypeError(f"a bucket function returns a BucketResult, got {type(result).__name__}")
    if result.timer_ms != timer:
        if timer is not None:
            store.delete_timer(timer)
        if result.timer_ms is not None:
            store.register_timer(result.timer_ms)
    store.save_hot(hot_blob(pickle.dumps(
        {"layout": LAYOUT, "state": result.state, "timer": result.timer_ms}, protocol=pickle.HIGHEST_PROTOCOL,
    )))
    return _rows(plan, result)


def _from_per_key(plan: Plan, store: BucketStore, saved: dict, fired_ms: int | None) -> Any:
    """The bucket function's state from a bucket the per-key engine wrote (a checkpoint from
    before the spec ran over buckets): every key's state, hot or cold, handed to the spec's
    ``from_keys``; the cold map, the timer wheel and their timers are cleared."""
    if plan.bucket_from_keys is None:
        raise StateLayoutError(
            "this bucket's state was written by the per-key engine (a spec without over_buckets), and this spec's "
            "bucket function has no from_keys to carry it on: start the query from a new checkpoint, give "
            "over_buckets a from_keys, or run the spec without over_buckets"
        )
    states = {describe_key(key): plan.codec.decode(key, entry[TEXT]) for key, entry in saved["hot"].items()}
    if saved["cold"]:
        for key, stored in store.cold_items():
            if key not in states:  # a hot key's cold copy is older than its hot entry
                states[key] = plan.codec.decode(key, stored)
        store.cold_clear()
    if saved["ticks"]:
        store.wheel_clear()
    for timer in {saved["timer"], *saved["ticks"]} - {None, fired_ms}:
        store.delete_timer(timer)
    return plan.bucket_from_keys(states)


def _rows(plan: Plan, result: BucketResult) -> list[tuple]:
    """The result's rows; an output or snapshot that cannot be written is a dead letter under its key."""
    rows: list[tuple] = []
    for output in result.outputs:
        try:
            kind, key, payload = output_row(output, getattr(output, "key", ""), plan.output_limit_bytes)
        except (TypeError, ValueError) as error:
            rows.append((DEAD_LETTER, str(getattr(output, "key", "")), None, one_line(error), None, None, None))
            continue
        rows.append((kind, key, payload, None, None, None, None))
    for key, view in result.snapshots:
        try:
            rows.append((SNAPSHOT, key, snapshot_payload(view, plan.output_limit_bytes), None, None, None, None))
        except (TypeError, ValueError) as error:
            rows.append((DEAD_LETTER, key, None, one_line(error), None, None, None))
    return rows
