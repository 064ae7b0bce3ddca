"""The DStream window family on Structured Streaming DataFrames: ``window``, ``count_by_window``,
``reduce_by_window``, ``reduce_by_key_and_window`` and ``count_by_value_and_window``.

Each is a :class:`~streamstate.state.windows.WindowOp` run by the state engine exactly as
``map_with_state`` runs a spec: the input is laid out as ``(key, {"t": event time ms, "v":
value})`` rows, so checkpoints, dead letters, typed state and the in-memory tester
(:mod:`streamstate.state.window_tester`) are the engine's. The :class:`WindowResult` decodes
the outputs into typed columns, with ``window`` a ``struct<start, end>`` of timestamps as
Spark's ``window()`` gives it.

``event_time`` names a timestamp (or epoch-ms) column whose watermark the input declares
(``df.withWatermark(column, delay)``): windows close when the watermark passes their end,
and records at or behind the watermark are dead-lettered. Without it, windows are of
processing time: each record is at its batch's time, as DStream's batches were.
``output_mode`` is the operation's own: ``"append"`` emits each window once, when it closes;
``"update"`` emits every window a batch changed, with its value so far. The query itself is
written in Spark's append mode either way (the rows are the operator's outputs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, DataType, NumericType, StringType, StructType

from streamstate.state.keyrun import OUTPUT
from streamstate.state.operators import SOURCE_COLUMNS, StateResult, event_time_ms, map_with_state
from streamstate.state.spec import Duration
from streamstate.state.windows import GLOBAL_KEY, TIME, VALUE, OutputMode, WindowOp, window_spec

WINDOW_KEY, WINDOW_VALUE = "__ss_window_key", "__ss_window_value"
Reduce = Callable[[Any, Any], Any]


@dataclass(frozen=True)
class WindowResult(StateResult):
    """A window operation's rows (:attr:`all`) and its outputs as columns: ``key_name`` (none for
    the operations without a key), ``window`` (``start``, ``end`` timestamps), then ``value_name``
    of type ``value_type`` (DDL), or, for ``window``, the record's own columns (``records``).
    Dead letters and state snapshots are :class:`StateResult`'s."""

    key_name: str | None = None
    key_type: DataType | None = None
    value_name: str = "value"
    value_type: str = "STRING"
    records: StructType | None = None

    def outputs_of(self, rows: DataFrame) -> DataFrame:
        value_type = "STRING" if self.records is not None else self.value_type
        window = F.from_json("payload", f"start LONG, `end` LONG, value {value_type}").alias("__ss_w")
        parsed = rows.where(F.col("kind") == OUTPUT).select("key", window)
        columns: list[Column] = []
        if self.key_name is not None:
            columns.append(_key_column(self.key_type).alias(self.key_name))
        columns.append(
            F.struct(F.timestamp_millis("__ss_w.start").alias("start"), F.timestamp_millis("__ss_w.end").alias("end")).alias("window")
        )
        if self.records is None:
            return parsed.select(*columns, F.col("__ss_w.value").alias(self.value_name))
        record = F.from_json("__ss_w.value", self.records).alias("__ss_r")
        return parsed.select(*columns, record).select(*[c for c in (self.key_name, "window") if c], "__ss_r.*")


def _key_column(key_type: DataType | None) -> Column:
    # The engine keys rows by text (JSON for non-strings): plain types get their own type back.
    if isinstance(key_type, (NumericType, BooleanType)):
        return F.col("key").cast(key_type)
    return F.col("key")


def window(
    df: DataFrame, window_length: Duration, slide_interval: Duration | None = None, *,
    event_time: str | None = None, output_mode: OutputMode = "append",
) -> WindowResult:
    """DStream ``window(windowLength, slideInterval)``: every record of each window, with it.

    Append: a window's records once it closes (held in state until then). Update: each record
    with each window it falls in, as it arrives (no state: nothing about a record changes later).
    """
    op = WindowOp.window(window_length, slide_interval, event_time=event_time is not None, output_mode=output_mode)
    record = F.to_json(F.struct(*[df[c] for c in df.columns]))
    return _run(df, op, F.lit(GLOBAL_KEY), record, event_time, records=df.schema)


def count_by_window(
    df: DataFrame, window_duration: Duration, slide_duration: Duration | None = None, *,
    event_time: str | None = None, output_mode: OutputMode = "append",
) -> WindowResult:
    """DStream ``countByWindow``: how many records each window holds (column ``count``)."""
    op = WindowOp.count_by_window(window_duration, slide_duration, event_time=event_time is not None, output_mode=output_mode)
    return _run(df, op, F.lit(GLOBAL_KEY), F.lit(1), event_time, value_name="count", value_type="LONG")


def reduce_by_window(
    df: DataFrame, value: str, func: Reduce, inv_func: Reduce | None, window_duration: Duration,
    slide_duration: Duration | None = None, *, event_time: str | None = None, output_mode: OutputMode = "append",
    value_type: str | None = None, state_type: Any = None,
) -> WindowResult:
    """DStream ``reduceByWindow(func, invFunc, windowDuration, slideDuration)``: the ``value``
    column of each window's records reduced with ``func`` (associative and commutative, as in
    Spark); with ``inv_func`` (``func``'s inverse) each slide is incremental. ``value_type``
    (DDL) types the result: by default the value column's type."""
    op = WindowOp.reduce_by_window(
        func, inv_func, window_duration, slide_duration, event_time=event_time is not None, output_mode=output_mode,
        state_type=state_type,
    )
    return _run(df, op, F.lit(GLOBAL_KEY), df[value], event_time, value_type=value_type or _ddl(df, value))


def reduce_by_key_and_window(
    df: DataFrame, key: str, value: str, func: Reduce, inv_func: Reduce | None, window_duration: Duration,
    slide_duration: Duration | None = None, filter_func: Callable[[Any, Any], bool] | None = None, *,
    event_time: str | None = None, output_mode: OutputMode = "append", value_type: str | None = None, state_type: Any = None,
) -> WindowResult:
    """DStream ``reduceByKeyAndWindow(func, invFunc, windowDuration, slideDuration, filterFunc=)``:
    per ``key`` and window, the ``value`` column reduced with ``func``. With ``inv_func`` a key
    keeps its next window's running value and each slide adds the panes that entered and
    subtracts those that left. A key whose window is empty emits nothing and, once it holds
    no data, is dropped; ``filter_func(key, value)`` returning False drops a window's output."""
    if key not in df.columns:
        raise ValueError(f"key column {key!r} is not among the input columns {df.columns}")
    op = WindowOp.reduce_by_key_and_window(
        func, inv_func, window_duration, slide_duration, filter_func, event_time=event_time is not None,
        output_mode=output_mode, state_type=state_type,
    )
    return _run(
        df, op, df[key], df[value], event_time, key_name=key, key_type=df.schema[key].dataType,
        value_type=value_type or _ddl(df, value),
    )


def count_by_value_and_window(
    df: DataFrame, value: str, window_duration: Duration, slide_duration: Duration | None = None, *,
    event_time: str | None = None, output_mode: OutputMode = "append",
) -> WindowResult:
    """DStream ``countByValueAndWindow``: how often each ``value`` occurs in each window
    (columns ``value``'s name, ``window``, ``count``)."""
    op = WindowOp.count_by_value_and_window(window_duration, slide_duration, event_time=event_time is not None, output_mode=output_mode)
    return _run(
        df, op, df[value], F.lit(1), event_time, key_name=value, key_type=df.schema[value].dataType,
        value_name="count", value_type="LONG",
    )


def _ddl(df: DataFrame, column: str) -> str:
    if column not in df.columns:
        raise ValueError(f"value column {column!r} is not among the input columns {df.columns}")
    return df.schema[column].dataType.simpleString()


def _run(
    df: DataFrame, op: WindowOp, key: Column, value: Column, event_time: str | None, *, key_name: str | None = None,
    key_type: DataType | None = None, value_name: str = "value", value_type: str = "STRING", records: StructType | None = None,
) -> WindowResult:
    """``op`` over ``df`` on the state engine, its records laid out as ``(key, {"t", "v"})``."""
    time = event_time_ms(df, event_time).alias(TIME)
    columns: list[Column] = [key.alias(WINDOW_KEY), F.struct(time, value.alias(VALUE)).alias(WINDOW_VALUE)]
    columns += [df[c] for c in (event_time, *SOURCE_COLUMNS) if c is not None and c in df.columns]
    result = map_with_state(df.select(*columns), key=WINDOW_KEY, spec=window_spec(op, event_time), value=WINDOW_VALUE)
    return WindowResult(
        all=result.all, source_columns=result.source_columns, key_name=key_name,
        key_type=key_type if isinstance(key_type, (NumericType, BooleanType, StringType)) else None,
        value_name=value_name, value_type=value_type, records=records,
    )
