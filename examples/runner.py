"""What every example program shares: reading a JSON topic as a DataFrame and printing results."""

from __future__ import annotations

import argparse
from typing import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streamstate.jobs.kafka import read_kafka
from streamstate.jobs.spark import build_spark
from streamstate.state import StateResult
from streamstate.settings import Settings

EVENT_TIME = "event_time"


def read_json_topic(
    spark: SparkSession,
    settings: Settings,
    topic: str,
    schema: str,
    event_time_ms: str | None = None,
    watermark_delay: str = "0 seconds",
    records_per_batch: int | None = None,
) -> DataFrame:
    """The topic's JSON values parsed with ``schema`` (DDL), plus topic/partition/offset.

    With ``event_time_ms`` (an epoch-ms field) it adds an ``event_time`` timestamp column
    carrying a watermark ``watermark_delay`` behind the newest event. ``records_per_batch``
    caps each micro-batch (Kafka's ``maxOffsetsPerTrigger``).
    """
    raw = read_kafka(spark, settings, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger=records_per_batch)
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


def main_for(description: str, build: Callable[[SparkSession, Settings, str], StateResult]) -> None:
    """Command line of an example: ``--topic T``; runs until interrupted."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--topic", required=True, help="Kafka topic to read (JSON values)")
    parser.add_argument("--checkpoint", default=None, help="checkpoint directory (default: under the settings root)")
    args = parser.parse_args()
    settings = Settings()
    spark = build_spark(settings, app_name=parser.prog)
    result = build(spark, settings, args.topic)
    query = (
        result.all.writeStream.foreachBatch(print_batch(result))
        .option("checkpointLocation", args.checkpoint or settings.checkpoint(f"example-{parser.prog}"))
        .trigger(processingTime=settings.trigger_interval)
        .start()
    )
    query.awaitTermination()
