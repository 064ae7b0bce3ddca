"""The columnar form of the state API without Spark: a function over a key's values as columns
sees the records the batch function sees, in the same order, and the two forms give the same
rows (outputs, snapshots, dead letters with their source coordinates, timeouts) through a
bucket's Arrow table as through the in-memory tester."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import given, settings as hsettings, strategies as st

from streamstate.state import Columns, StateSpec
from streamstate.state.buckets import TICK_MS, Bucket, MemoryBucketStore
from streamstate.state.columns import NO_VALUES, ROW_VALUES, ArrowValues, records_by_key
from streamstate.state.keyrun import DEAD_LETTER, INPUT_COLUMNS, Plan, sort_records
from streamstate.state.packing import rows_by_key
from streamstate.state.state import describe_key
from streamstate.state.tester import StateTester

VALUE = pa.struct([("n", pa.int64()), ("s", pa.string())])

# (key, n, s, event time, partition, offset): every part may be missing, as the engine allows.
record = st.tuples(
    st.sampled_from(["a", "b", "c", None]),
    st.one_of(st.none(), st.integers(-3, 5)),
    st.one_of(st.none(), st.text(max_size=3)),
    st.one_of(st.none(), st.integers(0, 4) .map(lambda t: t * 1_000)),
    st.one_of(st.none(), st.integers(0, 2)),
    st.one_of(st.none(), st.integers(0, 6)),
)


def table_of(records: list[tuple]) -> pa.Table:
    """Records as the stateful operator receives a bucket's rows (``INPUT_COLUMNS``)."""
    key, n, s, time, partition, offset = zip(*records) if records else ((),) * 6
    return pa.table({
        INPUT_COLUMNS[0]: pa.array(key, pa.string()),
        INPUT_COLUMNS[1]: pa.array([{"n": a, "s": b} for a, b in zip(n, s)], VALUE),
        INPUT_COLUMNS[2]: pa.array(time, pa.int64()),
        INPUT_COLUMNS[3]: pa.array(["in"] * len(records), pa.string()),
        INPUT_COLUMNS[4]: pa.array(partition, pa.int32()),
        INPUT_COLUMNS[5]: pa.array(offset, pa.int64()),
    })


def _spec(event_time: bool) -> StateSpec:
    spec = StateSpec.batch_function(lambda key, values, state: None)
    return spec.event_time("t") if event_time else spec


@hsettings(max_examples=150, deadline=None)
@given(st.lists(record, max_size=40), st.booleans(), st.booleans())
def test_each_key_gets_the_batch_functions_records_in_its_order(records, event_time, ordered_by_offset):
    plan = Plan.of(_spec(event_time), ordered_by_offset)
    table = table_of(records)
    expected = rows_by_key(table)
    for rows in expected.values():
        sort_records(plan, rows)
    grouped, values = records_by_key(table, event_time, ordered_by_offset)
    assert list(grouped) == list(expected)  # keys in the order they first appear
    for key, rows in grouped.items():
        assert [(*row[:1], values.row(row[1]), *row[2:]) for row in rows] == expected[key]
        columns = Columns(values, [row[1] for row in rows])
        assert columns.num_rows == len(rows) and list(columns) == ["n", "s"]
        assert columns.rows() == [row[1] for row in expected[key]]
        assert columns["n"] == [row[1]["n"] for row in expected[key]]


def test_a_keys_records_read_as_the_list_of_its_rows_would():
    """records_by_key hands a key's rows over as a range of the sorted table (KeyRecords), built
    into tuples only when read: read any way a list is, they are the list's rows."""
    table = table_of([("a", 1, "x", 2_000, 0, 5), ("b", 2, None, 1_000, 1, 6), ("a", 3, None, 1_000, 0, 7), ("a", 4, "y", 3_000, 1, 2)])
    grouped, values = records_by_key(table, event_time=True, ordered_by_offset=True)
    rows = grouped["a"]
    as_list = list(rows)
    assert [values.row(row[1])["n"] for row in as_list] == [3, 1, 4]  # in event time
    assert [row[2:] for row in as_list] == [(1_000, "in", 0, 7), (2_000, "in", 0, 5), (3_000, "in", 1, 2)]
    assert len(rows) == 3 and [rows[i] for i in range(3)] == as_list and rows[-1] == as_list[-1]
    assert rows[1:] == as_list[1:] and rows[::-1] == as_list[::-1] and rows[5:] == []
    assert list(rows.records) == [row[1] for row in as_list] and Columns(values, rows.records)["n"] == [3, 1, 4]
    assert rows.times() == [row[2] for row in as_list]
    with pytest.raises(IndexError):
        rows[3]


def test_keys_arrow_cannot_sort_are_grouped_and_sorted_per_key():
    """Dictionary-encoded keys: no Arrow sort, so each key's rows are sorted on their own and
    its columns read row by row, in that order, not as a slice of the table."""
    records = [("a", 1, None, 1_000, 0, 0), ("a", 2, None, 3_000, 0, 1), ("a", 3, None, 2_000, 0, 2), ("a", 4, None, 4_000, 0, 3),
               ("b", 5, None, 2_000, 0, 4)]
    table = table_of(records)
    table = table.set_column(0, INPUT_COLUMNS[0], table.column(0).dictionary_encode())
    grouped, values = records_by_key(table, event_time=True, ordered_by_offset=True)
    assert not values.sorted_by_key
    plan = Plan.of(_spec(True))
    for rows in grouped.values():
        sort_records(plan, rows)
    assert Columns(values, [row[1] for row in grouped["a"]])["n"] == [1, 3, 2, 4]  # rows 0, 2, 1, 3
    assert Columns(values, [row[1] for row in grouped["b"]])["n"] == [5]


def test_columns_name_what_they_have_and_are_empty_without_records():
    values = ArrowValues(table_of([("a", 1, "x", None, 0, 0), ("a", 2, None, None, 0, 1)]).column(1))
    columns = Columns(values, [0, 1])
    assert dict(columns) == {"n": [1, 2], "s": ["x", None]}
    with pytest.raises(KeyError, match="no column 'm' in the values; they have \\['n', 's'\\]"):
        columns["m"]
    assert Columns(values, [1])["n"] == [2]
    assert NO_VALUES.num_rows == 0 and NO_VALUES["anything"] == [] and NO_VALUES.rows() == []
    assert Columns(ROW_VALUES, [{"n": 1}, {"n": 2}])["n"] == [1, 2]
    scalars = ArrowValues(pa.array([5, None]))  # value="amount": one column
    assert dict(Columns(scalars, [0, 1])) == {"value": [5, None]} and scalars.row(0) == 5
    assert dict(Columns(ROW_VALUES, [5, 6])) == {"value": [5, 6]}


def batch_sum(key, values, state):
    """A batch function that keeps a running sum, refuses n == 3 and says when it times out."""
    if state.is_timing_out():
        return [["timed out", key]]
    numbers = [value["n"] for value in values]
    if 3 in numbers:
        raise ValueError("three is refused")
    total = state.get_option(0) + sum(n or 0 for n in numbers)
    state.update(total)
    return [[key, numbers, [value["s"] for value in values], total]]


def columnar_sum(key, values: Columns, state):
    """``batch_sum`` over columns."""
    if state.is_timing_out():
        return [["timed out", key]]
    numbers = values["n"]
    if 3 in numbers:
        raise ValueError("three is refused")
    total = state.get_option(0) + sum(n or 0 for n in numbers)
    state.update(total)
    return [[key, numbers, values["s"], total]]


def visit_batches(spec: StateSpec, batches: list[list[tuple]]) -> list[tuple]:
    """Spark's part for one bucket in event time: a visit with each batch's table (through the
    engine's own grouping for the spec's form), then one visit per expired timer."""
    plan, store, rows = Plan.of(spec), MemoryBucketStore(), []
    watermark, latest = 0, None

    def visit() -> Bucket:
        return Bucket(plan, store, watermark, 0, watermark, 2, TICK_MS).load()

    for records in batches + [[]]:
        if records:
            bucket, table = visit(), table_of(records)
            if plan.columnar:
                grouped, values = records_by_key(table, plan.event_time, plan.ordered_by_offset)
                bucket.apply_records(grouped.items(), values)
            else:
                bucket.apply_records(rows_by_key(table).items())
            bucket.apply_due()
            bucket.save()
            rows += bucket.rows
            times = [r[3] for r in records if r[3] is not None]
            latest = max([*times, latest or 0]) if times else latest
        watermark = max(watermark, (latest or 0) + 10_000 if not records else (latest or 0) - 1_000)
        for timer in sorted(t for t in store.timers if t <= watermark):
            store.timers.discard(timer)
            bucket = visit()
            bucket.timer_fired(timer)
            bucket.apply_due()
            bucket.save()
            rows += bucket.rows
    return rows


@hsettings(max_examples=100, deadline=None)
@given(st.lists(st.lists(record, max_size=12), max_size=4))
def test_a_columnar_function_gives_the_batch_functions_rows(batches):
    """Outputs, snapshots, the dead letters of refused records (value and source coordinates),
    timeouts and the keys moving between hot and cold: the same rows in the same order."""
    for spec in (StateSpec.batch_function, StateSpec.columnar_function):
        assert spec(batch_sum).per_record is False
    batch = visit_batches(StateSpec.batch_function(batch_sum).event_time("t").timeout("5 seconds"), batches)
    columnar = visit_batches(StateSpec.columnar_function(columnar_sum).event_time("t").timeout("5 seconds"), batches)
    assert columnar == batch
    refused = [row for row in columnar if row[0] == DEAD_LETTER]
    sent = {(key, "in", partition, offset) for records in batches for key, n, _s, _t, partition, offset in records if n == 3}
    assert all(row[3] == "ValueError: three is refused" and json.loads(row[2])["n"] == 3 for row in refused)
    assert {(row[1], *row[4:]) for row in refused} <= {(describe_key(key), *rest) for key, *rest in sent}


@hsettings(max_examples=60, deadline=None)
@given(st.lists(st.lists(record, max_size=10), max_size=3))
def test_the_tester_runs_a_columnar_function_as_a_batch_function(batches):
    def as_tester_records(records):
        return [(key, {"n": n, "s": s}, time) for key, n, s, time, _partition, _offset in records]

    batch = StateTester(StateSpec.batch_function(batch_sum).event_time("t").timeout("5 seconds"))
    columnar = StateTester(StateSpec.columnar_function(columnar_sum).event_time("t").timeout("5 seconds"))
    for records in batches:
        assert columnar.run_batch(as_tester_records(records)) == batch.run_batch(as_tester_records(records))


def test_columnar_function_needs_a_callable():
    with pytest.raises(TypeError, match="columnar_function needs a callable"):
        StateSpec.columnar_function("sum")
