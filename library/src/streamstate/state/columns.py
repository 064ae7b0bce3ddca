"""A key's values as columns: what a columnar function gets (``StateSpec.columnar_function``).

A batch function gets a list with one dict per record. Building those dicts is most of what
the engine spends on a record before the function sees it: a row of the jobs' 14-field value
struct costs more than the sessions rule's own work on it. A columnar function gets one list
per field instead, and each field is converted from the bucket's Arrow table once per visit,
on first use, so the fields a function never reads are never converted.

``Columns`` reads its values from a source: :class:`ArrowValues` (a bucket visit: a record is
its row number in the bucket's table, sorted so that a key's records are consecutive) or
:class:`RowValues` (records given as dicts: the in-memory tester, the engine's unit tests, and a
bucket whose key type Arrow cannot sort).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamstate.state.packing import python_values, rows_by_key


def plain(value: Any) -> Any:
    """Struct values arrive as dicts (from Arrow) or Rows; user functions get dicts."""
    if type(value) is dict:  # what Arrow gives: the common case, without an attribute lookup
        return value
    as_dict = getattr(value, "asDict", None)
    return as_dict(recursive=True) if as_dict is not None else value


class RowValues:
    """Records given as values (dicts, Rows; a value that is not a struct is the column ``value``):
    a record is its value."""

    sorted_by_key = False

    def column(self, name: str, records: Sequence[Any]) -> list:
        values = [plain(record) for record in records]
        if values and type(values[0]) is not dict:
            if name != "value":
                raise KeyError(f"no column {name!r} in the values; they have ['value']")
            return values
        return [value[name] for value in values]

    def names(self, records: Sequence[Any]) -> tuple[str, ...]:
        if not records:
            return ()
        first = plain(records[0])
        return tuple(first) if type(first) is dict else ("value",)

    @staticmethod
    def span(records: Sequence[Any]) -> None:  # noqa: ARG004 - values are not rows of a table
        return None

    def row(self, record: Any) -> Any:
        return plain(record)


class ArrowValues:
    """The value column of a bucket's table sorted by key (:func:`records_by_key`): a record is
    its row number, and a key's rows are consecutive, in the order its function sees them, so a
    column of them is one slice. A struct's fields are its columns; a value of another type is
    the column ``value``."""

    sorted_by_key = True

    def __init__(self, values: pa.Array | pa.ChunkedArray):
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        self._array = values
        self._struct = pa.types.is_struct(values.type)
        if self._struct:
            self._names = tuple(values.type.field(i).name for i in range(values.type.num_fields))
            # flatten(), not field(): it applies the struct's own offset and nulls to each field.
            self._fields = dict(zip(self._names, values.flatten()))
        else:
            self._names = ("value",)
            self._fields = {"value": values}
        self._converted: dict[str, list] = {}

    def values(self, name: str) -> list:
        """Every row's value of one field, converted on first use."""
        try:
            return self._converted[name]
        except KeyError:
            if name not in self._fields:
                raise KeyError(f"no column {name!r} in the values; they have {list(self._names)}") from None
        converted = self._converted[name] = python_values(self._fields[name])
        return converted

    def column(self, name: str, records: Sequence[int]) -> list:
        values = self.values(name)
        return [values[i] for i in records]

    @staticmethod
    def span(records: Sequence[int]) -> tuple[int, int] | None:
        """(start, stop) of records that are consecutive rows: a key's rows only ever increase,
        so first and last tell."""
        if records and records[-1] - records[0] + 1 == len(records):
            return records[0], records[-1] + 1
        return None

    def names(self, records: Sequence[int]) -> tuple[str, ...]:  # noqa: ARG002 - every record has every field
        return self._names

    def row(self, record: int) -> Any:
        if not self._struct:
            return self.values("value")[record]
        if not self._array[record].is_valid:
            return None
        return {name: self.values(name)[record] for name in self._names}


ValueSource = RowValues | ArrowValues


class KeyRecords(Sequence[tuple]):
    """One key's records of a bucket's table sorted by key (:func:`records_by_key`): its rows
    ``start`` to ``stop``, read as ``INPUT_COLUMNS`` tuples (the value: the row number) only
    when read one by one. A columnar function's values need only their rows (:attr:`records`),
    and an idle deadline their times: a tuple for every record was 8 % of a sessions job's visit."""

    __slots__ = ("key", "start", "stop", "_columns")

    def __init__(self, key: Any, start: int, stop: int, columns: _InputColumns):
        self.key, self.start, self.stop, self._columns = key, start, stop, columns

    @property
    def records(self) -> range:
        """The records' row numbers: what :class:`Columns` reads them by."""
        return range(self.start, self.stop)

    def times(self) -> list:
        """The records' event times (``INPUT_COLUMNS``' third), without a tuple for each record."""
        return self._columns.column(0)[self.start:self.stop]

    def __len__(self) -> int:
        return self.stop - self.start

    def __getitem__(self, index):  # an int or a slice, as a list's
        if isinstance(index, slice):
            return [self._columns.row(self.key, row) for row in self.records[index]]
        return self._columns.row(self.key, self.records[index])

    def __iter__(self) -> Iterator[tuple]:
        row = self._columns.row
        return (row(self.key, number) for number in range(self.start, self.stop))

    def __repr__(self) -> str:
        return f"KeyRecords({self.key!r}, rows {self.start}-{self.stop - 1})"


class _InputColumns:
    """A sorted table's event time and source columns, each converted on its first use."""

    __slots__ = ("_arrays", "_lists")

    def __init__(self, *arrays: pa.Array | pa.ChunkedArray):
        self._arrays = arrays
        self._lists: list[list | None] = [None] * len(arrays)

    def column(self, index: int) -> list:
        converted = self._lists[index]
        if converted is None:
            converted = self._lists[index] = python_values(self._arrays[index])
        return converted

    def row(self, key: Any, number: int) -> tuple:
        column = self.column  # INPUT_COLUMNS from the third on: time, topic, partition, offset
        return (key, number, column(0)[number], column(1)[number], column(2)[number], column(3)[number])


class Columns(Mapping[str, list]):
    """A key's records of the batch as columns: ``values["ts"]`` lists every record's ``ts``, in
    the order a batch function's list has them (event time when the spec has one, then source
    position). ``num_rows`` is the number of records. A call without records (a timeout, an
    every-batch call) has ``num_rows == 0`` and every column empty, whatever its name.
    :meth:`rows` gives the batch function's list of dicts."""

    __slots__ = ("_source", "_records", "_sliced", "num_rows")

    def __init__(self, source: ValueSource, records: Sequence[Any]):
        self._source = source
        self._records = records
        span = source.span(records)  # only a table's rows have one
        # A field's reader and the rows' slice of it: the common case, read once per field and key.
        self._sliced = None if span is None else (cast(ArrowValues, source).values, slice(*span))
        self.num_rows = len(records)

    def __getitem__(self, name: str) -> list:
        if self._sliced is not None:
            field, rows = self._sliced
            return field(name)[rows]
        return self._source.column(name, self._records) if self.num_rows else []

    def __iter__(self) -> Iterator[str]:
        return iter(self._source.names(self._records))

    def __len__(self) -> int:
        return len(self._source.names(self._records))

    def rows(self) -> list:
        """The records as a batch function gets them: one value (dict) each."""
        return [self._source.row(record) for record in self._records]

    def __repr__(self) -> str:
        return f"Columns({self.num_rows} rows: {', '.join(self)})"


ROW_VALUES = RowValues()
NO_VALUES = Columns(ROW_VALUES, ())


def records_by_key(table: pa.Table, event_time: bool, ordered_by_offset: bool) -> tuple[dict[Any, Sequence[tuple]], ValueSource]:
    """A bucket's ``INPUT_COLUMNS`` table as a columnar function's records: each key's rows (in
    the order keys first appear; :class:`KeyRecords`), their value the row number in the returned values' table.

    One stable Arrow sort puts each key's records together in the order the function sees them
    (``keyrun.sort_records``: event time with the records without one last, then source position
    with a missing one as 0), so a key's rows need no sort of their own and its columns are
    slices. A key type Arrow cannot sort is grouped as a batch function's rows are
    (``packing.rows_by_key``, values as dicts), and each key's rows are sorted on their own."""
    key, value, time, topic, partition, offset = table.columns
    sort_columns = {"key": key}
    if event_time:
        sort_columns["time"] = time
    if event_time or ordered_by_offset:
        sort_columns["partition"] = pc.fill_null(partition, 0)
        sort_columns["offset"] = pc.fill_null(offset, 0)
    try:
        order = pc.sort_indices(pa.table(sort_columns), [(name, "ascending") for name in sort_columns], null_placement="at_end")
    except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return rows_by_key(table), ROW_VALUES
    ordered = table.take(order)
    key, value, time, topic, partition, offset = ordered.columns
    keys = key.combine_chunks() if isinstance(key, pa.ChunkedArray) else key
    size = len(keys)
    if size == 0:
        return {}, ArrowValues(value)
    same = pc.fill_null(pc.equal(keys[1:], keys[:-1]), False)
    same = pc.or_(same, pc.and_(pc.is_null(keys[1:]), pc.is_null(keys[:-1])))
    starts = np.concatenate(([0], np.flatnonzero(~same.to_numpy(zero_copy_only=False)) + 1))
    ends = np.append(starts[1:], size)
    # Keys in the order they first appear in the table, as grouping them row by row gives.
    first_seen = np.minimum.reduceat(order.to_numpy(), starts)
    key_values = python_values(keys.take(pa.array(starts)))
    columns = _InputColumns(time, topic, partition, offset)
    starts_list, ends_list = starts.tolist(), ends.tolist()
    grouped: dict[Any, Sequence[tuple]] = {}
    for group in np.argsort(first_seen, kind="stable").tolist():
        key_value = key_values[group]
        grouped[key_value] = KeyRecords(key_value, starts_list[group], ends_list[group], columns)
    return grouped, ArrowValues(value)

