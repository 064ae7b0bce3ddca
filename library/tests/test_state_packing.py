"""Packing a batch per bucket and reading it back: what the user function receives must not
depend on the column-by-column conversion (``python_values``) that replaces ``to_pylist()``."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings as hsettings, strategies as st

from streamstate.state.packing import BLOB, BUCKET, COMPRESS_BLOB_OVER_BYTES, pack, python_values, rows_by_key, unpack

SCALAR_TYPES = {
    pa.int8(): st.integers(-(2**7), 2**7 - 1),
    pa.int32(): st.integers(-(2**31), 2**31 - 1),
    pa.int64(): st.integers(-(2**63), 2**63 - 1),
    pa.uint64(): st.integers(0, 2**64 - 1),
    pa.float32(): st.floats(width=32, allow_nan=True),
    pa.float64(): st.floats(allow_nan=True, allow_infinity=True),
    pa.bool_(): st.booleans(),
    pa.string(): st.text(max_size=8),
    pa.large_string(): st.text(max_size=8),
    pa.binary(): st.binary(max_size=8),
    pa.timestamp("us"): st.integers(0, 2**50),
    pa.list_(pa.int64()): st.lists(st.integers(-5, 5), max_size=3),
}


def _values(kind: pa.DataType, size: int, nullable: bool) -> st.SearchStrategy[list]:
    value = SCALAR_TYPES[kind]
    return st.lists(st.one_of(st.none(), value) if nullable else value, min_size=size, max_size=size)


@st.composite
def arrays(draw, depth: int = 0) -> pa.Array:
    size = draw(st.integers(0, 12))
    nullable = draw(st.booleans())
    if depth < 2 and draw(st.integers(0, 3)) == 0:
        fields = [draw(arrays(depth + 1)) for _ in range(draw(st.integers(0, 3)))]
        fields = [f.slice(0, size) for f in fields if len(f) >= size]
        names = [f"f{i}" for i in range(len(fields))]
        mask = pa.array(draw(st.lists(st.booleans(), min_size=size, max_size=size)), pa.bool_()) if nullable and fields else None
        if not fields:
            return pa.array([{}] * size, pa.struct([]))
        array = pa.StructArray.from_arrays(fields, names=names, mask=mask)
    else:
        kind = draw(st.sampled_from(list(SCALAR_TYPES)))
        array = pa.array(draw(_values(kind, size, nullable)), kind)
    start = draw(st.integers(0, len(array)))  # a slice has an offset: struct fields must honour it
    return array.slice(start)


def same(left: list, right: list) -> bool:
    # repr: NaN equals itself, and a NumPy scalar in place of a Python one shows.
    return repr(left) == repr(right)


@hsettings(max_examples=300, deadline=None)
@given(arrays())
def test_python_values_equal_to_pylist(array):
    assert same(python_values(array), array.to_pylist())
    assert same(python_values(pa.chunked_array([array, array])), array.to_pylist() * 2)


def test_a_bucket_reads_back_its_rows_grouped_by_key_in_order():
    value = pa.StructArray.from_arrays(
        [pa.array([1, None, 3, 4]), pa.array(["a", "b", None, "d"])], names=["n", "s"], mask=pa.array([False, False, False, True])
    )
    batch = pa.RecordBatch.from_arrays(
        [pa.array(["k1", "k2", "k1", "k2"]), value, pa.array([0, 1, 0, 1], pa.int32())], names=["key", "value", BUCKET]
    )
    packed = pa.Table.from_batches(list(pack(iter([batch]))))
    tables = {bucket: unpack([blob]) for bucket, blob in zip(packed.column(BUCKET).to_pylist(), packed.column(1).to_pylist())}
    assert rows_by_key(tables[0]) == {"k1": [("k1", {"n": 1, "s": "a"}), ("k1", {"n": 3, "s": None})]}
    assert rows_by_key(tables[1]) == {"k2": [("k2", {"n": None, "s": "b"}), ("k2", None)]}


def test_a_large_bucket_travels_compressed_and_reads_back_the_same_rows_as_a_small_one():
    rows = 40_000
    ids = [f"user-{i % 5_000:05d}" for i in range(rows)]
    value = pa.StructArray.from_arrays(
        [pa.array(ids), pa.array(range(rows), pa.int64()), pa.array([None if i % 7 else f"note {i}" for i in range(rows)])],
        names=["user_id", "ts", "note"],
    )
    batch = pa.RecordBatch.from_arrays([pa.array(ids), value, pa.array([0] * rows, pa.int32())], names=["key", "value", BUCKET])
    assert batch.drop_columns([BUCKET]).nbytes >= COMPRESS_BLOB_OVER_BYTES
    (large,) = pa.Table.from_batches(list(pack(iter([batch])))).column(BLOB).to_pylist()
    (small,) = pa.Table.from_batches(list(pack(iter([batch.slice(0, 100)])))).column(BLOB).to_pylist()
    assert len(large) < batch.drop_columns([BUCKET]).nbytes / 3
    assert unpack([large]).to_pylist() == pa.Table.from_batches([batch.drop_columns([BUCKET])]).to_pylist()
    assert unpack([small]).to_pylist() == pa.Table.from_batches([batch.slice(0, 100).drop_columns([BUCKET])]).to_pylist()
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, unpack([small]).schema) as plain:
        plain.write_table(unpack([small]))
    assert len(small) == len(sink.getvalue())  # a small blob is written as it is
