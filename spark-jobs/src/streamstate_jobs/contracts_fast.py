"""The input contracts at columnar speed: a whole Arrow batch of raw records checked and
typed in C, with the contract itself deciding only what this fast path leaves open.

:func:`streamstate_pipeline.contracts.parse_input` (pydantic) costs about 7 µs per record, more than
the rest of a job's per-record budget. Here each input model of :mod:`streamstate_pipeline.contracts`
is turned, at import time, into a msgspec ``Struct`` (msgspec: a compiled, strict JSON
decoder) with the same field names, types, bounds, lengths, ``Literal`` choices and optional
defaults, so the contract is still written once; a field or setting with no exact msgspec
equivalent raises :class:`NoFastEquivalent` at import, never a silently weaker check.

A record is *decided* here only when the contract certainly accepts it, and its values are
then the contract's: both libraries parse JSON numbers with correctly rounded algorithms, and
a ``Number`` integer becomes its double as ``_finite_double`` makes it. Everything else,
every bad record and any good one the fast path is unsure of, goes through ``parse_input``,
which decides and gives the reason it gives today. So the fast path may leave too much to
the contract, but never accepts what the contract refuses (spark-jobs/tests/test_contracts_fast.py
proves both on generated records, good and bad).

Where msgspec alone would accept what the contract refuses, the batch is checked first
(measured against pydantic-core 2.50 and msgspec 0.22):

- UTF-8: msgspec does not validate the bytes of the unknown fields it skips, so a value with
  any non-ASCII byte is decoded by Python's UTF-8 codec, as the contract does;
- nesting: pydantic's JSON parser refuses more than about 200 levels, msgspec goes deeper, so
  a value longer than :data:`SHALLOW_BYTES` with more than :data:`MAX_BRACKETS` brackets is
  left to the contract (a value of at most 256 bytes cannot nest 129 levels);
- long numbers: pydantic refuses an integer literal of more than 4,300 digits anywhere in the
  document, msgspec skips it in an unknown field, so values longer than
  :data:`FAST_MAX_BYTES` are left to the contract (as the rare very long record is anyway);
- the key: a non-null key must be the UTF-8 of the id field, compared for the whole batch.

Both keep the last of duplicate JSON keys (msgspec fails on an invalid earlier one: undecided),
both unescape ``\\u`` escapes in keys and strings, and both refuse lone surrogates, NaN and
Infinity tokens, leading zeros, trailing commas and trailing characters.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Callable, Literal, Optional, Union

import annotated_types
import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import AfterValidator, BaseModel
from pydantic.types import Strict

from streamstate_pipeline.contracts import ContractError, Metric, UserEvent, _finite_double, key_field, parse_input
from streamstate_pipeline.errors import ConfigurationError

# Longer values are left to the contract: see the module docstring (4,300-digit integers).
FAST_MAX_BYTES = 4096
# A JSON value of this many bytes nests at most half as deep; longer ones have their brackets counted.
SHALLOW_BYTES = 256
MAX_BRACKETS = 128

# Model settings whose meaning the derived decoder reproduces: unknown fields are skipped, and
# msgspec never reads NaN or Infinity, which allow_inf_nan=False refuses too.
_SUPPORTED_CONFIG: dict[str, set[Any]] = {"extra": {"ignore"}, "frozen": {True, False}, "allow_inf_nan": {False}}
_BOUNDS: dict[type, str] = {annotated_types.Ge: "ge", annotated_types.Le: "le", annotated_types.Gt: "gt", annotated_types.Lt: "lt"}
_LENGTHS: dict[type, str] = {annotated_types.MinLen: "min_length", annotated_types.MaxLen: "max_length"}


class NoFastEquivalent(ConfigurationError, TypeError):
    """A contract field or model setting the fast path cannot reproduce exactly."""


# --------------------------------------------------------------------------- derivation
def _meta(where: str, base: type, constraints: tuple, allowed: dict[type, str]) -> Any:
    """``base`` annotated with the msgspec form of ``constraints``; Strict is msgspec's default."""
    bounds: dict[str, Any] = {}
    for constraint in constraints:
        if isinstance(constraint, Strict):
            continue  # msgspec is strict always: it accepts no more than a lax field would either
        name = allowed.get(type(constraint))
        if name is None:
            raise NoFastEquivalent(f"{where}: no fast equivalent of {constraint!r} on {base.__name__}")
        bounds[name] = getattr(constraint, name)
    return typing.Annotated[base, msgspec.Meta(**bounds)] if bounds else base


def _strip_strict(annotation: Any) -> Any:
    if typing.get_origin(annotation) is typing.Annotated:
        inner, *extra = typing.get_args(annotation)
        if all(isinstance(e, Strict) for e in extra):
            return inner
    return annotation


def _is_number(where: str, members: tuple, constraints: tuple) -> bool:
    """The contracts' ``Number``: int or float, made a finite double by ``_finite_double``."""
    if {_strip_strict(m) for m in members} != {int, float}:
        return False
    validators = [c for c in constraints if not isinstance(c, Strict)]
    if len(validators) != 1 or not isinstance(validators[0], AfterValidator) or validators[0].func is not _finite_double:
        raise NoFastEquivalent(f"{where}: no fast equivalent of an int/float union with {validators!r}")
    return True


def fast_type(where: str, annotation: Any, constraints: tuple = ()) -> Any:
    """The msgspec type that accepts a subset of what ``annotation`` accepts, with equal values."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return fast_type(where, args[0], (*constraints, *args[1:]))
    if origin in (Union, types.UnionType):
        members = tuple(a for a in args if a is not type(None))
        if len(members) < len(args):  # Optional: the constraints belong to the non-null part
            inner = members[0] if len(members) == 1 else Union[members]
            return Optional[fast_type(where, inner, constraints)]
        if _is_number(where, members, constraints):
            # msgspec's float takes JSON ints and floats (not bools), rounds an integer to its
            # nearest double and refuses what overflows to infinity, as _finite_double does.
            return float
        raise NoFastEquivalent(f"{where}: no fast equivalent of {annotation!r}")
    if origin is Literal:
        if not all(type(a) is str for a in args) or any(not isinstance(c, Strict) for c in constraints):
            raise NoFastEquivalent(f"{where}: no fast equivalent of {annotation!r} with {constraints!r}")
        return Literal[args]
    if annotation is str:
        return _meta(where, str, constraints, _LENGTHS)
    if annotation is int:
        return _meta(where, int, constraints, _BOUNDS)
    raise NoFastEquivalent(f"{where}: no fast equivalent of {annotation!r}")


def _check_model(model: type[BaseModel]) -> None:
    for key, value in model.model_config.items():
        if value not in _SUPPORTED_CONFIG.get(key, ()):
            raise NoFastEquivalent(f"{model.__name__}: no fast equivalent of the setting {key}={value!r}")
    decorators = model.__pydantic_decorators__
    if decorators.validators or decorators.field_validators or decorators.root_validators or decorators.model_validators:
        raise NoFastEquivalent(f"{model.__name__}: validators beyond field annotations have no fast equivalent")


def fast_struct(model: type[BaseModel]) -> type[msgspec.Struct]:
    """The msgspec Struct of ``model``, derived from its fields; raises :class:`NoFastEquivalent`."""
    _check_model(model)
    fields = []
    for name, info in model.model_fields.items():
        where = f"{model.__name__}.{name}"
        if info.alias or info.validation_alias or info.default_factory is not None or info.discriminator:
            raise NoFastEquivalent(f"{where}: no fast equivalent of aliases, default factories or discriminators")
        if not info.is_required() and info.default is not None:
            raise NoFastEquivalent(f"{where}: no fast equivalent of the default {info.default!r}")
        decoded = fast_type(where, info.annotation, tuple(info.metadata))
        fields.append((name, decoded) if info.is_required() else (name, decoded, None))
    # gc=False: instances hold only strings and numbers, so the collector need not track them.
    return msgspec.defstruct(f"Fast{model.__name__}", fields, kw_only=True, gc=False)


# --------------------------------------------------------------------------- batches
@dataclass(frozen=True)
class Decided:
    """The fast path's verdict on a batch."""

    columns: dict[str, list]  # per contract field, per record: its value; None where undecided
    undecided: list[int]  # records left to the contract, ascending


@dataclass(frozen=True)
class Parsed:
    """A batch validated against its contract: exactly what ``parse_input`` gives per record."""

    columns: dict[str, list]  # per contract field, per record: its value; None where refused
    reasons: dict[int, str]  # refused records: index -> the contract's reason
    fallback: int  # records decided by the contract (parse_input) rather than the fast path


def python_bytes(array: pa.Array, rows: list[int]) -> list[bytes | None]:
    """The ``rows`` of a binary array as Python bytes (None where null), without a scalar per row."""
    if not rows:
        return []
    return _binary(array).take(pa.array(rows, pa.int64())).to_numpy(zero_copy_only=False).tolist()


def _binary(array: pa.Array) -> pa.Array:
    return array if pa.types.is_binary(array.type) else array.cast(pa.binary())


def _candidates(values: pa.Array, objects: np.ndarray) -> np.ndarray:
    """Indices of the non-null values the derived decoder may decide (see the module docstring)."""
    n = len(values)
    _, offsets_buffer, data_buffer = values.buffers()
    offsets = np.frombuffer(offsets_buffer, dtype=np.int32)[values.offset : values.offset + n + 1]
    lengths = np.diff(offsets)
    fit = lengths <= FAST_MAX_BYTES
    if values.null_count:
        fit &= values.is_valid().to_numpy(zero_copy_only=False)
    if data_buffer is not None and offsets[-1] > offsets[0]:
        high = np.flatnonzero(np.frombuffer(data_buffer, dtype=np.uint8)[offsets[0] : offsets[-1]] >= 0x80)
        if len(high):
            for i in np.unique(np.searchsorted(offsets, high + offsets[0], side="right") - 1).tolist():
                try:
                    objects[i].decode("utf-8")
                except UnicodeDecodeError:
                    fit[i] = False
    for i in np.flatnonzero(fit & (lengths > SHALLOW_BYTES)).tolist():
        if objects[i].count(b"[") + objects[i].count(b"{") > MAX_BRACKETS:
            fit[i] = False
    return np.flatnonzero(fit)


def _decode_all(decode: Callable[[bytes], Any], values: list, refused_as: Any) -> tuple[list, list[int]]:
    """``decode`` of every value, looped in C; a value it raises on becomes ``refused_as``.

    ``list.extend`` keeps what it appended before ``map`` raised, and ``map`` has consumed the
    refused value, so the loop resumes right after it (the length check guards that reading).
    """
    out: list = []
    refused: list[int] = []
    rest = iter(values)
    while True:
        try:
            out.extend(map(decode, rest))
            break
        except Exception:  # noqa: BLE001 - anything msgspec refuses is the contract's to explain
            refused.append(len(out))
            out.append(refused_as)
    if len(out) != len(values):
        raise RuntimeError(f"decoded {len(out)} of {len(values)} values")
    return out, refused


class FastContract:
    """One input model's fast path (:meth:`decide`) and its exact combination with the contract (:meth:`parse`)."""

    def __init__(self, model: type[UserEvent] | type[Metric]):
        self.model = model
        self.names = list(model.model_fields)
        self.key_field = key_field(model)
        self.struct = fast_struct(model)
        self._decode = msgspec.json.Decoder(self.struct).decode
        # Stands in for an undecided record, so that columns are read in C for the whole batch.
        self._null = self.struct(**dict.fromkeys(self.names))
        self._getters = {name: attrgetter(name) for name in self.names}

    def decide(self, keys: pa.Array, values: pa.Array) -> Decided:
        """Per record of a batch of raw Kafka (key, value) bytes: its values, or left undecided."""
        values = _binary(values)
        n = len(values)
        objects = values.to_numpy(zero_copy_only=False)
        candidates = _candidates(values, objects)
        chosen = objects if len(candidates) == n else objects[candidates]
        decoded, refused = _decode_all(self._decode, chosen.tolist(), self._null)
        if len(candidates) == n:
            records = decoded
        else:
            scattered = np.full(n, self._null, dtype=object)
            scattered[candidates] = np.fromiter(decoded, dtype=object, count=len(decoded))
            records = scattered.tolist()
        undecided = np.ones(n, dtype=bool)
        undecided[candidates] = False
        undecided[candidates[refused]] = True
        columns = {name: list(map(getter, records)) for name, getter in self._getters.items()}
        # A non-null key must be the UTF-8 of the id: equal bytes, for the whole batch at once.
        ids = pa.array(columns[self.key_field], pa.string()).cast(pa.binary())
        undecided |= ~pc.fill_null(pc.equal(ids, _binary(keys)), True).to_numpy(zero_copy_only=False)
        left = np.flatnonzero(undecided).tolist()
        for i in left:
            for column in columns.values():
                column[i] = None
        return Decided(columns, left)

    def parse(self, keys: pa.Array, values: pa.Array) -> Parsed:
        """Every record of the batch decided as ``parse_input`` decides it: values, or the reason."""
        decided = self.decide(keys, values)
        columns = decided.columns
        reasons: dict[int, str] = {}
        left = decided.undecided
        for i, key, value in zip(left, python_bytes(keys, left), python_bytes(values, left)):
            try:
                record = parse_input(self.model, key, value)
            except ContractError as error:
                reasons[i] = error.reason
                continue
            for name, column in columns.items():
                column[i] = getattr(record, name)
        return Parsed(columns, reasons, len(decided.undecided))


_CONTRACTS = {model: FastContract(model) for model in (UserEvent, Metric)}


def fast_contract(model: type[UserEvent] | type[Metric]) -> FastContract:
    """The fast path of an input model, derived once at import."""
    return _CONTRACTS[model]
