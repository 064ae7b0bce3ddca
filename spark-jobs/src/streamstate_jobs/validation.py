"""Contract validation of raw Kafka records inside Spark, in one Arrow pass.

Every record is decided by the same contract the producers and the API use: a batch goes
through the contract's fast path (:mod:`streamstate_jobs.contracts_fast`, msgspec decoders derived
from the pydantic models), and only the records it leaves open go through
:func:`streamstate_pipeline.contracts.parse_input`, so a record is good or bad for the same reason
everywhere, at about a microsecond per good record instead of seven. Then the clock-skew
rule (:mod:`streamstate_jobs.rules.event_time`) checks event times against the Kafka
timestamps for the whole batch, so that no single record can move the event-time watermark.
Good records come out as typed columns (the Spark schema derived from the contract); bad
ones keep their source coordinates, raw bytes (as text or base64), the precise reason and
the stage that refused them, ready for the dead-letter topic. Refused records carry no
event time, so they never reach the watermark.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Sequence, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from streamstate_pipeline.contracts import (
    ID_MAX_CHARS,
    DeadLetter,
    Metric,
    UserEvent,
    dead_letter_text,
)
from streamstate_jobs.contracts_fast import FastContract, fast_contract, python_bytes
from streamstate_jobs.kinds import Kind
from streamstate_jobs.rules.dead_letters import coordinates_key
from streamstate_jobs.rules.event_time import STAGE as CLOCK_SKEW, clock_skew_reason
from streamstate.state import Emit, StateResult, StateSpec
from streamstate.state.bucket_function import KEY_COLUMN
from streamstate.state.columns import Columns
from streamstate.state.schema import spark_schema
from streamstate.state.keyrun import INPUT_COLUMNS, TIME
from streamstate.state.operators import map_packed
from streamstate.state.packing import BLOB, BUCKET, LATEST, PACKED_WITH_LATEST_SCHEMA, pack
from streamstate.state.placement import key_buckets

SOURCE_COLUMNS = [
    T.StructField("topic", T.StringType()),
    T.StructField("partition", T.IntegerType()),
    T.StructField("offset", T.LongType()),
    T.StructField("kafka_ts", T.LongType()),
    # The exact Kinesis coordinate (source=kinesis); null for Kafka records.
    T.StructField("sequence_number", T.StringType()),
]
ERROR_COLUMNS = [
    T.StructField("error", T.StringType()),
    T.StructField("error_stage", T.StringType()),
    T.StructField("raw_key", T.StringType()),
    T.StructField("raw_value", T.StringType()),
]


def validated_schema(model: type[UserEvent] | type[Metric]) -> T.StructType:
    contract = spark_schema(model)
    # Bad rows have no contract fields, so every contract column is nullable here.
    fields = [T.StructField(f.name, f.dataType, True) for f in contract.fields]
    return T.StructType(fields + SOURCE_COLUMNS + ERROR_COLUMNS)


def _validator(model: type[UserEvent] | type[Metric], schema: T.StructType, max_clock_skew_ms: int):
    arrow_schema = to_arrow_schema(schema)

    def validate(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # Looked up in the Python worker: the derived msgspec types are built at import there and
        # cannot be pickled into this closure.
        contract = fast_contract(model)
        for batch in batches:
            yield validate_batch(batch, contract, arrow_schema, max_clock_skew_ms)

    return validate


def validate_batch(batch: pa.RecordBatch, contract: FastContract, arrow_schema: pa.Schema, max_clock_skew_ms: int) -> pa.RecordBatch:
    """One Arrow batch of raw records -> the :func:`validated_schema` batch, rows in the same order."""
    n = batch.num_rows
    keys, values = batch.column("key"), batch.column("value")
    parsed = contract.parse(keys, values)
    columns = parsed.columns
    kafka_ts = _kafka_millis(batch.column("timestamp"))
    refused = {i: ("contract", reason) for i, reason in parsed.reasons.items()}
    ts = pa.array(columns["ts"], pa.int64())
    skewed = False
    for i in _too_far_ahead(ts, kafka_ts, max_clock_skew_ms):
        reason = clock_skew_reason(columns["ts"][i], kafka_ts[i].as_py(), max_clock_skew_ms)
        if reason is not None:  # always, as the batch-wide check is the rule's own condition; the rule has the last word
            refused[i], skewed = (CLOCK_SKEW, reason), True
            for column in columns.values():
                column[i] = None
    error, error_stage, raw_key, raw_value = (cast("list[str | None]", [None] * n) for _ in range(4))
    rows = list(refused)
    for i, key, value in zip(rows, python_bytes(keys, rows), python_bytes(values, rows)):
        error_stage[i], error[i] = refused[i]
        raw_key[i], raw_value[i] = dead_letter_text(key), dead_letter_text(value)
    given = {
        **columns,
        "topic": batch.column("topic"),
        "partition": batch.column("partition"),
        "offset": batch.column("offset"),
        "kafka_ts": kafka_ts,
        "sequence_number": batch.column("sequenceNumber") if "sequenceNumber" in batch.schema.names else pa.nulls(n),
        "error": error,
        "error_stage": error_stage,
        "raw_key": raw_key,
        "raw_value": raw_value,
    }
    if not skewed:
        given["ts"] = ts  # the column built for the skew check is final unless a record was refused there
    return pa.RecordBatch.from_arrays([_column(given[f.name], f.type) for f in arrow_schema], schema=arrow_schema)


def _column(data: list | pa.Array, type_: pa.DataType) -> pa.Array:
    if isinstance(data, list):
        return pa.array(data, type=type_)
    return data if data.type == type_ else data.cast(type_)


def _kafka_millis(timestamps: pa.Array) -> pa.Array:
    """Kafka timestamps (microseconds) as epoch milliseconds, floored as ``//`` floors."""
    micros = timestamps.cast(pa.int64())
    millis = np.floor_divide(micros.fill_null(0).to_numpy(), 1000)
    return pa.array(millis, mask=micros.is_null().to_numpy(zero_copy_only=False) if micros.null_count else None)


def _too_far_ahead(ts: pa.Array, kafka_ts: pa.Array, max_clock_skew_ms: int) -> list[int]:
    """The records :func:`clock_skew_reason` refuses (a Kafka timestamp, and ``ts`` further ahead of
    it than allowed), found for the whole batch at once."""
    ahead = pc.greater(pc.subtract(ts, kafka_ts), max_clock_skew_ms)
    judged = pc.and_(ahead, pc.greater_equal(kafka_ts, 0))
    return np.flatnonzero(pc.fill_null(judged, False).to_numpy(zero_copy_only=False)).tolist()


def validate(raw: DataFrame, model: type[UserEvent] | type[Metric], max_clock_skew_ms: int) -> DataFrame:
    """Kafka-schema rows -> contract columns + source coordinates + error (null when valid)."""
    schema = validated_schema(model)
    return _raw_columns(raw).mapInArrow(_validator(model, schema, max_clock_skew_ms), schema)


def _raw_columns(raw: DataFrame) -> DataFrame:
    kinesis = ["sequenceNumber"] if "sequenceNumber" in raw.columns else []
    return raw.select("key", "value", "topic", "partition", "offset", "timestamp", *kinesis)


# Invalid records ride through a job's one stateful operator under this key. It is longer than
# any valid id, so no real key equals it. A separate dead-letter branch unioned with the stateful
# one made Spark scan and validate the topic twice per batch.
INVALID_RECORDS_KEY = "invalid-records:" + "#" * ID_MAX_CHARS
# What an invalid record's dead letter is built from, besides the source coordinates.
DEAD_LETTER_COLUMNS = ("kafka_ts", "error", "error_stage", "raw_key", "raw_value", "sequence_number")


def contract_dead_letter(row: dict[str, Any]) -> Emit:
    """An invalid record as a dead-letter record: a DeadLetter keyed by its coordinates."""
    letter = DeadLetter(
        reason=row["error"],
        stage=row["error_stage"],
        source_topic=row["topic"],
        source_partition=row["partition"],
        source_offset=row["offset"],
        key=row["raw_key"],
        value=row["raw_value"],
        ts=row["kafka_ts"] if row["kafka_ts"] is not None else 0,
        source_sequence_number=row.get("sequence_number"),
    )
    return dead_letter_row(letter)


def dead_letter_row(letter: DeadLetter) -> Emit:
    """A dead letter as a job's record for the dead-letter topic, keyed by its source coordinates."""
    return Emit(Kind.DEAD_LETTER, coordinates_key(letter), letter.model_dump_json())


def map_validated(
    raw: DataFrame,
    model: type[UserEvent] | type[Metric],
    max_clock_skew_ms: int,
    key: str,
    columns: Sequence[str],
    spec: StateSpec,
    watermark_delay_ms: int,
) -> StateResult:
    """``spec`` run per ``key`` over the raw records validated against ``model``, with one
    Python pass over the source.

    That pass validates each Arrow batch (:func:`validate_batch`), lays the rows out for the
    stateful operator (``columns`` and :data:`DEAD_LETTER_COLUMNS` as the value, invalid rows
    under :data:`INVALID_RECORDS_KEY`), computes each key's bucket exactly as Spark's
    ``bucket_of`` does and packs every bucket's rows into one blob. A separate validation step
    in front of :func:`~streamstate.state.map_with_state` cost a second Arrow round trip and
    Python pass per batch. The event-time watermark on ``spec``'s event-time column (one of
    ``columns``, epoch ms) is defined on each blob's latest event time, which gives the same
    watermark as on the rows.
    Valid rows reach ``spec``'s batch (or columnar) function; invalid ones come out of the same
    operator as contract dead letters.
    """
    if spec.per_record:
        raise ValueError("map_validated needs a StateSpec.batch_function or StateSpec.columnar_function")
    if spec.event_time_column is not None and spec.event_time_column not in columns:
        raise ValueError(f"event-time column {spec.event_time_column!r} is not among the columns {list(columns)}")
    layout = RowLayout(key, (*columns, *DEAD_LETTER_COLUMNS), spec.event_time_column, spec.bucket_count, spec.bucket_labels)
    packer = _validating_packer(model, validated_schema(model), max_clock_skew_ms, layout)
    packed = (
        _raw_columns(raw)
        .mapInArrow(packer, PACKED_WITH_LATEST_SCHEMA)
        .withColumn(LATEST, F.timestamp_millis(LATEST))
        .withWatermark(LATEST, f"{watermark_delay_ms} milliseconds")
        .select(BUCKET, BLOB)
    )
    return map_packed(packed, validated_spec(spec), key_type=T.StringType(), ordered_by_offset=True)


@dataclass(frozen=True)
class RowLayout:
    """How validated rows become the stateful operator's rows (``INPUT_COLUMNS``) and buckets."""

    key: str
    value_columns: tuple[str, ...]
    event_time: str | None  # a column of epoch ms; None: the rows have no event time
    bucket_count: int
    bucket_labels: tuple[int, ...] | None

    def lay_out(self, validated: pa.RecordBatch) -> pa.RecordBatch:
        """A :func:`validate_batch` batch as ``INPUT_COLUMNS`` plus each row's ``BUCKET``: what
        Spark's layout and ``bucket_of`` give for the same rows."""
        keys = pc.if_else(pc.is_null(validated.column("error")), validated.column(self.key), INVALID_RECORDS_KEY)
        value = pa.StructArray.from_arrays(
            [keys if name == self.key else validated.column(name) for name in self.value_columns], names=list(self.value_columns)
        )
        columns = [
            keys,
            value,
            pa.nulls(validated.num_rows, pa.int64()) if self.event_time is None else validated.column(self.event_time).cast(pa.int64()),
            validated.column("topic").cast(pa.string()),
            validated.column("partition").cast(pa.int32()),
            validated.column("offset").cast(pa.int64()),
            key_buckets(keys, self.bucket_count, self.bucket_labels),
        ]
        return pa.RecordBatch.from_arrays(columns, names=[*INPUT_COLUMNS, BUCKET])


def _validating_packer(model: type[UserEvent] | type[Metric], schema: T.StructType, max_clock_skew_ms: int, layout: RowLayout):
    validate = _validator(model, schema, max_clock_skew_ms)

    def validate_and_pack(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return pack((layout.lay_out(validated) for validated in validate(batches)), latest_of=INPUT_COLUMNS[TIME])

    return validate_and_pack


def validated_spec(spec: StateSpec) -> StateSpec:
    """``spec`` as :func:`map_validated` runs it: its function (and bucket function) under
    :func:`with_dead_letters`."""
    spec = replace(spec, func=with_dead_letters(spec.func))
    if spec.bucket_func is not None:
        spec = replace(spec, bucket_func=bucket_with_dead_letters(spec.bucket_func))
    return spec


def with_dead_letters(func: Callable[[Any, Any, Any], Any]) -> Callable[[Any, Any, Any], Any]:
    """A job's batch (or columnar) function that also turns the invalid records' group into dead
    letters.

    That group never reads or writes state, so invalid input leaves every key's state unchanged.
    """

    def run(key: Any, rows: list | Columns, state: Any) -> Any:
        if key == INVALID_RECORDS_KEY:
            return [contract_dead_letter(row) for row in (rows.rows() if isinstance(rows, Columns) else rows)]
        return func(key, rows, state)

    return run


def bucket_with_dead_letters(func: Callable[[Any, Any, int], Any]) -> Callable[[Any, Any, int], Any]:
    """A job's bucket function that also turns the invalid records into dead letters; the
    function sees the valid ones only."""

    def run(state: Any, records: pa.Table | None, watermark_ms: int) -> Any:
        letters: list[Emit] = []
        if records is not None:
            invalid = pc.fill_null(pc.equal(records.column(KEY_COLUMN), INVALID_RECORDS_KEY), False)
            if pc.any(invalid).as_py():
                letters = [contract_dead_letter(row) for row in records.filter(invalid).to_pylist()]
                records = records.filter(pc.invert(invalid))
        result = func(state, records, watermark_ms)
        return result._replace(outputs=[*letters, *result.outputs]) if letters else result

    return run


def good_rows(validated: DataFrame) -> DataFrame:
    return validated.filter(F.col("error").isNull()).drop("error", "error_stage", "raw_key", "raw_value")
