"""What every example program shares: reading a JSON topic as a DataFrame and printing results.

Standalone, as Spark's own examples are: pyspark and the state library, nothing of the
pipeline. Spark's Kafka connector comes from Maven (``spark.jars.packages``) unless ``--jars``
names it (``--jars "$(ls .deps/spark-jars-*/*.jar | paste -sd,)"`` after ``make deps``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Callable

import pyspark

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streamstate.spark_python import worker_python
from streamstate.state import StateResult

EVENT_TIME = "event_time"
# The state API runs on Spark's RocksDB state store (its default store refuses transformWithState).
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def read_json_topic(
    spark: SparkSession,
    bootstrap_servers: str,
    topic: str,
    schema: str,
    event_time_ms: str | None = None,
    watermark_delay: str = "0 seconds",
    records_per_batch: int | None = None,
    **kafka_options: str,
) -> DataFrame:
    """The topic's JSON values parsed with ``schema`` (DDL), plus topic/partition/offset.

    With ``event_time_ms`` (an epoch-ms field) it adds an ``event_time`` timestamp column
    carrying a watermark ``watermark_delay`` behind the newest event. ``records_per_batch``
    caps each micro-batch (Kafka's ``maxOffsetsPerTrigger``). ``kafka_options`` go to Spark's
    Kafka source as they are (``**{"kafka.security.protocol": "SASL_SSL"}``).
    """
    if not isinstance(bootstrap_servers, str):
        raise TypeError(f"bootstrap_servers is the brokers' host:port list as text, got {type(bootstrap_servers).__name__}")
    options = {"kafka.bootstrap.servers": bootstrap_servers, "subscribe": topic, "startingOffsets": "earliest", **kafka_options}
    if records_per_batch is not None:
        options["maxOffsetsPerTrigger"] = str(records_per_batch)
    raw = spark.readStream.format("kafka").options(**options).load()
    parsed = raw.select(
        F.from_json(F.col("value").cast("string"), schema).alias("record"), "topic", "partition", "offset"
    ).select("record.*", "topic", "partition", "offset")
    if event_time_ms is None:
        return parsed
    return parsed.withColumn(EVENT_TIME, F.timestamp_millis(event_time_ms)).withWatermark(
        EVENT_TIME, watermark_delay
    )


def print_batch(result: StateResult) -> Callable[[DataFrame, int], None]:
    """A foreachBatch function printing a batch's outputs, snapshots and dead letters."""

    def show(rows: DataFrame, batch_id: int) -> None:
        rows.persist()
        print(f"--- batch {batch_id}")
        result.outputs_of(rows).show(truncate=False)
        result.snapshots_of(rows).show(truncate=False)
        result.dead_letters_of(rows).show(truncate=False)
        rows.unpersist()

    return show


def main_for(description: str, build: Callable[[SparkSession, str, str], StateResult]) -> None:
    """Command line of an example: ``--topic T [--bootstrap-servers B] [--checkpoint DIR]``;
    runs until interrupted."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--topic", required=True, help="Kafka topic to read (JSON values)")
    parser.add_argument("--bootstrap-servers", default="127.0.0.1:9092", help="Kafka bootstrap servers (default: %(default)s)")
    parser.add_argument("--checkpoint", default=None, help="checkpoint directory (default: a new temporary directory)")
    parser.add_argument("--trigger", default="2 seconds", help="processing-time trigger interval (default: %(default)s)")
    parser.add_argument("--jars", default=None, help="Spark's Kafka connector and its dependencies as jar paths, comma-separated "
                        "(default: resolved from Maven through spark.jars.packages)")
    args = parser.parse_args()
    # Python workers through the library's launcher (library/README.md, "Session configuration").
    os.environ.setdefault("PYSPARK_PYTHON", worker_python(sys.executable))
    builder = SparkSession.builder.appName(parser.prog).config("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
    if args.jars:
        builder = builder.config("spark.jars", args.jars)
    else:
        builder = builder.config("spark.jars.packages", f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}")
    spark = builder.getOrCreate()
    result = build(spark, args.bootstrap_servers, args.topic)
    query = (
        result.all.writeStream.foreachBatch(print_batch(result))
        .option("checkpointLocation", args.checkpoint or tempfile.mkdtemp(prefix=f"{parser.prog}-"))
        .trigger(processingTime=args.trigger)
        .start()
    )
    query.awaitTermination()
