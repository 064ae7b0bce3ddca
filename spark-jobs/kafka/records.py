"""The source's output schema and Kafka messages -> Arrow record batches."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Message
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

# Spark's built-in Kafka source schema (without headers), column for column.
KAFKA_SCHEMA = StructType(
    [
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("timestamp", TimestampType(), True),
        StructField("timestampType", IntegerType(), True),
    ]
)
ARROW_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
)
# Kafka's TimestampType ids as Spark reports them: 0 CreateTime, 1 LogAppendTime, -1 none.
_SPARK_TIMESTAMP_TYPE = {TIMESTAMP_CREATE_TIME: 0, TIMESTAMP_LOG_APPEND_TIME: 1}


def to_record_batch(messages: Sequence[Message], topic: str, partition: int) -> pa.RecordBatch:
    """One Arrow batch of KAFKA_SCHEMA from messages of one topic-partition."""
    stamps = [m.timestamp() for m in messages]
    count = len(messages)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([m.key() for m in messages], pa.binary()),
            pa.array([m.value() for m in messages], pa.binary()),
            pa.array([topic] * count, pa.string()),
            pa.array([partition] * count, pa.int32()),
            pa.array([m.offset() for m in messages], pa.int64()),
            pa.array([ms * 1000 if kind in _SPARK_TIMESTAMP_TYPE else None for kind, ms in stamps], pa.timestamp("us", tz="UTC")),
            pa.array([_SPARK_TIMESTAMP_TYPE.get(kind, -1) for kind, _ in stamps], pa.int32()),
        ],
        schema=ARROW_SCHEMA,
    )
