"""Routing a job's micro-batch of (kind, key, payload) rows to the output topics.

Each job runs ONE streaming query whose rows carry a ``kind``; ``foreachBatch`` writes
every kind to its topic with delivery checked, so a failed write fails the batch and
Spark re-runs it from the checkpoint (at-least-once on the wire, de-duplicated by id
downstream), and counts what it wrote into the job's Prometheus metrics.
"""

from __future__ import annotations

import logging
from typing import Callable

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streamstate.jobs.kafka import write_kafka
from streamstate.settings import Settings

log = logging.getLogger(__name__)

ROW_SCHEMA = "kind string, key string, payload string"

# kind -> the Settings field naming its topic
TOPIC_OF_KIND = {
    "alert": "topic_alerts",
    "session": "topic_sessions",
    "session_state": "topic_session_state",
    "metric_state": "topic_metric_state",
    "dead_letter": "topic_dead_letters",
    "event_count": "topic_event_counts",
}


def topic_for(kind: str, settings: Settings) -> str:
    return getattr(settings, TOPIC_OF_KIND[kind])


def batch_router(settings: Settings, metrics=None, on_batch: Callable[[int, dict[str, int]], None] | None = None):
    """A ``foreachBatch`` function writing each kind of row to its topic."""

    def route(batch: DataFrame, batch_id: int) -> None:
        batch = batch.persist()
        try:
            summary = batch.groupBy("kind", F.get_json_object("payload", "$.kind").alias("alert_kind"), F.get_json_object("payload", "$.ended_by").alias("ended_by")).count().collect()
            counts: dict[str, int] = {}
            for row in summary:
                counts[row["kind"]] = counts.get(row["kind"], 0) + row["count"]
            unknown = set(counts) - set(TOPIC_OF_KIND)
            if unknown:
                raise ValueError(f"rows of unknown kind {sorted(unknown)} in batch {batch_id}")
            for kind, n in sorted(counts.items()):
                written = write_kafka(
                    batch.filter(F.col("kind") == kind).select("key", F.col("payload").alias("value")),
                    settings,
                    topic=topic_for(kind, settings),
                )
                if written != n:
                    raise RuntimeError(f"batch {batch_id}: wrote {written} of {n} {kind} records")
            if metrics is not None:
                _count(metrics, summary)
            if on_batch is not None:
                on_batch(batch_id, counts)
        finally:
            batch.unpersist()

    return route


def _count(metrics, summary) -> None:
    for row in summary:
        kind, n = row["kind"], row["count"]
        metrics.records_out.labels(topic=kind).inc(n)
        if kind == "dead_letter":
            metrics.dead_letters.inc(n)
        elif kind == "alert" and row["alert_kind"]:
            metrics.alerts.labels(kind=row["alert_kind"]).inc(n)
        elif kind == "session" and row["ended_by"]:
            metrics.sessions_closed.labels(ended_by=row["ended_by"]).inc(n)


def state_rows(result, snapshot_kind: str) -> DataFrame:
    """A job's stateful rows as (kind, key, payload): the function's outputs are already
    {kind, key, payload} objects; snapshots become ``snapshot_kind`` rows (null payload =
    tombstone); a user-function failure becomes a DeadLetter of stage ``state``."""
    rows = result.all
    output = F.from_json("payload", ROW_SCHEMA)
    failure = F.to_json(
        F.struct(
            F.col("reason"),
            F.lit("state").alias("stage"),
            F.col("topic").alias("source_topic"),
            F.col("partition").alias("source_partition"),
            F.col("offset").alias("source_offset"),
            F.col("key"),
            F.col("payload").alias("value"),
            # the failing record's own event time when it has one
            F.coalesce(F.get_json_object("payload", "$.ts").cast("long"), F.lit(0).cast("long")).alias("ts"),
        ),
        {"ignoreNullFields": "false"},
    )
    return rows.select(
        F.when(F.col("kind") == "output", output["kind"])
        .when(F.col("kind") == "snapshot", F.lit(snapshot_kind))
        .otherwise(F.lit("dead_letter"))
        .alias("kind"),
        F.when(F.col("kind") == "output", output["key"]).otherwise(F.col("key")).alias("key"),
        F.when(F.col("kind") == "output", output["payload"])
        .when(F.col("kind") == "snapshot", F.col("payload"))
        .otherwise(failure)
        .alias("payload"),
    )
