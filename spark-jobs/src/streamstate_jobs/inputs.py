"""The jobs' input, from Kafka or Kinesis by ``Settings.source``, in one shape.

Both jobs read one input (``user-events`` or ``metrics``) and validate it by the Kafka
source's columns. With ``source=kinesis`` the stream of the same name is read from its
beginning (TRIM_HORIZON, as ``earliest`` on Kafka) and mapped onto those columns: ``topic`` is
the stream, ``partition`` the shard's number, ``offset`` the record's dense ordinal in its
shard, ``timestamp`` its approximate arrival time (``timestampType`` 1, log-append time); the
exact ``sequenceNumber`` rides along into dead letters. Outputs stay on Kafka either way.

A batch reads its input in at most one task per core, or per state partition where the query
has more of those (``Settings.source_tasks`` sets it): Spark plans a task per topic partition
(or shard), and each task pays the same fixed cost whatever its records (its start, the Python
worker's Arrow exchange, its shuffle files), so a topic of four partitions on two cores read in
two waves cost a latency batch 150 ms more (docs/profile.md). Coalescing joins whole partitions
in one task, in order, with no shuffle. The state partitions count because on a cluster they are
sized for its executors (docs/cluster.md), where the cores Spark reports at a query's start
miss executors that register later.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streamstate_jobs.kafka import read_kafka
from streamstate_jobs.kinesis import read_kinesis
from streamstate_pipeline.settings import Settings

LOG_APPEND_TIME = 1  # Kafka's timestampType for a broker-assigned time, like Kinesis' arrival time


def read_input(spark: SparkSession, settings: Settings, topic: str, state_partitions: int | None = None) -> DataFrame:
    """The input ``topic`` (a Kafka topic, or the Kinesis stream of that name) from its beginning,
    in at most :func:`read_tasks` tasks a batch (``state_partitions``: the reading query's)."""
    if settings.source == "kinesis":
        records = kinesis_as_kafka_columns(read_kinesis(spark, settings, streamName=topic, startingPosition="TRIM_HORIZON"))
    else:
        records = read_kafka(spark, settings, subscribe=topic, startingOffsets="earliest")
    return records.coalesce(read_tasks(spark, settings, state_partitions))


def read_tasks(spark: SparkSession, settings: Settings, state_partitions: int | None = None) -> int:
    """``settings.source_tasks``, else Spark's cores or the query's state partitions, the larger."""
    return settings.source_tasks or max(spark.sparkContext.defaultParallelism, state_partitions or 0)


def kinesis_as_kafka_columns(df: DataFrame) -> DataFrame:
    return df.select(
        "key",
        "value",
        F.col("stream").alias("topic"),
        "partition",
        "offset",
        F.col("approximateArrivalTimestamp").alias("timestamp"),
        F.lit(LOG_APPEND_TIME).alias("timestampType"),
        "sequenceNumber",
    )
