"""``map_with_state`` and ``update_state_by_key`` on Structured Streaming DataFrames.

Both lay the input out as ``INPUT_COLUMNS``, give each row its key's bucket
(``pmod(xxhash64(key), buckets)``), pack each task's rows into one Arrow blob per bucket
(:mod:`streamstate.state.packing`), run :class:`~streamstate.state.processor.BucketProcessor`
under ``groupBy(bucket).transformWithStateInPandas`` and decode its rows (``kind``: output |
snapshot | dead_letter, or the kind of an :class:`~streamstate.state.Emit`; see
:mod:`streamstate.state.kinds`) into the three DataFrames of a :class:`StateResult`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import pyarrow as pa
from pydantic import BaseModel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DataType,
    MapType,
    NumericType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from streamstate.errors import StateError
from streamstate.state.schema import spark_schema
from streamstate.state.buckets import TICK_MS
from streamstate.state.keyrun import DEAD_LETTER, INPUT_COLUMNS, OUTPUT, OUTPUT_SCHEMA, SNAPSHOT, Plan
from streamstate.state.packing import BUCKET, PACKED_SCHEMA, pack
from streamstate.state.processor import BucketProcessor
from streamstate.state.spec import Duration, LateRecords, StateSpec
from streamstate.state.state import StateCodec

SOURCE_COLUMNS = ("topic", "partition", "offset")
OutputSchema = str | StructType | type[BaseModel] | None


@dataclass(frozen=True)
class StateResult:
    """The stateful operator's rows (:attr:`all`: ``kind, key, payload, reason, topic, partition,
    offset``) and their three decoded views. Records a function emits with
    :class:`~streamstate.state.Emit` keep their own kind and key in :attr:`all`.

    Each view of a streaming ``all`` is its own plan: a query per view would run the state
    operator once per query. Run ONE query on :attr:`all` (``writeStream.foreachBatch``) and
    route each batch with :meth:`outputs_of`, :meth:`snapshots_of` and :meth:`dead_letters_of`.
    """

    all: DataFrame
    output_schema: OutputSchema = None
    output_column: str = "output"
    source_columns: bool = False

    @property
    def outputs(self) -> DataFrame:
        """The function's outputs: ``key`` plus ``output`` (JSON) or the typed output columns."""
        return self.outputs_of(self.all)

    def state_snapshots(self) -> DataFrame:
        """``(key, state)`` for each key whose state changed in the batch; ``state`` NULL on removal."""
        return self.snapshots_of(self.all)

    def dead_letters(self) -> DataFrame:
        """``(key, reason, value)`` (+ ``topic, partition, offset`` when the input had them); a
        dead letter the function emitted itself (``Emit("dead_letter", ...)``) has no reason."""
        return self.dead_letters_of(self.all)

    def outputs_of(self, rows: DataFrame) -> DataFrame:
        """The outputs among ``rows`` (a batch of :attr:`all`)."""
        outputs = rows.where(F.col("kind") == OUTPUT)
        if self.output_schema is None:
            return outputs.select("key", F.col("payload").alias(self.output_column))
        schema = spark_schema(self.output_schema) if isinstance(self.output_schema, type) else self.output_schema
        return outputs.select("key", F.from_json("payload", schema).alias("__ss_out")).select("key", "__ss_out.*")

    def snapshots_of(self, rows: DataFrame) -> DataFrame:
        """The state snapshots among ``rows`` (a batch of :attr:`all`)."""
        return rows.where(F.col("kind") == SNAPSHOT).select("key", F.col("payload").alias("state"))

    def dead_letters_of(self, rows: DataFrame) -> DataFrame:
        """The dead letters among ``rows`` (a batch of :attr:`all`)."""
        columns: list[Column | str] = ["key", "reason", F.col("payload").alias("value")]
        if self.source_columns:
            columns += list(SOURCE_COLUMNS)
        return rows.where(F.col("kind") == DEAD_LETTER).select(*columns)


# Spark runs the transformWithState family on its RocksDB state store only; its default store
# fails such a query when it runs (STORE_BACKEND_NOT_SUPPORTED_FOR_TWS), the library before.
PROVIDER_SETTING = "spark.sql.streaming.stateStore.providerClass"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


class StateStoreUnsupported(StateError, ValueError):
    """The session's state store cannot hold the state API's state: the message names the setting."""


def require_rocksdb(spark: SparkSession) -> None:
    """Raise :class:`StateStoreUnsupported` unless the session runs RocksDB state (one conf read;
    on Spark Connect, one round trip)."""
    provider = spark.conf.get(PROVIDER_SETTING, None)
    if provider != ROCKSDB_PROVIDER:
        raise StateStoreUnsupported(
            f"the state API keeps its state in Spark's RocksDB state store, and this session's store is "
            f"{provider or 'the default (HDFS-backed)'}: set {PROVIDER_SETTING}={ROCKSDB_PROVIDER} on the session "
            "(SparkSession.builder.config(...), spark.conf.set(...) before the query starts, or --conf)"
        )


def map_with_state(
    df: DataFrame,
    key: str,
    spec: StateSpec,
    value: str | Sequence[str] | None = None,
    output_schema: OutputSchema = None,
) -> StateResult:
    """Keep per-key state over a streaming ``df`` with ``spec``'s function, like DStream ``mapWithState``.

    ``value`` picks what the function receives per record: one column's value, a dict of the
    named columns, or (default) the whole row as a dict. ``output_schema`` (DDL, StructType or
    pydantic model) types the output columns; by default outputs are one JSON column ``output``.
    """
    return _run(df, key, spec, value, output_schema, "output")


def update_state_by_key(
    df: DataFrame,
    key: str,
    func: Callable[[list, Any], Any],
    value: str | Sequence[str] | None = None,
    num_partitions: int | None = None,
    initial_state: Any = None,
    timeout: Duration | None = None,
    event_time: str | None = None,
    state_type: Any = None,
    late: LateRecords = "process",
    every_batch: bool = True,
) -> StateResult:
    """DStream ``updateStateByKey``: ``func(new_values, old_state) -> new_state | None``.

    As in Spark, every key in state is called in every batch, with empty ``new_values`` when
    it has no data; ``None`` removes the key. The outputs are ``(key, state)``, with ``state`` as
    JSON, for every key that keeps a state: the whole state, every batch. Its cost therefore
    grows with the state, not the input (why mapWithState exists); the query runs a batch at
    every trigger.

    ``every_batch=False`` calls only keys with new data, plus (with ``timeout``) each key idle
    that long, once, with empty ``new_values``: that call ends the key. Then the outputs are
    the states of the keys called. ``event_time`` (ordering records, and the timeout's clock)
    needs ``every_batch=False``.
    """
    spec = StateSpec.updater(func, every_batch=every_batch).initial_state(initial_state)
    if num_partitions is not None:
        spec = spec.num_partitions(num_partitions)
    if timeout is not None:
        spec = spec.timeout(timeout)
    if event_time is not None:
        spec = spec.event_time(event_time, late)
    if state_type is not None:
        spec = spec.state_type(state_type)
    return _run(df, key, spec, value, None, "state")


# --------------------------------------------------------------------------- wiring
def _run(
    df: DataFrame, key: str, spec: StateSpec, value: Any, output_schema: OutputSchema, output_column: str
) -> StateResult:
    if key not in df.columns:
        raise ValueError(f"key column {key!r} is not among the input columns {df.columns}")
    layout = _input_layout(df, key, spec, value)
    if spec.partitions is not None:
        _checked_partitions(df, spec.partitions)  # the bucket shuffle uses that many partitions
    bucketed = layout.withColumn(BUCKET, bucket_of(layout[INPUT_COLUMNS[0]], spec))
    packed = bucketed.mapInArrow(_own_pack(), PACKED_SCHEMA)
    return map_packed(
        packed,
        spec,
        key_type=df.schema[key].dataType,
        ordered_by_offset="offset" in df.columns,
        output_schema=output_schema,
        output_column=output_column,
        source_columns=all(c in df.columns for c in SOURCE_COLUMNS),
    )


def map_packed(
    packed: DataFrame,
    spec: StateSpec,
    key_type: DataType,
    ordered_by_offset: bool,
    output_schema: OutputSchema = None,
    output_column: str = "output",
    source_columns: bool = True,
) -> StateResult:
    """The stateful operator over rows already packed by bucket: ``BUCKET`` and ``BLOB`` columns,
    each blob the ``INPUT_COLUMNS`` rows of keys (of ``key_type``) in that bucket, as
    :func:`~streamstate.state.packing.pack` writes them and as :func:`bucket_of` places them.

    :func:`map_with_state` lays its input out and packs it; a step that computes its rows
    itself (the jobs' validation) packs them in the same Python pass and starts here.
    """
    require_rocksdb(packed.sparkSession)
    initial = None
    if spec.initial is not None:
        keyed = _initial_state(packed.sparkSession, key_type, spec)
        initial = keyed.withColumn(BUCKET, bucket_of(keyed["key"], spec)).groupBy(BUCKET)
    rows = packed.groupBy(BUCKET).transformWithStateInPandas(
        statefulProcessor=bucket_processor(spec, ordered_by_offset),
        outputStructType=OUTPUT_SCHEMA,
        outputMode="Append",
        timeMode=_time_mode(spec),
        initialState=initial,
    )
    return StateResult(all=rows, output_schema=output_schema, output_column=output_column, source_columns=source_columns)


def bucket_processor(spec: StateSpec, ordered_by_offset: bool) -> BucketProcessor:
    """The processor :func:`map_packed` runs for ``spec``: each bucket's share of the hot keys."""
    hot_capacity = -(-spec.hot_key_capacity // spec.bucket_count)
    return BucketProcessor(Plan.of(spec, ordered_by_offset), _time_mode(spec), hot_capacity, TICK_MS)


def _own_pack() -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """``pack`` as a function of this operator alone.

    Two operators over the same rows would otherwise plan the same packing step, and Spark
    then reuses one shuffle for both (exchange reuse). On Spark 4.2 the second operator's
    event-time timers no longer fire in no-data batches then: its windows close a batch late.
    A closure over a token of its own makes each operator's step, and so its shuffle, distinct.
    """
    token = uuid.uuid4().hex

    def pack_for_this_operator(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        assert token  # captured: the token is what makes this function's pickled form unique
        return pack(batches)

    return pack_for_this_operator


def bucket_of(key: Column, spec: StateSpec) -> Column:
    """The label of a key's bucket: fixed for the life of a checkpoint (it is where the key's state lives)."""
    number = F.pmod(F.xxhash64(key), F.lit(spec.bucket_count)).cast("int")
    if spec.bucket_labels is None:
        return number
    return F.element_at(F.array(*[F.lit(label) for label in spec.bucket_labels]), number + 1)


def _time_mode(spec: StateSpec) -> str:
    # Spark runs a (no-data) batch at every trigger in ProcessingTime mode, so that mode is
    # chosen only when a processing-time timeout, the function's own timers or every-batch calls need it.
    if spec.event_time_column is not None:
        return "EventTime"
    return "ProcessingTime" if spec.timeout_ms is not None or spec.every_batch or spec.processing_timers else "None"


def _input_layout(df: DataFrame, key: str, spec: StateSpec, value: Any) -> DataFrame:
    if value is None:
        value_col = F.struct(*[df[c] for c in df.columns])
    elif isinstance(value, str):
        value_col = df[value]
    else:
        value_col = F.struct(*[df[c] for c in value])
    columns: list[Column] = [df[key], value_col, event_time_ms(df, spec.event_time_column)]
    columns += [
        (df[name] if name in df.columns else F.lit(None)).cast(cast)
        for name, cast in zip(SOURCE_COLUMNS, ("string", "int", "long"))
    ]
    return df.select(*[c.alias(name) for c, name in zip(columns, INPUT_COLUMNS)])


def event_time_ms(df: DataFrame, column: str | None) -> Column:
    """A timestamp or epoch-ms column as epoch ms (NULL without one), for the state engine."""
    if column is None:
        return F.lit(None).cast("long")
    if column not in df.columns:
        raise ValueError(f"event-time column {column!r} is not among the input columns {df.columns}")
    data_type = df.schema[column].dataType
    if isinstance(data_type, (TimestampType, TimestampNTZType)):
        # A derived column carries no watermark metadata, so Spark does not silently drop late
        # rows before the function sees them; the spec's `late` option decides instead.
        return F.unix_millis(df[column])
    if isinstance(data_type, NumericType):
        return df[column].cast("long")
    raise ValueError(f"event-time column {column!r} must be a timestamp or epoch milliseconds, not {data_type.simpleString()}")


def _checked_partitions(df: DataFrame, partitions: int) -> int:
    configured = int(df.sparkSession.conf.get("spark.sql.shuffle.partitions") or 0)
    if partitions != configured:
        raise ValueError(
            f"num_partitions({partitions}) differs from spark.sql.shuffle.partitions={configured}: Structured "
            "Streaming fixes a stateful operator's partition count to that setting when the query first starts; "
            "set STREAMSTATE_SHUFFLE_PARTITIONS (Settings.shuffle_partitions) instead"
        )
    return partitions


def _initial_state(spark: SparkSession, key_type: DataType, spec: StateSpec) -> DataFrame:
    codec = StateCodec(spec.state_cls)
    if isinstance(spec.initial, DataFrame):
        initial = spec.initial
        key_name, state_name = ("key", "state") if {"key", "state"} <= set(initial.columns) else initial.columns[:2]
        state_type = initial.schema[state_name].dataType
        if isinstance(state_type, StringType):
            state = initial[state_name]
        elif isinstance(state_type, (StructType, MapType, ArrayType)):
            state = F.to_json(initial[state_name])
        else:
            state = initial[state_name].cast("string")
        return initial.select(initial[key_name].cast(key_type).alias("key"), state.alias("state"))
    pairs = [(k, codec.to_json(s)) for k, s in spec.initial]
    schema = StructType([StructField("key", key_type), StructField("state", StringType())])
    return spark.createDataFrame(pairs, schema)
