"""The contracts' fast path agrees with the contract on every record, good and bad.

The property: for generated batches of raw (key, value) records (adversarial spellings of
valid records, the producers' own records, and tests/reliability's bad kinds), the fast path
plus its fallback gives exactly what ``parse_input`` gives per record: equal values (floats
also bit for bit: sign of zero, subnormals) for good records, the same reason for bad ones;
and whatever the fast path decides alone, the contract accepts with the same values.
``FAST_PATH_EXAMPLES`` sets the number of examples (a few thousand for a deep local run).
"""

from __future__ import annotations

import math
import os
from typing import Annotated, Literal, Optional

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr, field_validator, model_validator

from streamstate_pipeline.contracts import ID_MAX_CHARS, MAX_TS, Metric, UserEvent, _Input
from streamstate_jobs.contracts_fast import FAST_MAX_BYTES, NoFastEquivalent, fast_contract, fast_struct
from streamstate_producers.generators import MetricGenerator, UserEventGenerator
from tests.json_records import MODELS, any_record, contract_outcome, same

EXAMPLES = int(os.environ.get("FAST_PATH_EXAMPLES", "300"))
PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)


def same_outcome(got: tuple, expected: tuple) -> bool:
    if got[0] != expected[0]:
        return False
    if got[0] == "refused":
        return got[1] == expected[1]
    return len(got[1]) == len(expected[1]) and all(same(a, b) for a, b in zip(got[1], expected[1]))


def arrays(records: list[tuple[bytes | None, bytes | None]], offset: int) -> tuple[pa.Array, pa.Array]:
    """Key and value arrays as Spark hands them over, sliced past ``offset`` leading rows when asked."""
    padding = [(b"pad", b"{}")] * offset
    keys = pa.array([k for k, _ in padding + records], pa.binary())
    values = pa.array([v for _, v in padding + records], pa.binary())
    return keys.slice(offset), values.slice(offset)


def batches(topic: str):
    return st.tuples(st.lists(any_record(topic), min_size=1, max_size=8), st.integers(0, 2))


@PROPERTY
@given(topic=st.sampled_from(sorted(MODELS)), data=st.data())
def test_fast_path_and_fallback_give_exactly_what_the_contract_gives(topic, data):
    records, offset = data.draw(batches(topic))
    model = MODELS[topic]
    contract = fast_contract(model)
    keys, values = arrays(records, offset)
    decided = contract.decide(keys, values)
    parsed = contract.parse(keys, values)
    for i, (key, value) in enumerate(records):
        expected = contract_outcome(model, key, value)
        fast = i not in decided.undecided
        event(f"{topic}: {expected[0]}, {'fast path' if fast else 'contract'}")
        if fast:
            decided_alone = ("ok", tuple(decided.columns[name][i] for name in contract.names))
            assert same_outcome(decided_alone, expected), (key, value, decided_alone, expected)
        got = ("refused", parsed.reasons[i]) if i in parsed.reasons else ("ok", tuple(parsed.columns[n][i] for n in contract.names))
        assert same_outcome(got, expected), (key, value, got, expected)
    assert parsed.fallback == len(decided.undecided)


def _generated(topic: str, n: int):
    if topic == "events":
        return [(r.key, r.value) for r in UserEventGenerator(seed=7, users=50, topic="t").take(n)]
    return [(r.key, r.value) for r in MetricGenerator(seed=7, series=20, topic="t").take(n)]


@pytest.mark.parametrize("topic", sorted(MODELS))
def test_the_producers_good_records_are_all_decided_by_the_fast_path(topic):
    records = _generated(topic, 2_000)
    keys, values = arrays(records, 0)
    decided = fast_contract(MODELS[topic]).decide(keys, values)
    assert decided.undecided == []
    for i in (0, 777, 1_999):
        assert same_outcome(("ok", tuple(decided.columns[n][i] for n in fast_contract(MODELS[topic]).names)),
                           contract_outcome(MODELS[topic], *records[i]))


def _metric(value: str, series: str = '"s-1"', ts: str = "1700000000000", extra: str = "") -> bytes:
    return f'{{"series_id":{series},"ts":{ts},"value":{value}{extra}}}'.encode()


VALID_ON_THE_FAST_PATH = [
    _metric("-0.0"), _metric("-0"), _metric("5e-324"), _metric("2.4703282292062328e-324"), _metric("1.7976931348623157e308"),
    _metric("9007199254740993"), _metric(str(2**1024 - 2**970 - 1)), _metric("1E+2"), _metric("0.1"),
    _metric("1", series='"\\u00e9\\ud83d\\ude00"'), _metric("1", series='"' + "é" * ID_MAX_CHARS + '"'),
    _metric("1", series='"' + "x" * ID_MAX_CHARS + '"'), _metric("1", ts=str(MAX_TS)), _metric("1", ts="0"),
    _metric("1", extra=',"value":2'), _metric("1", extra=',"nested":{"a":[1,{"b":null}],"c":"\\ud83d\\ude00"}'),
    b' \t\r\n{"series_id" : "s-1" ,\n"ts":1700000000000,"value":1} \n', _metric("1", extra=',"\\u0076alue":3'),
]
REFUSED = [
    _metric("1", extra=',"x":NaN'),  # accepted by the contract (an unknown field), not by msgspec: the contract decides
    _metric("1", extra=',"x":' + "[" * 201 + "]" * 201),
    _metric("1", extra=',"x":' + "1" * 4301),
    _metric("1", extra=',"x":"\xff"').replace(b"\xc3\xbf", b"\xff"),
    b"\xef\xbb\xbf" + _metric("1"),
    _metric("1", series='"' + "x" * (ID_MAX_CHARS + 1) + '"'),
    _metric("1", series='"\\ud800"'),
    _metric("1", ts="1.0"), _metric("1", ts="1e3"), _metric("true"), _metric("1e400"), _metric(str(2**1024 - 2**970)),
    _metric("1", extra=',"value":"x"'), _metric('"x"', extra=',"value":1'),
]


@pytest.mark.parametrize("value", VALID_ON_THE_FAST_PATH)
def test_valid_edge_cases_are_decided_by_the_fast_path_with_the_contracts_values(value):
    contract = fast_contract(Metric)
    for key in (None, b"s-1"):
        expected = contract_outcome(Metric, key, value)
        if key is not None and expected[0] == "refused":  # the id is not s-1 here: the key check is the contract's
            continue
        decided = contract.decide(*arrays([(key, value)], 0))
        assert expected[0] == "ok" and decided.undecided == [], (value, expected)
        assert same_outcome(("ok", tuple(decided.columns[n][0] for n in contract.names)), expected)


@pytest.mark.parametrize("value", REFUSED)
def test_what_the_fast_path_leaves_open_the_contract_decides(value):
    contract = fast_contract(Metric)
    decided = contract.decide(*arrays([(None, value)], 0))
    parsed = contract.parse(*arrays([(None, value)], 0))
    assert decided.undecided == [0]
    expected = contract_outcome(Metric, None, value)
    got = ("refused", parsed.reasons[0]) if 0 in parsed.reasons else ("ok", tuple(parsed.columns[n][0] for n in contract.names))
    assert same_outcome(got, expected)


def test_keys_the_fast_path_cannot_vouch_for_go_to_the_contract():
    contract = fast_contract(Metric)
    value = _metric("1")
    records = [(b"s-1", value), (None, value), (b"s-2", value), (b"\xffs-1", value), (b"s-1 ", value), (b"", value)]
    decided = contract.decide(*arrays(records, 1))
    assert decided.undecided == [2, 3, 4, 5]
    parsed = contract.parse(*arrays(records, 1))
    assert parsed.reasons == {
        2: 'key "s-2" does not match series_id "s-1"',
        3: "key is not valid UTF-8 (byte 0xff at position 0)",
        4: 'key "s-1 " does not match series_id "s-1"',
        5: 'key "" does not match series_id "s-1"',
    }
    assert parsed.columns["value"][:2] == [1.0, 1.0] and parsed.columns["value"][2:] == [None] * 4


def test_null_values_long_values_and_empty_batches():
    contract = fast_contract(Metric)
    long_valid = _metric("1", extra=',"pad":"' + "p" * FAST_MAX_BYTES + '"')
    records = [(b"s-1", None), (None, long_valid), (None, b"")]
    parsed = contract.parse(*arrays(records, 0))
    assert parsed.reasons == {0: "value is null", 2: "not valid JSON: EOF while parsing a value at line 1 column 0"}
    assert parsed.columns["series_id"] == [None, "s-1", None] and parsed.fallback == 3
    empty = contract.parse(pa.array([], pa.binary()), pa.array([], pa.binary()))
    assert empty.reasons == {} and empty.columns == {"series_id": [], "ts": [], "value": []}


# --------------------------------------------------------------------------- derivation
def test_every_contract_field_has_a_faithful_fast_equivalent():
    for model in (UserEvent, Metric):
        struct_type = fast_struct(model)
        assert struct_type.__struct_fields__ == tuple(model.model_fields)
        required = {name for name, info in model.model_fields.items() if info.is_required()}
        defaults = dict(zip(struct_type.__struct_fields__[-len(struct_type.__struct_defaults__):], struct_type.__struct_defaults__)) \
            if struct_type.__struct_defaults__ else {}
        assert required == set(model.model_fields) - set(defaults)
        assert all(d is None for d in defaults.values())


def _refused_model(**fields):
    return type("Probe", (_Input,), {"__annotations__": fields})


def _not_finite_double(value: float) -> float:
    return float(value)


class WithValidator(_Input):
    series_id: StrictStr

    @field_validator("series_id")
    @classmethod
    def strip(cls, value: str) -> str:
        return value.strip()


class WithModelValidator(_Input):
    series_id: StrictStr

    @model_validator(mode="after")
    def check(self):
        return self


class Forbidding(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    series_id: StrictStr


class Stripping(BaseModel):
    model_config = ConfigDict(extra="ignore", str_strip_whitespace=True)
    series_id: StrictStr


class Aliased(_Input):
    series_id: StrictStr = Field(alias="id")


class OtherDefault(_Input):
    page: Optional[StrictStr] = "/home"


@pytest.mark.parametrize(
    "model",
    [
        _refused_model(series_id=Annotated[StrictStr, Field(pattern="^s")]),
        _refused_model(flag=bool),
        _refused_model(score=StrictFloat),
        _refused_model(value=Annotated[StrictInt | StrictFloat, AfterValidator(_not_finite_double)]),
        _refused_model(value=StrictInt | StrictStr),
        _refused_model(count=Annotated[StrictInt, Field(multiple_of=2)]),
        _refused_model(tags=list[str]),
        _refused_model(kind=Literal[1, 2]),
        WithValidator, WithModelValidator, Forbidding, Stripping, Aliased, OtherDefault,
    ],
    ids=lambda m: getattr(m, "__name__", "model"),
)
def test_a_contract_without_a_faithful_fast_equivalent_is_refused_at_derivation(model):
    with pytest.raises(NoFastEquivalent):
        fast_struct(model)


def test_same_compares_doubles_bit_for_bit():
    assert same(0.0, 0.0) and not same(0.0, -0.0) and not same(1, 1.0) and same(math.inf, math.inf)
