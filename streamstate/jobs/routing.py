"""Routing a job's micro-batch of (kind, key, payload) rows to the output topics.

Each job runs ONE streaming query whose rows carry a ``kind``; ``foreachBatch`` writes
every kind to its topic in one pass with delivery checked, so a failed write fails the batch and
Spark re-runs it from the checkpoint (at-least-once on the wire, de-duplicated by id
downstream), and counts what it wrote into the job's Prometheus metrics.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Callable

from py4j.protocol import Py4JJavaError
from pyspark.errors.exceptions.captured import CapturedException
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streamstate.jobs.declaration import JobSpec, count_key
from streamstate.jobs.kafka import write_kafka
from streamstate.jobs.lost_input import raise_if_lost_input
from streamstate.kinds import Kind
from streamstate.settings import Settings

log = logging.getLogger(__name__)


def batch_router(
    settings: Settings,
    job: JobSpec,
    metrics=None,
    on_batch: Callable[[int, dict[str, int]], None] | None = None,
    before_batch: Callable[[], None] | None = None,
):
    """A ``foreachBatch`` function writing each kind of row to the topic ``job`` declares for it.

    A row of a kind the job did not declare fails the batch, and so does a count of a counter it
    did not declare. ``before_batch`` runs first in every batch (the input-topic identity check):
    raising there fails the batch before anything of it is written or committed."""
    topic_of_kind = job.output_topics(settings)
    read_kinds = {gauge.reads[0] for gauge in job.gauges if gauge.reads}

    def route(batch: DataFrame, batch_id: int) -> None:
        if before_batch is not None:
            before_batch()
        batch = batch.persist()
        try:
            _route(batch, batch_id)
        except (Py4JJavaError, CapturedException) as error:  # a Spark action of this batch failed in the JVM
            raise_if_lost_input(error)
            raise
        finally:
            batch.unpersist()

    def _route(batch: DataFrame, batch_id: int) -> None:
        summary = (
            batch.groupBy(
                "kind",
                # Each payload field is parsed only on the kind whose metric needs it: most of a
                # batch's rows are snapshots, which none of them concern.
                _field_of(Kind.ALERT, "kind").alias("alert_kind"),
                _field_of(Kind.DEAD_LETTER, "stage").alias("stage"),
                F.when(F.col("kind") == Kind.COUNT.value, F.col("key")).alias("counter"),
            )
            .agg(F.count(F.lit(1)).alias("rows"), F.sum(F.when(F.col("kind") == Kind.COUNT.value, F.col("payload").cast("long"))).alias("total"))
            .collect()
        )
        counts: dict[str, int] = {}
        for row in summary:
            counts[row["kind"]] = counts.get(row["kind"], 0) + row["rows"]
        _check_declared(job, batch_id, counts, summary)
        topics = {kind: topic_of_kind[kind] for kind in sorted(counts) if kind != Kind.COUNT}
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
            metrics.count_batch(summary, topic_of_kind)
            for kind in read_kinds & set(counts):
                metrics.read_rows(kind, _payloads(batch, kind))
        if on_batch is not None:
            on_batch(batch_id, counts)

    return route


def _field_of(kind: Kind, field: str):
    """A field of the JSON payload on rows of ``kind``, null on the others."""
    return F.when(F.col("kind") == kind.value, F.get_json_object("payload", f"$.{field}"))


def _check_declared(job: JobSpec, batch_id: int, counts: dict[str, int], summary: list[Any]) -> None:
    unknown = set(counts) - set(job.outputs) - {Kind.COUNT}
    if unknown:
        raise ValueError(
            f"rows of kind {sorted(unknown)} in batch {batch_id}: not among the outputs job {job.name!r} declares "
            f"{sorted(job.outputs)}"
        )
    counters = {count_key(row["counter"])[0] for row in summary if row["kind"] == Kind.COUNT}
    if counters - job.count_names:
        raise ValueError(
            f"counts of {sorted(counters - job.count_names)} in batch {batch_id}: not among the counters and gauges "
            f"job {job.name!r} declares {sorted(job.count_names)}"
        )


def _payloads(batch: DataFrame, kind: str) -> list[dict[str, Any]]:
    """The decoded payloads of a batch's rows of ``kind``."""
    return [json.loads(r["payload"]) for r in batch.filter(F.col("kind") == kind).select("payload").collect()]


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
