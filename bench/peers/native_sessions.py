"""Spark's native sessionization, the in-engine peer of the sessions job.

Same source (``read_kafka``: Spark's built-in Kafka connector on the same topic), same parse target (the
``UserEvent`` contract's Spark schema, via ``from_json``), same 30-minute event-time gap and
watermark, ``groupBy(user_id, session_window(...))`` with the session's figures, written to
Kafka by the same router (:func:`~streamstate_jobs.routing.routed`, a ``noop`` sink). What it does not do, and the sessions job does:
end a session on ``logout`` (``session_window`` has no such rule), de-duplicate by
``event_id``, send malformed records to dead letters, raise alerts, publish state snapshots.
Output mode ``complete`` (session windows support no ``update``): an ``availableNow`` run
with no ``maxOffsetsPerTrigger`` is one batch, and in ``append`` mode no session would be final within it.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from streamstate_pipeline.contracts import UserEvent
from streamstate.state.schema import spark_schema
from streamstate_jobs.sessions import job as sessions_job
from streamstate_jobs.kafka import read_kafka
from streamstate_jobs.routing import routed
from streamstate_pipeline.settings import Settings


def build(spark: SparkSession, settings: Settings) -> DataFrame:
    """(kind, key, payload) rows: one ``session`` row per session."""
    raw = read_kafka(spark, settings, subscribe=settings.topic_user_events, startingOffsets="earliest")
    events = (
        raw.select(F.from_json(F.col("value").cast("string"), spark_schema(UserEvent)).alias("e"))
        .select("e.*")
        .where(F.col("user_id").isNotNull() & F.col("ts").isNotNull())
        .withColumn("event_time", F.timestamp_millis("ts"))
        .withWatermark("event_time", f"{settings.watermark_delay_ms} milliseconds")
    )
    sessions = events.groupBy("user_id", F.session_window("event_time", f"{settings.session_gap_ms} milliseconds")).agg(
        F.min("ts").alias("start"),
        F.max("ts").alias("end"),
        F.count(F.lit(1)).alias("events"),
        F.count_if(F.col("type") == "page_view").alias("page_views"),
        F.count_if(F.col("type") == "click").alias("clicks"),
        F.count_if(F.col("type") == "purchase").alias("purchases"),
        F.coalesce(F.sum("amount"), F.lit(0.0)).alias("purchase_total"),
    )
    return sessions.select(
        F.lit("session").alias("kind"),
        F.col("user_id").alias("key"),
        F.to_json(F.struct("user_id", "start", "end", "events", "page_views", "clicks", "purchases", "purchase_total")).alias("payload"),
    )


def start(spark: SparkSession, settings: Settings, checkpoint: str) -> StreamingQuery:
    """One ``availableNow`` run of :func:`build`, routed to ``settings.topic_sessions``."""
    return (
        routed(build(spark, settings), settings, sessions_job.JOB, observed=False)
        .writeStream.queryName("native-session-window")
        .outputMode("complete")
        .option("checkpointLocation", checkpoint)
        .format("noop")
        .trigger(availableNow=True)
        .start()
    )
