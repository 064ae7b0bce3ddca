"""Command line and lifecycle shared by the jobs: settings, Spark, metrics, the queries.

A job is declared once (:class:`~streamstate_jobs.declaration.JobSpec`): a function
``build(ctx) -> DataFrame`` of (kind, key, payload) rows, its extra queries, inputs,
outputs and metrics. The runner starts the streaming queries that route those rows to Kafka, exports
metrics, stops cleanly on SIGTERM/Ctrl-C (the current batch finishes, offsets and state
are committed together) and exits non-zero with the error when the query fails.

A failed query is restarted from its checkpoint with backoff (a budget of restarts in a row:
a batch committed since the last restart renews it), except when another copy of the job
runs on the same checkpoint (Spark finds the other's batch in the checkpoint, or the output
transactions are fenced and the checkpoint holds a batch this process did not commit, or they
are fenced again before a batch commits: this copy stops, exit 2, and the other goes on; a
first fence alone restarts), or when its input lost
records under the checkpoint (a topic recreated, emptied or truncated): restarting then
would read on from offsets that no longer mean anything, and by the time of the restart a
recreated topic may have grown past them, skipping its first records silently. The job
stops instead (exit 2) with what happened, or with ``on_source_reset=start-over`` moves the
checkpoint aside and reads the topics from their beginning.

A fatal error of an output transaction that a restart would meet again stops the job with
its own exit code (README, Delivery guarantees, "Exit codes"): the task's error carries a
stable ``[OUTPUT_*]`` condition across the JVM (:func:`~streamstate_jobs.kafka.partition_writer.fatal_condition`),
so that only real fencing says another copy runs (2); the ACLs refusing (3), a transaction
timed out (4), a broker without the transactions asked for (5). A checkpoint whose
uncommitted batch is older than the brokers keep its committed-batch markers stops it at
start (6, :func:`~streamstate_jobs.checkpoints.check_markers_kept`).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from streamstate_pipeline.cli_common import add_common_options, setting_error, settings_from_args
from streamstate_pipeline.errors import CheckpointError
from streamstate_jobs.checkpoints import (
    BatchMarkersMayHaveExpired,
    CheckpointFiles,
    TopicIdentity,
    bucket_labels,
    check_markers_kept,
    discard_unstarted_leftovers,
    finish_interrupted_move,
    query_id,
    state_partitions,
)
from streamstate_jobs.declaration import ExtraQuery, JobSpec
from streamstate_jobs.jvm_recycle import SocketWatch, end_jvm
from streamstate_jobs.kafka.partition_writer import (
    FatalOutputError,
    OutputFenced,
    TransactionsUnavailable,
    fatal_condition,
    is_fenced,
    transactions_problem,
)
from streamstate_jobs.kafka.identity import SourceResetError
from streamstate_jobs.kafka.timestamps import exposed_topics
from streamstate_jobs.kafka.unreadable_records import run_past_unreadable_records
from streamstate_jobs.lost_input import error_conditions, is_source_reset, query_failure
from streamstate_jobs.outage import PROBE_TIMEOUT_S, BrokerWatch, failure_message
from streamstate_pipeline.kafka_clients import BrokerUnreachable, require_broker
from streamstate_jobs.state_snapshots import StoppedQuery, snapshot_stopped
from streamstate_pipeline.settings import Settings

log = logging.getLogger("streamstate_jobs")


def parse_args(spec: JobSpec, argv: list[str] | None) -> tuple[argparse.Namespace, Settings]:
    parser = argparse.ArgumentParser(
        prog=spec.command,
        description=spec.description,
        epilog="Every option defaults to its STREAMSTATE_* setting (see README, Configuration).",
    )
    add_common_options(parser)
    parser.add_argument(
        "--master",
        help="Spark master URL: local[N], spark://host:7077, k8s://... (under spark-submit, spark-submit's --master applies)",
    )
    parser.add_argument("--checkpoint", help=f"checkpoint location (default: <checkpoint_root>/{spec.name})")
    parser.add_argument("--trigger", help="micro-batch interval, e.g. '2 seconds'")
    parser.add_argument(
        "--available-now",
        action="store_true",
        help="process everything available now, then stop (batch-style run; used by tests and benchmarks)",
    )
    parser.add_argument("--max-offsets-per-trigger", type=int, help="records per micro-batch, all partitions")
    parser.add_argument("--shuffle-partitions", type=int, help="state partitions (fixed per checkpoint)")
    parser.add_argument("--metrics-port", type=int, help="port of the job's Prometheus /metrics (0: none)")
    args = parser.parse_args(argv)
    overrides = {
        "spark_master": args.master,
        "trigger_interval": args.trigger,
        "max_offsets_per_trigger": args.max_offsets_per_trigger,
        "shuffle_partitions": args.shuffle_partitions,
    }
    if spec.metrics_port:
        overrides[spec.metrics_port] = args.metrics_port
    try:
        settings = settings_from_args(args, **overrides)
    except ValueError as exc:
        parser.error(setting_error(exc))
    return args, settings


def start_query(
    spark: SparkSession,
    settings: Settings,
    job: JobSpec,
    checkpoint: str,
    query: ExtraQuery | None = None,
    available_now: bool = False,
    metrics=None,
    check_inputs: bool = True,
) -> StreamingQuery:
    """Start one of ``job``'s streaming queries, its own unless ``query`` names an extra one
    (also used in-process by the tests and benchmarks).

    The query runs with the checkpoint's state partition and bucket counts (for a new one,
    ``settings.shuffle_partitions``, else one per core, and ``settings.state_buckets``, else 8).
    Raises :class:`~streamstate_pipeline.errors.CheckpointError` when ``checkpoint`` was written with a
    count other than a set one (Spark would silently keep the old partition count; another bucket
    count would lose every key's state), or when the metadata kept next to it is damaged.
    With ``check_inputs`` (and a Kafka source), the query's start and then every batch's writer
    tasks check that the job's input topics are still the topics the checkpoint read
    (:class:`TopicIdentity`). Rows may only be of the kinds the job declares. With ``metrics``,
    they count what every batch wrote (from its progress: :meth:`JobMetrics.count_written`)."""
    from streamstate_jobs.context import JobContext
    from streamstate_jobs.routing import routed

    query = query or job.queries[0]
    finish_interrupted_move(spark, checkpoint)
    discard_unstarted_leftovers(spark, checkpoint)
    # Read by Spark when the query starts (and kept in its checkpoint from the first batch on).
    partitions = state_partitions(spark, checkpoint, settings.shuffle_partitions)
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    labels = bucket_labels(spark, checkpoint, settings.state_buckets, partitions)
    inputs = None
    input_topics = job.input_topics(settings) if check_inputs and settings.source == "kafka" else []
    if input_topics:
        inputs = TopicIdentity(spark, checkpoint, settings.kafka, input_topics).check()
        for topic, reason in exposed_topics(settings.kafka, input_topics, int(time.time() * 1000)).items():
            log.warning("input topic %s: %s", topic, reason)
    transactional_name = transactional_query = None
    if exactly_once(settings):
        check_markers_kept(spark, checkpoint, settings)
        transactional_name = f"streamstate.{job.name}.{query.name}"

        def transactional_query() -> str:  # the tasks' prefix (QueryTransactions), read on the driver
            return f"{transactional_name}.{query_id(spark, checkpoint)}"
    if metrics is not None:
        metrics.writes_to(job.output_topics(settings))
    rows = query.build(JobContext(spark, settings, job, labels, partitions))
    writer = (
        routed(rows, settings, job, transactional_name, inputs, observed=metrics is not None)
        .writeStream.queryName(query.name)
        .outputMode(query.output_mode)
        .option("checkpointLocation", checkpoint)
        .format("noop")
    )
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime=settings.trigger_interval)
    # A record whose Kafka timestamp Spark cannot convert is dead-lettered and skipped (issue 51).
    return run_past_unreadable_records(writer.start, spark, settings, job, query.name, checkpoint, transactional_query, metrics)


def exactly_once(settings: Settings) -> bool:
    """Whether the jobs write their outputs in Kafka transactions (``output_transactions``:
    auto is on where the broker runs them, and says so once when it cannot)."""
    if settings.output_transactions == "off":
        return False
    problem = transactions_problem(settings)
    if problem is None:
        return True
    if settings.output_transactions == "on":
        raise TransactionsUnavailable(
            f"output_transactions=on, but the broker at {settings.bootstrap_servers} cannot start a transaction: {problem}. "
            "Kafka needs as many brokers as transaction.state.log.replication.factor (3 unless set); or set "
            "STREAMSTATE_OUTPUT_TRANSACTIONS=auto (or off) to write at least once"
        )
    if not _warned_at_least_once:
        _warned_at_least_once.append(problem)
        log.warning("the broker at %s cannot start a Kafka transaction (%s): outputs are written at least once, and a "
                    "replayed batch writes its records again", settings.bootstrap_servers, problem)
    return False


_warned_at_least_once: list[str] = []


# Spark's error classes for another query writing the checkpoint's logs ("Multiple streaming jobs
# detected for batch N", "Multiple streaming queries are concurrently using <path>").
ANOTHER_COPY_CONDITIONS = frozenset({"CONCURRENT_STREAM_LOG_UPDATE", "_LEGACY_ERROR_TEMP_2207"})


def _another_copy(error: object) -> bool:
    """Whether Spark failed the query because another query wrote its checkpoint's logs: by
    Spark's error class along the failure's JVM causes (:func:`error_conditions`)."""
    return not ANOTHER_COPY_CONDITIONS.isdisjoint(error_conditions(error))


def _fatal_output(failures) -> type[FatalOutputError] | None:
    """The fatal output condition among the failures (:func:`fatal_condition`), fencing first."""
    kinds = [kind for kind in (fatal_condition(error) for _, error in failures) if kind is not None]
    return OutputFenced if OutputFenced in kinds else (kinds[0] if kinds else None)


def _condition_text(error: object, condition: str) -> str:
    """The task's message from its ``[condition]`` on, to its line's end: not the JVM's trace around it."""
    text = str(error)
    start = text.find(f"[{condition}]")
    return text[start:].splitlines()[0] if start >= 0 else " ".join(text.split())[:1500]


def _checkpoints(spec: JobSpec, job_checkpoint: str) -> list[str]:
    """The checkpoints of the job's queries: its own, then one per extra query."""
    return [job_checkpoint, *(f"{job_checkpoint}-{extra.name}" for extra in spec.extra_queries)]


@dataclass
class RestartBudget:
    """Restarts of a failed job in a row, with exponential backoff (5 s doubling up to 60 s).

    A job that committed a batch since its last restart was healthy until it failed again,
    so :meth:`renew` gives it the whole budget back: a job running for months survives more
    than ``max_restarts`` broker outages, while one failing on every start still ends.
    """

    max_restarts: int
    used: int = 0

    def renew(self) -> None:
        self.used = 0

    def next_delay(self) -> float | None:
        """Seconds to wait before the next restart, or None when the budget is spent."""
        if self.used >= self.max_restarts:
            return None
        delay = min(60.0, 5.0 * 2**self.used)
        self.used += 1
        return delay


@dataclass
class QueriesRun:
    """How a run of the job's queries ended."""

    failures: list[tuple[str, object]]  # (query name, its error)
    new_jvm: bool  # the JVM holds too many sockets and is to be replaced
    completed: list[int]  # the last batch each query completed in this run (-1: none)

    def committed_by_another(self, before: list[int], now: list[int]) -> bool:
        """Whether a query's checkpoint gained a batch (commit log: ``before`` the run, ``now``)
        that this run did not complete: another copy of the job committed it."""
        return any(last > max(start, ours) for start, ours, last in zip(before, self.completed, now))


def _last_commits(spark: SparkSession, spec: JobSpec, job_checkpoint: str) -> list[int]:
    """The last committed batch of each of the job's queries (-1 for none)."""
    return [max(CheckpointFiles(spark, cp).batches("commits"), default=-1) for cp in _checkpoints(spec, job_checkpoint)]


def _run_queries(spark, settings, spec: JobSpec, checkpoint, available_now, metrics, stop_requested,
                 sockets: SocketWatch | None) -> QueriesRun:
    """Run the job's queries until stopped, drained (availableNow), failed or their JVM holds too
    many sockets."""
    checkpoints = _checkpoints(spec, checkpoint)
    # Starting a query asks the broker (topic ids, timestamp limits, transactions): a broker that
    # does not answer is an outage to wait out, not a traceback or a transactions verdict.
    require_broker(settings.kafka, PROBE_TIMEOUT_S)
    queries: list[StreamingQuery] = []
    try:
        for query, query_checkpoint in zip(spec.queries, checkpoints):
            queries.append(start_query(spark, settings, spec, query_checkpoint, query, available_now, metrics))
    except BaseException as exc:
        for started in queries:  # a retry starts them again on the same checkpoints
            _stop_query(started, settings)
        if isinstance(exc, Exception):
            # A broker lost as the queries started fails in whichever client asked it first
            # (librdkafka's, Spark's Kafka client through py4j, a timeout): asked directly, it
            # is the outage it is; an answering broker leaves the error as it was.
            require_broker(settings.kafka, PROBE_TIMEOUT_S)
        raise
    log.info("query %s started: checkpoint %s, broker %s", spec.name, checkpoint, settings.bootstrap_servers)
    watch = BrokerWatch(settings.kafka, spec.name, checkpoint, metrics.broker_reachable) if settings.source == "kafka" else None
    new_jvm = False
    try:
        # availableNow: wait for every query to drain; otherwise any query ending ends the run.
        while not stop_requested.is_set() and (
            any(q.isActive for q in queries) if available_now else all(q.isActive for q in queries)
        ):
            if watch is not None:
                watch.poll()
            if sockets is not None:
                if sockets.over_budget():
                    new_jvm = True
                    _between_batches(queries, stop_requested)
                    break
                metrics.jvm_sockets(sockets.sockets)
            stop_requested.wait(1)
    finally:
        metrics.broker_reachable(True)  # a restarted query is judged afresh
        broker_down = watch is not None and not watch.reachable  # no batch in flight can end meanwhile
        if stop_requested.is_set() and not broker_down:  # a batch cut short is re-run, cold, first thing at the next start
            _between_batches(queries, threading.Event(), STOP_BATCH_WAIT_S)
        for running in queries:
            _stop_query(running, settings)
        snapshot_stopped(spark, [StoppedQuery(cp, str(q.runId)) for q, cp in zip(queries, checkpoints)])
    return QueriesRun(
        failures=[(q.name, failure) for q, failure in ((q, query_failure(q)) for q in queries) if failure is not None],
        new_jvm=new_jvm,
        completed=[q.lastProgress.batchId if q.lastProgress else -1 for q in queries],
    )


# At a requested stop, how long the batches in flight may take to finish before they are cut short.
STOP_BATCH_WAIT_S = 5.0
# How long a query's stream thread may take to end once stopped (Spark's spark.sql.streaming.stopTimeout,
# which waits for ever by default): a thread planning a batch against a broker that does not
# answer sits in Spark's Kafka client, which defers interrupts, until its retries run out
# (minutes). Within a container's stop grace (10 s in Docker) after the wait above.
QUERY_STOP_TIMEOUT_S = 3.0


def _stop_query(query: StreamingQuery, settings: Settings) -> None:
    """Stop ``query``; one whose stream thread does not end in time is left to the process's exit
    (the thread is a daemon), its batch re-run from the checkpoint at the next start."""
    if not query.isActive:
        return
    try:
        query.stop()
    except Exception as exc:  # noqa: BLE001 - PySpark raises the JVM's TimeoutException as whichever of its wrappers
        log.warning(
            "query %s did not stop within %gs (its stream thread waits in a call that defers interrupts, such as Spark's "
            "Kafka client on the broker at %s when it does not answer): leaving it to the process's exit; its batch is "
            "re-run from the checkpoint on restart (%s)",
            query.name, QUERY_STOP_TIMEOUT_S, settings.bootstrap_servers, " ".join(str(exc).split())[:200],
        )


def _between_batches(queries: list[StreamingQuery], stop_requested: threading.Event, limit_s: float = 30.0) -> None:
    """Wait (at most ``limit_s``) for a moment when no query runs a batch, so that stopping cuts none short."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and not stop_requested.is_set():
        if not any(q.isActive and q.status["isTriggerActive"] for q in queries):
            return
        time.sleep(0.05)


def _source_reset(spark, settings, failures, checkpoints: list[str]) -> bool:
    """Handle lost input under the checkpoints: True to start over, False to stop the job."""
    reasons = "; ".join(" ".join(str(error).split())[:1500] for _, error in failures)
    where = ", ".join(checkpoints)
    if settings.on_source_reset != "start-over":
        log.error(
            "input records were lost under the checkpoint, so the job stops instead of skipping them: %s. "
            "To process the topics from their beginning, set STREAMSTATE_ON_SOURCE_RESET=start-over (the checkpoints %s "
            "are moved aside, state starts empty) or delete those checkpoints; to investigate, keep them as they are",
            reasons, where,
        )
        return False
    suffix = "reset-" + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for checkpoint in checkpoints:
        files = CheckpointFiles(spark, checkpoint)
        if files.exists():
            log.warning("starting over (STREAMSTATE_ON_SOURCE_RESET=start-over): checkpoint %s moved to %s",
                        checkpoint, files.move_aside(suffix))
    log.warning("starting over from the beginning of the input topics after: %s", reasons)
    return True


def fork_python_processes(settings: Settings) -> bool:
    """Fork this process's server for the Python processes its Spark JVMs start on this machine
    (:func:`streamstate.fork_server.fork_for_children`): PySpark's daemon and transformWithState's
    pre-init process then come forked from a copy of this process, its imports done, instead of
    importing PySpark, pyarrow, pandas and the jobs again in the first batch (docs/profile.md).
    Only with ``settings.job_fork_python``, where this process starts the JVM on a local master
    and hashes strings as Spark's workers do (``PYTHONHASHSEED=0``, as ``streamstate up`` starts
    the jobs)."""
    from streamstate import fork_server
    from streamstate_jobs.code_shipping import is_local_master
    from streamstate_jobs.spark import master_to_set

    if not settings.job_fork_python or sys.flags.hash_randomization:
        return False
    master = master_to_set(settings, os.environ, {})
    if master is None or not is_local_master(master):
        return False
    return fork_server.fork_for_children(preload=["streamstate_jobs.registry"])


def run_job(spec: JobSpec, argv: list[str] | None = None) -> int:
    args, settings = parse_args(spec, argv)
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {spec.service} %(levelname)s %(message)s")
    from streamstate_jobs.metrics import JobMetrics
    from streamstate_jobs.spark import build_spark

    checkpoint = args.checkpoint or settings.checkpoint(spec.name)
    fork_python_processes(settings)  # before any thread of this process starts
    metrics = JobMetrics(spec, port=spec.port(settings), host=settings.metrics_host)

    def start_spark() -> tuple[SparkSession, SocketWatch | None]:
        """A session with the job's metrics listener, and the watch over its JVM's sockets."""
        session = build_spark(settings, app_name=f"streamstate-{spec.name}",
                              spark__sql__streaming__stopTimeout=str(int(QUERY_STOP_TIMEOUT_S * 1000)))
        metrics.attach(session)
        return session, SocketWatch.of(session, settings.job_jvm_socket_budget)

    spark, sockets = start_spark()
    stop_requested = threading.Event()

    def _stop(signum, frame):  # noqa: ARG001
        log.info("signal %s: stopping once the batch in flight ends (up to %gs; one cut short is re-run from the checkpoint "
                 "on restart)", signum, STOP_BATCH_WAIT_S)
        stop_requested.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        # A fence proves another copy of the job only with a batch in a checkpoint that this process
        # did not commit: librdkafka can also fence its own producer, asking for its producer id twice
        # when a restarted broker is still completing the id's previous transaction (librdkafka issue
        # 3928). So a fence without one restarts once; a second before a batch commits stops the job,
        # so that two copies started together cannot take turns failing each other's batches for long.
        budget, fence_budget = RestartBudget(settings.job_max_restarts), RestartBudget(max_restarts=1)
        while True:
            before = _last_commits(spark, spec, checkpoint)
            try:
                run = _run_queries(spark, settings, spec, checkpoint, args.available_now, metrics, stop_requested, sockets)
            except (BrokerUnreachable, SourceResetError) as exc:  # as the queries started: no answer, or lost input
                run = QueriesRun(failures=[(spec.name, exc)], new_jvm=False, completed=[-1] * len(spec.queries))
            failures = run.failures
            if run.new_jvm and not failures and not stop_requested.is_set() and sockets is not None:
                log.warning(
                    "the Spark JVM holds %d connections their other end closed, over its budget of %d (Spark 4.2.0 "
                    "leaks one per stateful task, SPARK-58932): moving to a new JVM; the job resumes from its checkpoint %s",
                    sockets.sockets, sockets.budget, checkpoint,
                )
                end_jvm(spark)
                spark, sockets = start_spark()
                metrics.jvm_restarted()
                continue
            if not failures or stop_requested.is_set():
                break
            if max(run.completed) >= 0:  # healthy until it failed
                budget.renew()
                fence_budget.renew()
            fenced = any(is_fenced(error) for _, error in failures)
            if any(_another_copy(error) for _, error in failures) or (
                fenced and (run.committed_by_another(before, _last_commits(spark, spec, checkpoint)) or fence_budget.next_delay() is None)
            ):
                # Restarting would make the two copies take turns failing each other's batches.
                log.error(
                    "another copy of this job runs on the checkpoint %s (it wrote the batch this one was writing, or took "
                    "over its output transactions). This copy stops; stop the other one to run this one",
                    checkpoint,
                )
                return 2
            if fenced:
                log.warning(
                    "the output transactions were fenced, and no other copy of this job has committed a batch to the "
                    "checkpoint %s: restarting once (a producer can fence itself when a broker restarts, librdkafka "
                    "issue 3928); fenced again before a batch commits, the job stops as another copy's",
                    checkpoint,
                )
            fatal = None if fenced else _fatal_output(failures)
            if fatal is not None:
                # A restart would meet the same refusal: the task's error says what it is and what to do.
                for name, error in failures:
                    log.error("query %s: %s", name, _condition_text(error, fatal.condition))
                log.error("the job stops (exit %d, %s): restarting it would meet the same error", fatal.exit_code, fatal.condition)
                return fatal.exit_code
            if any(is_source_reset(error) for _, error in failures):
                if not _source_reset(spark, settings, failures, _checkpoints(spec, checkpoint)):
                    return 2
                if budget.next_delay() is None:  # starting over counts as a restart: lost input again and again ends the job
                    log.error("input records were lost under the checkpoint %d times in a row; the job stops", budget.used + 1)
                    return 2
                continue
            delay = budget.next_delay()
            next_step = (
                "the job gives up"
                if delay is None
                else f"restarting from the checkpoint in {delay:.0f}s (restart {budget.used} of {budget.max_restarts})"
            )
            for name, error in failures:
                # A lost broker fails deep in the source with a long traceback: name it plainly.
                log.error("%s", failure_message(name, error, settings.kafka, checkpoint, next_step))
            if delay is None:
                log.error(
                    "giving up after %d restarts in a row. Check that the Kafka broker at %s is reachable and the log "
                    "above; restarting the job resumes from its checkpoint %s, losing nothing",
                    budget.used, settings.bootstrap_servers, checkpoint,
                )
                return 1
            if stop_requested.wait(delay):
                break
    except BatchMarkersMayHaveExpired as exc:  # the message says what to do
        log.error("%s", exc)
        return BatchMarkersMayHaveExpired.exit_code
    except (CheckpointError, TransactionsUnavailable) as exc:  # the message says what to do
        log.error("%s", exc)
        return 2
    finally:
        metrics.close()
        spark.stop()
    log.info("query %s stopped", spec.name)
    return 0


def job_main(spec: JobSpec) -> Callable[[], None]:
    """The console script of the job ``spec`` declares (``streamstate-<name>-job``)."""

    def main() -> None:
        sys.exit(run_job(spec))

    return main
