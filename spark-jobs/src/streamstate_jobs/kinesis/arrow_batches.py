"""The Kinesis source's output schema and GetRecords records -> Arrow record batches.

Where a Kafka column applies it keeps the Kafka source's name and type (``key``, ``value``,
``partition``, ``offset``); the Kinesis coordinates are added under their Kinesis names.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType, TimestampType

KINESIS_SCHEMA = StructType(
    [
        StructField("key", BinaryType(), True),  # the partition key, UTF-8
        StructField("value", BinaryType(), True),  # the data blob
        StructField("stream", StringType(), True),
        StructField("shardId", StringType(), True),
        StructField("sequenceNumber", StringType(), True),  # exact, up to 128 bits as decimal text
        StructField("approximateArrivalTimestamp", TimestampType(), True),
        StructField("partition", IntegerType(), True),  # the shard's number: shardId-000000000012 -> 12
        StructField("offset", LongType(), True),  # dense ordinal of the record in its shard, from 0
    ]
)
ARROW_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("stream", pa.string()),
        pa.field("shardId", pa.string()),
        pa.field("sequenceNumber", pa.string()),
        pa.field("approximateArrivalTimestamp", pa.timestamp("us", tz="UTC")),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
    ]
)


def to_record_batch(records: Sequence[dict], stream: str, shard_id: str, partition: int, first_ordinal: int) -> pa.RecordBatch:
    """One Arrow batch from GetRecords records of one shard, the first with ordinal ``first_ordinal``."""
    count = len(records)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([r["PartitionKey"].encode("utf-8") for r in records], pa.binary()),
            pa.array([bytes(r["Data"]) for r in records], pa.binary()),
            pa.array([stream] * count, pa.string()),
            pa.array([shard_id] * count, pa.string()),
            pa.array([r["SequenceNumber"] for r in records], pa.string()),
            pa.array([r.get("ApproximateArrivalTimestamp") for r in records], pa.timestamp("us", tz="UTC")),
            pa.array([partition] * count, pa.int32()),
            pa.array(range(first_ordinal, first_ordinal + count), pa.int64()),
        ],
        schema=ARROW_SCHEMA,
    )
