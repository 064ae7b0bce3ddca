"""Packing a micro-batch's rows into one Arrow blob per bucket, before the stateful operator.

Spark's Python stateful operators turn every input row into a Python object on the way in
(``transformWithStateInPandas`` walks rows with ``itertuples`` and rebuilds a pandas frame per
group: about 5 µs a row). A stateless ``mapInArrow`` step in front of it instead sorts each
Arrow batch by bucket and writes each bucket's slice as one Arrow IPC blob, so the operator
receives a handful of rows per bucket, and the processor reads each blob back column by column.
Rows of a task are gathered up to :data:`PACK_ROWS` before packing, so a bucket costs one blob
per task and batch, not one per 10,000-row Arrow batch; a large blob is compressed
(:data:`COMPRESS_BLOB_OVER_BYTES`). Where the step also computes the rows
(the jobs validate and pack in one pass), each blob can carry its rows' latest event time
(:data:`LATEST`), so that a watermark defined on the packed rows equals one defined on the rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Plain identifiers: the operator hands rows over as namedtuples, which rename "__" names.
BUCKET = "ss_bucket"
BLOB = "ss_blob"
LATEST = "ss_latest"
PACKED_SCHEMA = f"{BUCKET} INT, {BLOB} BINARY"
PACKED_WITH_LATEST_SCHEMA = f"{PACKED_SCHEMA}, {LATEST} LONG"
PACK_ROWS = 200_000

# A bucket's rows of this size go into their blob zstd-compressed (Arrow IPC buffer compression,
# level 1; readers decompress on their own). The sessions benchmark's blobs (about 200 bytes a
# row) shrank to a quarter, its shuffle from 88 to 47 MB, and the stateful stage's JVM spent
# 0.4 instead of 1.0-1.2 CPU-seconds reading them (docs/profile.md). A small blob stays plain:
# a latency batch's (a few hundred rows) would pay about 0.35 ms a blob to decompress.
COMPRESS_BLOB_OVER_BYTES = 1 << 20
_COMPRESSED = pa.ipc.IpcWriteOptions(compression="zstd")

_PACKED = pa.schema([(BUCKET, pa.int32()), (BLOB, pa.binary())])
_PACKED_WITH_LATEST = _PACKED.append(pa.field(LATEST, pa.int64()))


def _blob(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    options = _COMPRESSED if table.nbytes >= COMPRESS_BLOB_OVER_BYTES else None
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _pack(table: pa.Table, latest_of: str | None) -> pa.RecordBatch:
    buckets = table.column(BUCKET).to_numpy()
    order = np.argsort(buckets, kind="stable")
    ordered = buckets[order]
    starts = np.flatnonzero(np.diff(ordered, prepend=ordered[0] - 1))
    ends = np.append(starts[1:], len(ordered))
    data = table.drop_columns([BUCKET]).take(pa.array(order))
    slices = [data.slice(start, end - start) for start, end in zip(starts, ends)]
    columns = [pa.array(ordered[starts], pa.int32()), pa.array([_blob(rows) for rows in slices], pa.binary())]
    if latest_of is None:
        return pa.RecordBatch.from_arrays(columns, schema=_PACKED)
    latest = [pc.max(rows.column(latest_of)).as_py() for rows in slices]
    return pa.RecordBatch.from_arrays([*columns, pa.array(latest, pa.int64())], schema=_PACKED_WITH_LATEST)


def pack(batches: Iterable[pa.RecordBatch], latest_of: str | None = None) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function: rows with a ``BUCKET`` column -> (bucket, blob) rows, plus with
    ``latest_of`` (a column of epoch ms) the blob's greatest such time as :data:`LATEST`."""
    gathered: list[pa.RecordBatch] = []
    rows = 0
    for batch in batches:
        if batch.num_rows:
            gathered.append(batch)
            rows += batch.num_rows
        if rows >= PACK_ROWS:
            yield _pack(pa.Table.from_batches(gathered), latest_of)
            gathered, rows = [], 0
    if gathered:
        yield _pack(pa.Table.from_batches(gathered), latest_of)


def unpack(blobs: Iterable[bytes]) -> pa.Table | None:
    """The rows of a bucket's blobs, as one table (None when there are none)."""
    tables = [pa.ipc.open_stream(blob).read_all() for blob in blobs]
    if not tables:
        return None
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def python_values(column: pa.Array | pa.ChunkedArray) -> list:
    """A column's values as ``to_pylist()`` gives them, converted column by column.

    ``to_pylist()`` builds every value through a scalar object: about 1 µs a string and 20 µs
    a row of the jobs' 14-field value struct, the largest cost of a bucket visit. Through
    NumPy a string costs 0.1 µs and a number 0.03 µs, and a struct's rows are zipped from its
    fields; numbers with nulls (which NumPy would make floats) go through it with the nulls
    filled and are put back after. Types whose NumPy form differs (timestamps, decimals, booleans
    with nulls, nested lists) keep ``to_pylist()``.
    """
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    size, nulls, kind = len(column), column.null_count, column.type
    if nulls == size:
        return [None] * size
    if pa.types.is_struct(kind) and kind.num_fields:
        names = [kind.field(i).name for i in range(kind.num_fields)]
        # flatten(), not field(): it applies the struct's own offset and nulls to each field.
        rows = [dict(zip(names, values)) for values in zip(*(python_values(f) for f in column.flatten()))]
        if nulls:
            nullable: list[dict | None] = [None if missing else row for row, missing in zip(rows, column.is_null().to_numpy(zero_copy_only=False))]
            return nullable
        return rows
    if _is_text(kind) or (nulls == 0 and _is_number(kind)):
        return column.to_numpy(zero_copy_only=False).tolist()
    if _is_integer_or_float(kind):
        # Numbers with nulls (an optional amount): through NumPy with the nulls as 0, put back after.
        filled = column.fill_null(pa.scalar(0, kind)).to_numpy(zero_copy_only=False).tolist()
        missing = column.is_null().to_numpy(zero_copy_only=False).tolist()
        return [None if null else value for value, null in zip(filled, missing)]
    return column.to_pylist()


def _is_text(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind) or pa.types.is_large_binary(kind)


def _is_integer_or_float(kind: pa.DataType) -> bool:
    return pa.types.is_integer(kind) or pa.types.is_float32(kind) or pa.types.is_float64(kind)


def _is_number(kind: pa.DataType) -> bool:
    return _is_integer_or_float(kind) or pa.types.is_boolean(kind)


def rows_by_key(table: pa.Table) -> dict:
    """The table's rows as tuples (in column order), grouped by the first column (the key)."""
    grouped: dict = {}
    for row in zip(*(python_values(column) for column in table.columns)):
        grouped.setdefault(row[0], []).append(row)
    return grouped
