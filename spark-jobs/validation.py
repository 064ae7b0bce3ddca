"""Contract validation of raw Kafka records inside Spark, in one Arrow pass.

Every record is checked by the same pydantic contract the producers and the API use
(:func:`streamstate.contracts.parse_input`), so a record is good or bad for the same
reason everywhere, and then by the clock-skew rule (:mod:`streamstate.jobs.rules.event_time`)
against its Kafka timestamp, so that no single record can move the event-time watermark.
Good records come out as typed columns (the Spark schema derived from the contract); bad
ones keep their source coordinates, raw bytes (as text or base64), the precise reason and
the stage that refused them, ready for the dead-letter topic. Refused records carry no
event time, so they never reach the watermark.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Iterator, Sequence

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from streamstate.contracts import (
    ID_MAX_CHARS,
    ContractError,
    DeadLetter,
    Metric,
    UserEvent,
    dead_letter_text,
    parse_input,
    spark_schema,
)
from streamstate.jobs.rules.dead_letters import coordinates_key
from streamstate.jobs.rules.event_time import STAGE as CLOCK_SKEW, clock_skew_reason
from streamstate.jobs.state import StateResult, StateSpec, map_with_state

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
    names = [f.name for f in spark_schema(model).fields]
    arrow_schema = to_arrow_schema(schema)

    def validate(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            columns: dict[str, list] = {f.name: [] for f in schema.fields}
            keys = batch.column("key").to_pylist()
            values = batch.column("value").to_pylist()
            timestamps = batch.column("timestamp").cast(pa.int64()).to_pylist()  # microseconds
            columns["topic"] = batch.column("topic").to_pylist()
            columns["partition"] = batch.column("partition").to_pylist()
            columns["offset"] = batch.column("offset").to_pylist()
            columns["kafka_ts"] = [None if t is None else t // 1000 for t in timestamps]
            columns["sequence_number"] = batch.column("sequenceNumber").to_pylist() if "sequenceNumber" in batch.schema.names else [None] * batch.num_rows
            for key, value, kafka_ts in zip(keys, values, columns["kafka_ts"]):
                try:
                    record = parse_input(model, key, value)
                    stage, reason = CLOCK_SKEW, clock_skew_reason(record.ts, kafka_ts, max_clock_skew_ms)
                except ContractError as exc:
                    stage, reason = "contract", exc.reason
                if reason is not None:
                    for name in names:
                        columns[name].append(None)
                    columns["error"].append(reason)
                    columns["error_stage"].append(stage)
                    columns["raw_key"].append(dead_letter_text(key))
                    columns["raw_value"].append(dead_letter_text(value))
                    continue
                for name in names:
                    columns[name].append(getattr(record, name))
                columns["error"].append(None)
                columns["error_stage"].append(None)
                columns["raw_key"].append(None)
                columns["raw_value"].append(None)
            # pa.array casts ints to float64 where the contract says number.
            yield pa.RecordBatch.from_arrays(
                [pa.array(columns[f.name], type=arrow_schema.field(f.name).type) for f in schema.fields],
                schema=arrow_schema,
            )

    return validate


def validate(raw: DataFrame, model: type[UserEvent] | type[Metric], max_clock_skew_ms: int) -> DataFrame:
    """Kafka-schema rows -> contract columns + source coordinates + error (null when valid)."""
    schema = validated_schema(model)
    kinesis = ["sequenceNumber"] if "sequenceNumber" in raw.columns else []
    return raw.select("key", "value", "topic", "partition", "offset", "timestamp", *kinesis).mapInArrow(
        _validator(model, schema, max_clock_skew_ms), schema
    )


# Invalid records ride through a job's one stateful operator under this key. It is longer than
# any valid id, so no real key equals it. A separate dead-letter branch unioned with the stateful
# one made Spark scan and validate the topic twice per batch.
INVALID_RECORDS_KEY = "invalid-records:" + "#" * ID_MAX_CHARS
# What an invalid record's dead letter is built from, besides the source coordinates.
DEAD_LETTER_COLUMNS = ("kafka_ts", "error", "error_stage", "raw_key", "raw_value", "sequence_number")


def keyed_with_invalid(validated: DataFrame, key: str) -> DataFrame:
    """Every validated row, the invalid ones keyed by :data:`INVALID_RECORDS_KEY` instead of ``key``."""
    return validated.withColumn(
        key, F.when(F.col("error").isNull(), F.col(key)).otherwise(F.lit(INVALID_RECORDS_KEY))
    )


def contract_dead_letter(row: dict[str, Any]) -> dict[str, str]:
    """An invalid record as a (kind, key, payload) output row: a DeadLetter keyed by its coordinates."""
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


def dead_letter_row(letter: DeadLetter) -> dict[str, str]:
    """A dead letter as a job's (kind, key, payload) output row, keyed by its source coordinates."""
    return {"kind": "dead_letter", "key": coordinates_key(letter), "payload": letter.model_dump_json()}


def map_validated(validated: DataFrame, key: str, columns: Sequence[str], spec: StateSpec, watermark_delay_ms: int) -> StateResult:
    """``map_with_state`` over every row of :func:`validate`, in one pass of the source.

    Valid rows reach ``spec``'s batch function by ``key`` with ``columns``, under an event-time
    watermark on ``ts``; invalid rows come out of the same operator as contract dead letters.
    """
    if spec.per_record:
        raise ValueError("map_validated needs a StateSpec.batch_function")
    rows = (
        keyed_with_invalid(validated, key)
        .withColumn("event_time", F.timestamp_millis("ts"))
        .withWatermark("event_time", f"{watermark_delay_ms} milliseconds")
    )
    return map_with_state(
        rows.select(*columns, *DEAD_LETTER_COLUMNS), key=key, spec=replace(spec, func=with_dead_letters(spec.func))
    )


def with_dead_letters(func: Callable[[Any, list, Any], Any]) -> Callable[[Any, list, Any], Any]:
    """A job's batch function that also turns the invalid records' group into dead letters.

    That group never reads or writes state, so invalid input leaves every key's state unchanged.
    """

    def run(key: Any, rows: list, state: Any) -> Any:
        if key == INVALID_RECORDS_KEY:
            return [contract_dead_letter(row) for row in rows]
        return func(key, rows, state)

    return run


def good_rows(validated: DataFrame) -> DataFrame:
    return validated.filter(F.col("error").isNull()).drop("error", "error_stage", "raw_key", "raw_value")
