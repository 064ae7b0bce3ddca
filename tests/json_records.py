"""Hypothesis strategies for raw input records that probe the contracts' fast path.

Valid records are spelled every way JSON allows (escaped and raw Unicode, surrogate pairs,
exponents, -0, subnormals, doubles near the rounding boundaries, integers of hundreds of
digits, whitespace, duplicate keys, escaped field names, nested and hostile unknown fields),
and broken ones differ from a valid record by one detail a fast decoder could get wrong
(NaN tokens in unknown fields, lone surrogates, nesting just past pydantic's limit, integer
literals just past 4,300 digits, invalid UTF-8 in skipped text, a BOM, a 1,025-character
id, 1.0 for an integer, a key that is not UTF-8 or not the id). Whether a record is valid
is never decided here: the tests ask the contract itself.
"""

from __future__ import annotations

import json
import random
import struct
from decimal import Decimal
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st

from streamstate_pipeline.contracts import EVENT_TYPES, ID_MAX_CHARS, MAX_TS, Metric, UserEvent
from streamstate_jobs.contracts_fast import FAST_MAX_BYTES, MAX_BRACKETS, SHALLOW_BYTES
from tests.reliability.bad_records import bad_record, json_junk

MODELS = {"events": UserEvent, "metrics": Metric}
KEY_FIELD = {"events": "user_id", "metrics": "series_id"}
JSON_WS = st.text(alphabet=" \t\r\n", max_size=2)
# Characters some parsers treat as whitespace and JSON does not.
NOT_JSON_WS = ["\x0b", "\x0c", "\u00a0", "\ufeff", "\u2028", "\x00"]
ALPHABETS = {
    "ascii": [chr(c) for c in range(0x20, 0x7F)],
    "controls": [chr(c) for c in range(0x00, 0x20)] + ['"', "\\", "/"],
    "latin": [chr(c) for c in range(0xA0, 0x180)],
    "bmp": [chr(c) for c in (0x391, 0x4E2D, 0x6587, 0xFFFD, 0xFEFF, 0x2028, 0xE000, 0xFFFF)],
    "astral": [chr(c) for c in (0x1F600, 0x10000, 0x10FFFF, 0x1D11E)],
}
# Unicode text of one of the alphabets, or mixed; never lone surrogates (they cannot be UTF-8).
MIXED = [c for chars in ALPHABETS.values() for c in chars]
EDGE_INTS = [
    0, 1, -1, 2**53 - 1, 2**53 + 1, 2**63 - 1, 2**63, 2**63 + 1, -(2**63), -(2**63) - 1, 2**64 - 1, 2**64, 2**64 + 1,
    10**19, 10**20, 10**300, -(10**300), 10**308, 2**1024 - 2**970 - 1, 2**1024 - 2**970, 2**1024 - 2**971,
    -(2**1024 - 2**970 - 1), -(2**1024 - 2**970), 10**309, 10**400,
]
EDGE_FLOATS = [0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 2.225073858507201e-308, 1e-320, 1.7976931348623157e308,
               -1.7976931348623157e308, 1e308, 1e200, 0.1, 1.5, 9007199254740993.0, 1e23, 8.98846567431158e307]
EDGE_TS = [0, 1, MAX_TS, MAX_TS - 1, MAX_TS + 1, -1, 1_700_000_000_000, 2**63, -(2**63) - 1, 10**30]
JUNK_TOKENS = ['null', 'true', 'false', '"12"', '""', '[]', '{}', '[1]', '{"a":1}', 'NaN', 'Infinity', '-Infinity',
               '1.5', '1.0', '1e3', '-0', '-0.0', '"\\ud800"', '"\\udc00"', '01', '1.', '.5', '+1', '0x10', "'a'", 'tru']
# Unknown fields whose value is fine in JSON, or fine for one parser only.
HOSTILE_EXTRAS = [
    'NaN', 'Infinity', '-Infinity', '"\\ud800"', '"\\udc00"', '"\\ud800\\u0041"', '"\\q"', '"\x01"', '"\x7f"', '1e99999',
    '-1e99999', '1e-99999', '"\\u00e9\\ud83d\\ude00"', '[1,]', '{"a":1,}', '01', '-', '1.', '[[[]]]', '{"":{"":{}}}',
]


def _text(rng: random.Random, length: int, alphabet: str) -> str:
    chars = MIXED if alphabet == "mixed" else ALPHABETS[alphabet]
    return "".join(rng.choice(chars) for _ in range(length))


def spell_string(rng: random.Random, text: str, mode: str) -> str:
    """``text`` as a JSON string token: raw, ASCII-escaped, every character escaped, or a per-character mix."""
    if mode == "raw":
        return json.dumps(text, ensure_ascii=False)
    if mode == "ascii":
        return json.dumps(text, ensure_ascii=True)
    out = []
    for ch in text:
        escape = mode == "escaped" or rng.random() < 0.5
        if escape or ch in '"\\' or ord(ch) < 0x20:
            if ord(ch) > 0xFFFF:
                high, low = divmod(ord(ch) - 0x10000, 0x400)
                out.append(f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04X}")
            elif ch == "/" and rng.random() < 0.5:
                out.append("\\/")
            else:
                out.append(json.dumps(ch)[1:-1] if rng.random() < 0.5 and ord(ch) < 0x80 else f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def spell_int(rng: random.Random, value: int) -> str:
    """An integer as JSON spells it, or as a float literal of the same value (1.0, 1e3)."""
    pick = rng.random()
    if pick < 0.7 or abs(value) > 10**300:
        return "-0" if value == 0 and rng.random() < 0.3 else str(value)
    if pick < 0.8:
        return f"{value}.0"
    if pick < 0.9:
        return f"{value}{rng.choice(['e0', 'E+0', 'e-0', 'E00'])}"
    digits = str(abs(value))
    sign = "-" if value < 0 else ""
    return f"{sign}{digits[0]}.{digits[1:] or '0'}e{len(digits) - 1}"


def _midpoint(value: float) -> Decimal:
    above = struct.unpack("<d", struct.pack("<q", struct.unpack("<q", struct.pack("<d", abs(value)))[0] + 1))[0]
    middle = (Decimal(abs(value)) + Decimal(above)) / 2 if above != float("inf") else Decimal(abs(value)) * 2
    return -middle if value < 0 or str(value).startswith("-") else middle


def spell_float(rng: random.Random, value: float) -> str:
    """A finite double in one of JSON's spellings, or the exact decimal halfway to the next double."""
    pick = rng.random()
    if pick < 0.4:
        return repr(value).replace("e+", rng.choice(["e+", "e", "E", "E+"]))
    if pick < 0.55:
        return f"{value:.17e}"
    if pick < 0.65:
        return f"{value:.25g}".replace("e+", "e") if "e" in f"{value:.25g}" or "." in f"{value:.25g}" else f"{value:.25g}.0"
    if pick < 0.8:
        exact = format(Decimal(value), "f")
        return exact if "." in exact or rng.random() < 0.5 else exact + ".0"
    middle = _midpoint(value)
    nudge = rng.choice([0, 0, Decimal(10) ** (middle.adjusted() - 40), -(Decimal(10) ** (middle.adjusted() - 40))])
    text = format(middle + nudge, "f") if rng.random() < 0.5 else format(middle + nudge, "e")
    return text if any(c in text for c in ".eE") else text + ".0"


@st.composite
def _any_float(draw) -> float:
    return draw(st.one_of(
        st.sampled_from(EDGE_FLOATS),
        st.floats(allow_nan=False, allow_infinity=False),
        st.floats(-1e6, 1e6),
        st.integers(0, 2**64 - 1).map(lambda b: struct.unpack("<d", struct.pack("<Q", b))[0]).filter(lambda f: f == f and abs(f) != float("inf")),
    ))


@st.composite
def wild_number(draw) -> str:
    """Any JSON number: long mantissas, leading zeros after the point, exponents far outside a double's range."""
    sign = draw(st.sampled_from(["", "-"]))
    integer = draw(st.sampled_from(["0", "1", "9"])) if draw(st.booleans()) else str(draw(st.integers(1, 10**40)))
    fraction = draw(st.sampled_from(["", "." + "0" * draw(st.integers(0, 30)) + str(draw(st.integers(0, 10**25)))]))
    exponent = draw(st.sampled_from(["", "e", "E", "e+", "e-", "E-"]))
    if exponent:
        exponent += str(draw(st.one_of(st.integers(0, 400), st.integers(0, 10**6))))
    return sign + integer + fraction + exponent


@st.composite
def number_token(draw, rng: random.Random, clean: bool) -> str:
    if draw(st.integers(0, 4)) == 0:
        return draw(wild_number())
    if draw(st.booleans()):
        value = draw(st.one_of(st.sampled_from(EDGE_INTS), st.integers(-(2**70), 2**70), st.integers(-(10**320), 10**320)))
        if clean and abs(value) >= 2**1024 - 2**970:  # rounds to infinity: refused
            value = 2**1024 - 2**970 - 1
        return spell_int(rng, value)
    return spell_float(rng, draw(_any_float()))


@st.composite
def ts_token(draw, rng: random.Random, clean: bool) -> str:
    if clean:
        return str(draw(st.one_of(st.integers(0, MAX_TS), st.sampled_from([0, MAX_TS]))))
    return spell_int(rng, draw(st.one_of(st.integers(0, MAX_TS), st.sampled_from(EDGE_TS))))


@st.composite
def id_text(draw, rng: random.Random, clean: bool) -> str:
    edges = [1, 2, ID_MAX_CHARS - 1, ID_MAX_CHARS] if clean else [0, ID_MAX_CHARS, ID_MAX_CHARS + 1]
    length = draw(st.one_of(st.sampled_from(edges), st.integers(1, 40)))
    return _text(rng, length, draw(st.sampled_from([*ALPHABETS, "mixed", "ascii", "ascii"])))


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth if depth % 2 else '{"a":' * depth + "1" + "}" * depth


@st.composite
def extra_token(draw, rng: random.Random, hostile: bool) -> str:
    """The value of an unknown field: JSON junk, or (``hostile``) a token only some parsers accept."""
    if hostile:
        return draw(st.one_of(
            st.sampled_from(HOSTILE_EXTRAS),
            st.integers(200, 205).map(_deep),
            st.integers(4301, 4305).map(lambda n: "1" * n),
        ))
    pick = draw(st.integers(0, 9))
    if pick < 5:
        return json.dumps(draw(json_junk), ensure_ascii=draw(st.booleans()))
    if pick == 5:
        return _deep(draw(st.integers(190, 199)))  # deep, but within pydantic's limit
    if pick == 6:  # integer literals up to pydantic's 4,300-digit limit (the record then passes FAST_MAX_BYTES)
        return ("-" if draw(st.booleans()) else "") + "1" * draw(st.integers(4290, 4300)) + draw(st.sampled_from(["", ".5", "e5"]))
    if pick == 7:  # a bracket count around MAX_BRACKETS in a value longer than SHALLOW_BYTES
        count = draw(st.integers(MAX_BRACKETS - 3, MAX_BRACKETS + 3))
        return "[" + ",".join(["[]"] * (count // 2)) + "]" + " " * SHALLOW_BYTES
    mode = draw(st.sampled_from(["raw", "ascii", "mixed"]))
    return spell_string(rng, _text(rng, draw(st.integers(0, 30)), draw(st.sampled_from([*ALPHABETS, "mixed"]))), mode)


FLAWS = ("prefix", "suffix", "inner_ws", "junk_field", "missing_field", "hostile_extra", "invalid_utf8", "bom", "cut")


@st.composite
def adversarial_record(draw, topic: str) -> tuple[bytes | None, bytes | None]:
    """A raw (key, value) close to a valid record of ``topic``, spelled adversarially, with up to two flaws."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    clean = draw(st.integers(0, 2)) > 0  # valid values and no flaws: the contract usually accepts it
    flaws = [] if clean else [draw(st.sampled_from(FLAWS)) for _ in range(draw(st.integers(0, 2)))]
    name_mode = draw(st.sampled_from(["raw", "raw", "raw", "ascii", "escaped", "mixed"]))
    string_mode = draw(st.sampled_from(["raw", "ascii", "escaped", "mixed"]))
    identity = draw(id_text(rng, clean))

    def token(name: str) -> str:
        """A value of field ``name`` (valid when clean), spelled in this record's way."""
        if name in ("event_id", "user_id", "series_id"):
            return spell_string(rng, identity if name == KEY_FIELD[topic] else draw(id_text(rng, clean)), string_mode)
        if name == "type":
            return spell_string(rng, draw(st.sampled_from(EVENT_TYPES)), string_mode)
        if name == "ts":
            return draw(ts_token(rng, clean))
        if name == "page":
            return "null" if draw(st.booleans()) else spell_string(rng, _text(rng, draw(st.integers(0, 60)), "mixed"), string_mode)
        return "null" if name == "amount" and rng.random() < 0.2 else draw(number_token(rng, clean))

    names = ["event_id", "user_id", "type", "ts"] if topic == "events" else ["series_id", "ts", "value"]
    names += [name for name in ("page", "amount") if topic == "events" and draw(st.booleans())]
    fields = {name: token(name) for name in names}
    pairs = [(spell_string(rng, name, name_mode), token) for name, token in fields.items()]
    if "junk_field" in flaws:
        index = draw(st.integers(0, len(pairs) - 1))
        pairs[index] = (pairs[index][0], draw(st.sampled_from(JUNK_TOKENS)))
    if "missing_field" in flaws:
        del pairs[draw(st.integers(0, len(pairs) - 1))]
    for _ in range(draw(st.sampled_from([0, 0, 1, 2, 3]))):  # unknown fields, some named like real ones (duplicates)
        name = draw(st.sampled_from(["note", "", "Ts", "ts ", "user_id\u0000", "x" * 40, *fields]))
        if name in fields:  # a duplicate key: the same value, another (valid when clean) one, or junk
            value = draw(st.sampled_from([fields[name], token(name), *([] if clean else JUNK_TOKENS)]))
        else:
            value = draw(extra_token(rng, hostile="hostile_extra" in flaws))
        pairs.insert(draw(st.integers(0, len(pairs))), (spell_string(rng, name, name_mode), value))
    if draw(st.booleans()):
        rng.shuffle(pairs)
    ws = [draw(JSON_WS) for _ in range(4)]
    if "inner_ws" in flaws:
        ws[draw(st.integers(0, 3))] += draw(st.sampled_from(NOT_JSON_WS))
    body = "{" + ws[0] + ",".join(f"{ws[1]}{name}{ws[2]}:{ws[3]}{token}" for name, token in pairs) + ws[0] + "}"
    if draw(st.integers(0, 9)) == 0:  # a value just around FAST_MAX_BYTES
        pad = FAST_MAX_BYTES - len(body.encode()) - 12 + draw(st.integers(-3, 3))
        if pad > 0:
            body = body[:-1] + ',"pad":"' + "p" * pad + '"}'
    body = draw(JSON_WS) + body + draw(JSON_WS)
    if "prefix" in flaws:
        body = draw(st.sampled_from(NOT_JSON_WS)) + body
    if "suffix" in flaws:
        body += draw(st.sampled_from([*NOT_JSON_WS, "x", ",", "{}", "]"]))
    value = body.encode("utf-8")
    if "invalid_utf8" in flaws:  # maybe inside skipped text
        at = draw(st.integers(0, len(value)))
        value = value[:at] + draw(st.sampled_from([b"\xff", b"\xc3(", b"\xed\xa0\x80", b"\x80", b"\xf4\x90\x80\x80"])) + value[at:]
    if "bom" in flaws:
        value = b"\xef\xbb\xbf" + value
    if "cut" in flaws:
        value = value[: draw(st.integers(0, len(value)))]
    return draw(_key_for(identity, clean)), value


@st.composite
def _key_for(draw, identity: str, clean: bool) -> bytes | None:
    pick = draw(st.integers(0, 9))
    if pick < 5:
        return identity.encode("utf-8")
    if pick < 7 or clean:
        return None
    return draw(st.sampled_from([(identity + "x").encode(), b"\xff" + identity.encode(), identity.upper().encode(), b""]))


@st.composite
def generated_record(draw, topic: str) -> tuple[bytes | None, bytes | None]:
    """A record as the project's producers write it (mostly valid, with their malformed kinds)."""
    from streamstate_producers.generators import MetricGenerator, UserEventGenerator

    seed = draw(st.integers(0, 2**16))
    skip = draw(st.integers(0, 30))
    if topic == "events":
        generator = UserEventGenerator(seed=seed, users=5, malformed_rate=0.3, duplicate_rate=0.1, topic="t")
    else:
        generator = MetricGenerator(seed=seed, series=3, malformed_rate=0.3, topic="t")
    record = list(generator.take(skip + 1))[-1]
    return record.key, record.value


def any_record(topic: str) -> st.SearchStrategy[tuple[bytes | None, bytes | None]]:
    """Good and bad records: adversarial spellings, the producers' own, and tests/reliability's bad kinds."""
    kinds = {"adversarial": adversarial_record(topic), "generated": generated_record(topic), "bad": bad_record(topic)}
    return st.sampled_from(["adversarial"] * 6 + ["generated", "bad"]).flatmap(kinds.__getitem__)


def contract_outcome(model: Any, key: bytes | None, value: bytes | None) -> tuple:
    """What ``parse_input`` says: ("ok", values by field) or ("refused", reason)."""
    from streamstate_pipeline.contracts import ContractError, parse_input

    try:
        record = parse_input(model, key, value)
    except ContractError as error:
        return ("refused", error.reason)
    return ("ok", tuple(getattr(record, name) for name in model.model_fields))


def same(a, b) -> bool:
    """Equal, and for floats the same double: -0.0 is not 0.0 here."""
    if isinstance(a, float) or isinstance(b, float):
        return type(a) is type(b) and struct.pack("<d", a) == struct.pack("<d", b) and repr(a) == repr(b)
    return type(a) is type(b) and a == b


TIMESTAMP = pa.timestamp("us", tz="UTC")


@st.composite
def kafka_micros(draw) -> int | None:
    pick = draw(st.integers(0, 9))
    if pick == 0:
        return None
    if pick == 1:
        return draw(st.integers(-(10**12), -1))  # negative, not always whole milliseconds
    if pick < 5:
        return draw(st.integers(1_600_000_000_000, 1_800_000_000_000)) * 1000
    return draw(st.integers(0, 2**62))


@st.composite
def raw_batches(draw):
    """A batch of raw records shaped as Spark's Kafka (or Kinesis) source hands it to the validation step."""
    topic = draw(st.sampled_from(sorted(MODELS)))
    records = draw(st.lists(any_record(topic), min_size=1, max_size=8))
    n = len(records)
    columns = {
        "key": pa.array([k for k, _ in records], pa.binary()),
        "value": pa.array([v for _, v in records], pa.binary()),
        "topic": pa.array([draw(st.sampled_from(["user-events", "metrics"])) for _ in range(n)], pa.string()),
        "partition": pa.array([draw(st.integers(0, 3)) for _ in range(n)], pa.int32()),
        "offset": pa.array([draw(st.integers(0, 2**40)) for _ in range(n)], pa.int64()),
        "timestamp": pa.array([draw(kafka_micros()) for _ in range(n)], TIMESTAMP),
    }
    if draw(st.booleans()):  # the Kinesis source's exact coordinate
        columns["sequenceNumber"] = pa.array([str(draw(st.integers(0, 2**128))) for _ in range(n)], pa.string())
    return topic, pa.RecordBatch.from_pydict(columns), draw(st.sampled_from([0, 60_000, 3_600_000]))
