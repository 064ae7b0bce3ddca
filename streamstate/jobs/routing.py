"""Routing a job's micro-batch of (kind, key, payload) rows to the output topics.

Each job runs ONE streaming query whose rows carry a ``kind``; ``foreachBatch`` writes
every kind to its topic in one pass with delivery checked, so a failed write fails the batch and
Spark re-runs it from the checkpoint (at-least-once on the wire, de-duplicated by id
downstream), and counts what it wrote into the job's Prometheus metrics.
"""

from __future__ import annotations

import json
import logging
from typing import Callable, Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streamstate.jobs.registry import JOBS
from streamstate.jobs.kafka import write_kafka
from streamstate.kinds import Kind
from streamstate.settings import Settings

log = logging.getLogger(__name__)

# kind -> the Settings field naming its topic, over every declared job (streamstate.jobs.registry)
TOPIC_OF_KIND = {kind: field for spec in JOBS.values() for kind, field in spec.outputs.items()}


def topic_for(kind: str, settings: Settings, outputs: Mapping[str, str] = TOPIC_OF_KIND) -> str:
    return getattr(settings, outputs[kind])


def batch_router(
    settings: Settings,
    metrics=None,
    on_batch: Callable[[int, dict[str, int]], None] | None = None,
    before_batch: Callable[[], None] | None = None,
    outputs: Mapping[str, str] | None = None,
):
    """A ``foreachBatch`` function writing each kind of row to its topic.

    ``outputs`` (kind -> Settings field of its topic) are the kinds the job declared; a row of
    any other kind fails the batch. ``before_batch`` runs first in every batch (the input-topic
    identity check): raising there fails the batch before anything of it is written or committed."""
    outputs = TOPIC_OF_KIND if outputs is None else outputs

    # Sessions opened minus closed since this process started: the gauge cannot know what was
    # open before a restart without scanning every key's state.
    open_sessions = {"value": 0}

    def route(batch: DataFrame, batch_id: int) -> None:
        if before_batch is not None:
            before_batch()
        batch = batch.persist()
        try:
            summary = (
                batch.groupBy(
                    "kind",
                    # Each payload field is parsed only on the kind whose metric needs it: most of a
                    # batch's rows are snapshots, which none of them concern.
                    _field_of(Kind.ALERT, "kind").alias("alert_kind"),
                    _field_of(Kind.SESSION, "ended_by").alias("ended_by"),
                    _field_of(Kind.DEAD_LETTER, "stage").alias("stage"),
                    F.when(F.col("kind") == Kind.COUNT.value, F.col("key")).alias("counter"),
                )
                .agg(F.count(F.lit(1)).alias("rows"), F.sum(F.when(F.col("kind") == Kind.COUNT.value, F.col("payload").cast("long"))).alias("total"))
                .collect()
            )
            counts: dict[str, int] = {}
            for row in summary:
                counts[row["kind"]] = counts.get(row["kind"], 0) + row["rows"]
            unknown = set(counts) - set(outputs) - {Kind.COUNT}
            if unknown:
                raise ValueError(
                    f"rows of kind {sorted(unknown)} in batch {batch_id}: not among the job's declared outputs "
                    f"{sorted(outputs)} (streamstate/jobs/registry.py)"
                )
            topics = {kind: topic_for(kind, settings, outputs) for kind in sorted(counts) if kind != Kind.COUNT}
            if topics:
                # Every kind in one pass: a Spark job per kind costs ~0.3 s of task scheduling
                # and Python worker round trips each, whatever the row count.
                expected = sum(counts[kind] for kind in topics)
                topic_of_row = F.create_map(*[F.lit(v) for pair in topics.items() for v in pair])[F.col("kind")]
                rows = batch.filter(F.col("kind").isin(list(topics))).select(
                    "key", F.col("payload").alias("value"), topic_of_row.alias("topic")
                )
                written = write_kafka(rows, settings, topic=None)
                if written != expected:
                    raise RuntimeError(
                        f"batch {batch_id}: wrote {written} of {expected} records to {', '.join(sorted(set(topics.values())))}"
                    )
            if metrics is not None:
                open_sessions["value"] += metrics_update(metrics, settings, summary, outputs)
                metrics.sessions_open.set(max(0, open_sessions["value"]))
                if counts.get(Kind.EVENT_COUNT):
                    _set_window_counts(metrics, batch)
            if on_batch is not None:
                on_batch(batch_id, counts)
        finally:
            batch.unpersist()

    return route


def _field_of(kind: Kind, field: str):
    """A field of the JSON payload on rows of ``kind``, null on the others."""
    return F.when(F.col("kind") == kind.value, F.get_json_object("payload", f"$.{field}"))


def metrics_update(metrics, settings: Settings, summary, outputs: Mapping[str, str] = TOPIC_OF_KIND) -> int:
    """Count a batch's rows into the job metrics; returns sessions opened minus closed."""
    open_delta = 0
    for row in summary:
        kind, n = row["kind"], row["rows"]
        if kind == Kind.COUNT:
            if row["counter"] == "sessions_opened":
                open_delta += row["total"] or 0
            elif row["counter"] == "late_events":
                metrics.late_events.inc(row["total"] or 0)
            elif row["counter"] == "duplicate_events":
                metrics.duplicate_events.inc(row["total"] or 0)
            continue
        metrics.records_out.labels(topic=topic_for(kind, settings, outputs)).inc(n)
        if kind == Kind.DEAD_LETTER:
            metrics.dead_letters.labels(stage=row["stage"] or "state").inc(n)
        elif kind == Kind.ALERT and row["alert_kind"]:
            metrics.alerts.labels(kind=row["alert_kind"]).inc(n)
        elif kind == Kind.SESSION and row["ended_by"]:
            metrics.sessions_closed.labels(ended_by=row["ended_by"]).inc(n)
            open_delta -= n
    return open_delta


def _set_window_counts(metrics, event_counts: DataFrame) -> None:
    """The newest window's count per event type."""
    rows = [json.loads(r["payload"]) for r in event_counts.filter(F.col("kind") == Kind.EVENT_COUNT.value).select("payload").collect()]
    if not rows:
        return
    newest = max(r["window_end"] for r in rows)
    for r in rows:
        if r["window_end"] == newest:
            metrics.events_by_type.labels(type=r["type"]).set(r["count"])


def state_rows(result, snapshot_kind: Kind) -> DataFrame:
    """A job's stateful rows as (kind, key, payload): the function emits its records with their
    kind, key and encoded payload (:class:`~streamstate.state.Emit`), which pass as they are;
    snapshots become ``snapshot_kind`` rows (null payload = tombstone); a record whose call
    failed (the state layer's own dead letter: it has a reason) becomes a DeadLetter of stage
    ``state``."""
    rows = result.all
    failed = (F.col("kind") == Kind.DEAD_LETTER.value) & F.col("reason").isNotNull()
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
        F.when(F.col("kind") == Kind.SNAPSHOT.value, F.lit(Kind(snapshot_kind).value)).otherwise(F.col("kind")).alias("kind"),
        F.col("key"),
        F.when(failed, failure).otherwise(F.col("payload")).alias("payload"),
    )
