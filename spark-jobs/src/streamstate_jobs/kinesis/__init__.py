"""Kinesis Data Streams as a Structured Streaming source, in Python (``streamstate_kinesis``).

Open-source Spark has no Structured Streaming source for Kinesis; this one runs on any Spark
4.1+ with boto3: one Spark partition per shard, per-shard sequence numbers (and a dense
ordinal per shard, the ``offset`` column) checkpointed by Spark, TRIM_HORIZON / LATEST /
AT_TIMESTAMP starts, parents read to their end before their children after a split or a
merge, throttling waited out with backoff, ``maxRecordsPerTrigger``.

    df = read_kinesis(spark, settings, streamName="user-events", startingPosition="TRIM_HORIZON")
"""

from streamstate_jobs.kinesis.connector import read_kinesis
from streamstate_jobs.kinesis.datasource import SHORT_NAME, KinesisDataSource
from streamstate_jobs.kinesis.options import KinesisOptionError, KinesisOptions
from streamstate_jobs.kinesis.arrow_batches import KINESIS_SCHEMA
from streamstate_jobs.kinesis.retry import KinesisSourceError

__all__ = [
    "KINESIS_SCHEMA",
    "SHORT_NAME",
    "KinesisDataSource",
    "KinesisOptionError",
    "KinesisOptions",
    "KinesisSourceError",
    "read_kinesis",
]
