"""Routing a job's micro-batch of (kind, key, payload) rows to the output topics.

Each job runs ONE streaming query whose rows carry a ``kind``; ``foreachBatch`` has the
tasks that computed a batch's rows write every kind to its topic, delivery checked, in one
Spark job (:mod:`streamstate_jobs.kafka.partition_writer`), so a failed write fails the batch
and Spark re-runs it from the checkpoint, and counts what the tasks wrote into the job's
Prometheus metrics. With output transactions (the default where the broker has them) a
re-run writes nothing its first run had committed: a ``read_committed`` consumer sees each
record once. Without, the re-run writes its records again (at least once; alerts keep their
ids, and the API shows each once).
"""

from __future__ import annotations

import json
import logging
from typing import Callable

from py4j.protocol import Py4JJavaError
from pyspark.errors.exceptions.captured import CapturedException
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streamstate_jobs.declaration import JobSpec
from streamstate_jobs.kafka.partition_writer import BatchTransactions, OutputPlan, write_partitions
from streamstate_jobs.lost_input import raise_if_lost_input
from streamstate_jobs.spark_action_errors import short_for_spark
from streamstate_jobs.kinds import Kind
from streamstate_pipeline.settings import Settings

log = logging.getLogger(__name__)


def count_as(kind: str, payload: str | None) -> str | None:
    """The label the writer counts a written record under (its ``count_as`` callback, run in the
    tasks): an alert's kind, a dead letter's stage, for the job's alert and dead-letter metrics;
    None for every other kind, counted by kind alone."""
    if kind == Kind.ALERT and payload:
        return json.loads(payload).get("kind")
    if kind == Kind.DEAD_LETTER and payload:
        return json.loads(payload).get("stage")
    return None


def batch_router(
    settings: Settings,
    job: JobSpec,
    metrics=None,
    on_batch: Callable[[int, dict[str, int]], None] | None = None,
    before_batch: Callable[[], None] | None = None,
    transactional_query: Callable[[], str] | None = None,
):
    """A ``foreachBatch`` function writing each kind of row to the topic ``job`` declares for it.

    A row of a kind the job did not declare fails the batch, and so does a count of a counter it
    did not declare. ``before_batch`` runs first in every batch (the input-topic identity check):
    raising there fails the batch before anything of it is written or committed. With
    ``transactional_query`` (the name of the query's transactional ids, read once its
    checkpoint exists) every batch is written exactly once."""
    topic_of_kind = job.output_topics(settings)
    plan = OutputPlan(
        job.name, topic_of_kind, job.count_names, frozenset(gauge.reads[0] for gauge in job.gauges if gauge.reads), count_as,
    )
    prefix: list[str] = []  # read at the first batch: the checkpoint's query id exists from then on

    def transactions(batch_id: int) -> BatchTransactions | None:
        if transactional_query is None:
            return None
        if not prefix:
            prefix.append(transactional_query())
        return BatchTransactions(prefix[0], batch_id, marker=min(topic_of_kind.values()))

    def route(batch: DataFrame, batch_id: int) -> None:
        if before_batch is not None:
            before_batch()
        try:
            summary = write_partitions(batch, settings, plan, transactions(batch_id))
        except (Py4JJavaError, CapturedException) as error:  # a Spark action of this batch failed in the JVM
            # A Py4JJavaError crosses back short: its whole JVM stack trace would break Spark's reading of a stop.
            crossing = short_for_spark(error, batch_id) if isinstance(error, Py4JJavaError) else error
            raise_if_lost_input(error, cause=crossing)
            if crossing is error:
                raise
            raise crossing from None
        if metrics is not None:
            metrics.count_batch(summary.rows, topic_of_kind)
            for kind, payloads in summary.payloads.items():
                metrics.read_rows(kind, [json.loads(payload) for payload in payloads])
        if on_batch is not None:
            on_batch(batch_id, summary.counts)

    return route


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
