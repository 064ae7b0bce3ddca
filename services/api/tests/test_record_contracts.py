"""The fast strict check (msgspec) only ever accepts what the pydantic contracts accept, with the
same summary; and a batch applied at once gives the view that its records applied one by one give."""

from __future__ import annotations

import json
import shutil
import tempfile
import typing
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from streamstate_api.record_contracts import MIRRORS, Source, _fast_summary, decode, fast_record, strict_summary, summarize
from streamstate_api.store import open_store
from streamstate_api.view import StateView
from streamstate_pipeline.contracts import ContractError
from tests.api_builders import metric_snapshot, session_snapshot

IDENTITY = {"format": 1, "topics": {"sessions": "s", "series": "m", "alerts": "a"}}


# --------------------------------------------------------------------------- mirrors
def _inner(annotation, kind: type) -> type | None:
    """The class of ``kind`` (a model, a struct) an annotation holds: itself, or in its
    arguments (``X | None``, ``dict[str, X]``)."""
    if isinstance(annotation, type) and issubclass(annotation, kind):
        return annotation
    for arg in typing.get_args(annotation):
        found = _inner(arg, kind)
        if found is not None:
            return found
    return None


@pytest.mark.parametrize("model", list(MIRRORS))
def test_each_mirror_has_the_fields_of_its_contract_model(model):
    """Field names, required-ness, nullability and nesting, recursively: a field added to a
    contract model and not to its mirror makes the fast check refuse every record (correct,
    but slow), and this test says so."""

    def check(model: type[BaseModel], struct: type[msgspec.Struct]) -> None:
        info = msgspec.structs.fields(struct)
        assert {f.name for f in info} == set(model.model_fields), model.__name__
        hints = typing.get_type_hints(struct)
        for f in info:
            field = model.model_fields[f.name]
            assert f.required == field.is_required(), (model.__name__, f.name)
            nullable = type(None) in typing.get_args(field.annotation)
            assert nullable == (type(None) in typing.get_args(hints[f.name])), (model.__name__, f.name)
            nested = _inner(field.annotation, BaseModel)
            assert (nested is None) == (_inner(hints[f.name], msgspec.Struct) is None), (model.__name__, f.name)
            struct_type = _inner(hints[f.name], msgspec.Struct)
            if nested is not None and struct_type is not None:
                check(nested, struct_type)

    check(model, MIRRORS[model])


# --------------------------------------------------------------------------- differential
_TRICKY = [
    "0", "-0", "1", "1.0", "1e3", "1E2", "-1", "1.5", "1e400", "-1e400", "1e-400", str(2**63), str(2**63 - 1), str(-(2**63) - 1),
    str(2**64), "1" + "0" * 30, "1" + "0" * 400, "NaN", "Infinity", "-Infinity", "01", "+1", ".5", "1.", "true", "false",
    "null", '""', '"x"', '"1"', '"\\ud800"', '"\\u0000"', "[]", "{}", '{"first":1,"last":2}', '{"first":1}',
    '{"first":1,"last":2,"x":0}', '{"a":{"first":1,"last":2}}', '{"a":{"first":1.0,"last":2}}', '{"a":null}', "[1]",
]


def _paths(document, prefix=()):
    """Every (path, value) in a JSON document."""
    yield prefix, document
    if isinstance(document, dict):
        for key, value in document.items():
            yield from _paths(value, (*prefix, key))


def _replace(document, path, text):
    """The document's JSON text with the value at ``path`` replaced by the raw JSON ``text``."""
    marker = "\x00MARK\x00"
    copy = json.loads(json.dumps(document))
    if not path:
        return text
    target = copy
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = marker
    return json.dumps(copy).replace(json.dumps(marker), text)


def _valid(source: Source, i: int) -> tuple[str, dict]:
    if source is Source.SESSIONS:
        snapshot = session_snapshot(f"u{i}", active=i % 2 == 0, ts=1_000 + i)
        return snapshot.user_id, json.loads(snapshot.model_dump_json())
    series = metric_snapshot(f"s{i}", last_z=None if i % 3 == 0 else 1.5 * i)
    return series.series_id, json.loads(series.model_dump_json())


def _strict(source: Source, key: str, value: bytes):
    try:
        return strict_summary(source, key, value)
    except ContractError as exc:
        return exc.reason


@st.composite
def _mutated(draw):
    source = draw(st.sampled_from([Source.SESSIONS, Source.SERIES]))
    key, document = _valid(source, draw(st.integers(0, 5)))
    paths = [path for path, _ in _paths(document)]
    how = draw(st.sampled_from(["value", "extra", "drop", "bytes", "key", "as is"]))
    if how == "value":
        text = _replace(document, draw(st.sampled_from(paths)), draw(st.sampled_from(_TRICKY)))
    elif how == "extra":
        path = draw(st.sampled_from([p for p in paths if isinstance(_get(document, p), dict)]))
        text = _replace(document, path, json.dumps({**_get(document, path), draw(st.sampled_from(["x", "ts", "first"])): 1}))
    elif how == "drop":
        path = draw(st.sampled_from([p for p in paths if p]))
        parent = _get(document, path[:-1])
        text = _replace(document, path[:-1], json.dumps({k: v for k, v in parent.items() if k != path[-1]}))
    else:
        text = json.dumps(document)
    value = text.encode()
    if how == "bytes":
        position = draw(st.integers(0, len(value) - 1))
        value = value[:position] + draw(st.binary(min_size=1, max_size=3)) + value[position + 1:]
    if how == "key":
        key = draw(st.sampled_from([key + "x", key.upper(), ""]))
    return source, key, value


def _get(document, path):
    for key in path:
        document = document[key]
    return document


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutated())
def test_the_fast_check_accepts_only_what_the_strict_check_accepts_with_the_same_summary(case):
    source, key, value = case
    fast = _fast_summary(source, key, value)
    strict = _strict(source, key, value)
    if fast is not None:
        assert strict == fast
        assert type(strict[-2]) is type(fast[-2])  # last_z / the active flag: same type too
    # And summarize, which uses both, answers as the strict check alone.
    answer: tuple | str
    try:
        answer = summarize(source, key.encode(), value)
    except ContractError as exc:
        answer = exc.reason
    assert answer == strict


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutated(), st.sampled_from([None, b"\xff", b"\xed\xa0\x80"]))
def test_the_fused_fast_path_gives_the_record_decode_gives_or_leaves_it_to_decode(case, other_key):
    """The follower builds records straight from the bytes (:func:`fast_record`, issue 54); what it
    builds is what :func:`decode` (the checks, then the summary, then the record) gives, field for
    field and type for type, and what it refuses (a null or non-UTF-8 key among them) decode decides."""
    source, key, value = case
    for raw_key in (key.encode(), other_key):
        fast = fast_record(source, raw_key, value)
        try:
            decoded = decode(source, raw_key, value)
        except ContractError:
            decoded = None
        if fast is not None:
            assert fast == decoded and type(fast) is type(decoded)
            assert [type(getattr(fast, f)) for f in fast.__slots__] == [type(getattr(decoded, f)) for f in decoded.__slots__]
        elif decoded is not None:
            assert _fast_summary(source, raw_key.decode(), value) is None, "refused by the fused path only"
    assert fast_record(source, key.encode(), None) is None and fast_record(Source.ALERTS, key.encode(), value) is None


def test_valid_records_take_the_fast_path():
    for source in (Source.SESSIONS, Source.SERIES):
        for i in range(4):
            key, document = _valid(source, i)
            value = json.dumps(document).encode()
            assert _fast_summary(source, key, value) == strict_summary(source, key, value)
            assert fast_record(source, key.encode(), value) == decode(source, key.encode(), value)


# --------------------------------------------------------------------------- batches
def _new_view(root: Path, name: str) -> StateView:
    opened = open_store(root / name, 8, IDENTITY)
    return StateView(opened.store, 10, clock_ms=lambda: 5_000)


def _contents(view: StateView) -> tuple:
    store = view._store  # noqa: SLF001 - the whole store, keys and values, is what must agree
    return (
        list(store.scan(b"")),
        {source: dict(view.positions(source)) for source in Source},
        view.sizes(),
        view.graves(),
        view.stale_records,
        view.extreme_zscores(),
    )


_record = st.tuples(
    st.sampled_from([Source.SESSIONS, Source.SERIES]),
    st.integers(0, 1),  # partition
    st.integers(0, 4),  # key
    st.sampled_from(["snapshot", "tombstone", "bad"]),
    st.integers(0, 3),  # ts
    st.booleans(),  # active / has z
)


def _consumed_maker():
    """A function from a record spec of :data:`_record` to a consumed record, at the next
    offset of its partition."""
    offsets: dict[tuple[Source, int], int] = {}

    def consumed(spec):
        source, partition, key, kind, ts, flag = spec
        offset = offsets.get((source, partition), 0)
        offsets[(source, partition)] = offset + 1
        if kind == "bad":
            return (source, partition, offset, None)
        name = f"k{key}"
        if kind == "tombstone":
            return (source, partition, offset, decode(source, name.encode(), None))
        if source is Source.SESSIONS:
            body = session_snapshot(name, active=flag, ts=ts).model_dump_json()
        else:
            series = metric_snapshot(name, last_z=4.0 * (ts + 1) if flag else None)
            body = series.model_copy(update={"ts": ts}).model_dump_json()
        return (source, partition, offset, decode(source, name.encode(), body.encode()))

    return consumed


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_record, min_size=1, max_size=40), st.lists(_record, max_size=10))
def test_a_batch_gives_the_view_its_records_one_by_one_give(records, before):
    """Repeated keys, tombstones, older copies and bad records in one batch: the same store,
    positions, counters, graves, stale count and extremes as applying them one at a time."""
    root = Path(tempfile.mkdtemp(prefix="batch-"))
    try:
        at_once, one_by_one = _new_view(root, "a"), _new_view(root, "b")
        consumed = _consumed_maker()
        history = [consumed(spec) for spec in before]
        batch = [consumed(spec) for spec in records]
        for view in (at_once, one_by_one):
            if history:
                view.apply(history)
        at_once.apply(batch)
        for item in batch:
            one_by_one.apply([item])
        assert _contents(at_once) == _contents(one_by_one)
        at_once.close()
        one_by_one.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(_record, min_size=1, max_size=20), min_size=1, max_size=6))
def test_a_rebuild_on_an_empty_store_builds_the_view_of_one_that_reads_every_key(batches):
    """A view on an empty store reads only the keys it may have written (its filter of the
    rebuild's keys); batch after batch, with keys coming back, tombstones, older copies and bad
    records, it builds what a view reading every key from the store builds."""
    root = Path(tempfile.mkdtemp(prefix="rebuild-"))
    try:
        filtered, reading = _new_view(root, "a"), _new_view(root, "b")
        reading.rebuilt()  # caught up: every key is read from the store
        consumed = _consumed_maker()
        for specs in batches:
            batch = [consumed(spec) for spec in specs]
            filtered.apply(batch)
            reading.apply(batch)
        assert _contents(filtered) == _contents(reading)
        filtered.close()
        reading.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
