"""A pydantic model's Spark schema, derived from its field annotations, never written twice.

Typed outputs and typed state (``StateSpec.output_schema``, ``state_type``) are pydantic models;
Spark needs their StructType. Integers are LONG, numbers that may be int or float DOUBLE,
``Literal`` its value's type, nested models structs, lists arrays, dicts maps; a field is
nullable when optional or not required.
"""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel


def spark_type(annotation: Any):
    """The Spark SQL type of a model field annotation."""
    from pyspark.sql import types as T

    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Annotated:
        return spark_type(args[0])
    if origin in (Union, types.UnionType):
        non_null = [a for a in args if a is not type(None)]
        if all(_base(a) in (int, float) for a in non_null) and float in {_base(a) for a in non_null}:
            return T.DoubleType()
        return spark_type(non_null[0])
    if origin is Literal:
        return spark_type(type(args[0]))
    if origin is dict:
        return T.MapType(spark_type(args[0]), spark_type(args[1]), True)
    if origin is list:
        return T.ArrayType(spark_type(args[0]), True)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return spark_schema(annotation)
    base = _base(annotation)
    simple = {str: T.StringType(), int: T.LongType(), float: T.DoubleType(), bool: T.BooleanType()}
    if base in simple:
        return simple[base]
    raise TypeError(f"no Spark type for {annotation!r}")


def _base(annotation: Any) -> Any:
    if typing.get_origin(annotation) is Annotated:
        return _base(typing.get_args(annotation)[0])
    for base in (bool, int, float, str):
        if isinstance(annotation, type) and issubclass(annotation, base):
            return base
    return annotation


def _nullable(annotation: Any, required: bool) -> bool:
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _nullable(typing.get_args(annotation)[0], required)
    return not required or (origin in (Union, types.UnionType) and type(None) in typing.get_args(annotation))


def spark_schema(model: type[BaseModel]):
    """The Spark StructType of a model, derived from its field annotations."""
    from pyspark.sql import types as T

    return T.StructType(
        [
            T.StructField(name, spark_type(field.annotation), _nullable(field.annotation, field.is_required()))
            for name, field in model.model_fields.items()
        ]
    )
