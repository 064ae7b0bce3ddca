"""Routing a job's micro-batch of (kind, key, payload) rows to the output topics.

Each job runs ONE streaming query whose rows carry a ``kind``. Its last step has the tasks
that computed a batch's rows write every kind to its topic, delivery checked
(:mod:`streamstate_jobs.kafka.partition_writer`), and its sink, Spark's ``noop``, discards
what the tasks hand back: so a failed write fails the batch and Spark re-runs it from the
checkpoint, and the batch is ONE Spark job with no Python call on the driver (``foreachBatch``
cost 15-20 ms of every batch's driver time, docs/profile.md). The job's Prometheus metrics
count what the tasks wrote from their summaries, which the query observes and each batch's
progress carries (:data:`OUTPUT_SUMMARY`, read by :mod:`streamstate_jobs.metrics`). With
output transactions (the default where the broker has them) a re-run writes nothing its first
run had committed: a ``read_committed`` consumer sees each record once. Without, the re-run
writes its records again (at least once; alerts keep their ids, and the API shows each once).
"""

from __future__ import annotations

import json

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streamstate_jobs.declaration import JobSpec
from streamstate_jobs.kafka.identity import InputTopics
from streamstate_jobs.kafka.partition_writer import SUMMARY_COLUMNS, OutputPlan, QueryTransactions, written_rows
from streamstate_jobs.kinds import Kind
from streamstate_pipeline.settings import Settings

# The observed metric that carries a batch's summaries to the driver, in its progress.
OUTPUT_SUMMARY = "streamstate_output"


def count_as(kind: str, payload: str | None) -> str | None:
    """The label the writer counts a written record under (its ``count_as`` callback, run in the
    tasks): an alert's kind, a dead letter's stage, for the job's alert and dead-letter metrics;
    None for every other kind, counted by kind alone."""
    if kind == Kind.ALERT and payload:
        return json.loads(payload).get("kind")
    if kind == Kind.DEAD_LETTER and payload:
        return json.loads(payload).get("stage")
    return None


def routed(
    rows: DataFrame,
    settings: Settings,
    job: JobSpec,
    transactional_name: str | None = None,
    inputs: InputTopics | None = None,
    observed: bool = True,
) -> DataFrame:
    """``rows`` written to the topic ``job`` declares for each row's kind, by the tasks that
    compute them, as the tasks' summaries: a streaming query ends with it and a ``noop`` sink.

    A row of a kind the job did not declare fails the batch, and so does a count of a counter it
    did not declare. With ``inputs`` each task first checks that the input topics are the ones
    the checkpoint read, and fails before writing anything when one is not. With
    ``transactional_name`` (job and query: the tasks add the query's id) every batch is written
    exactly once. ``observed``: the summaries reach the driver in each batch's progress, as the
    observed metric :data:`OUTPUT_SUMMARY`, for the job's metrics."""
    topic_of_kind = job.output_topics(settings)
    plan = OutputPlan(
        job.name, topic_of_kind, job.count_names, frozenset(gauge.reads[0] for gauge in job.gauges if gauge.reads), count_as,
    )
    transactions = None
    if transactional_name is not None:
        transactions = QueryTransactions(transactional_name, marker=min(topic_of_kind.values()))
    summaries = written_rows(rows, settings, plan, transactions, inputs)
    if not observed:
        return summaries
    return summaries.observe(OUTPUT_SUMMARY, F.collect_list(F.struct(*SUMMARY_COLUMNS)).alias("rows"))


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
