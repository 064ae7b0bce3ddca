"""Command line and lifecycle shared by the two jobs: settings, Spark, metrics, one query.

A job is a function ``build(spark, settings) -> DataFrame`` of (kind, key, payload)
rows; the runner starts the streaming query that routes those rows to Kafka, exports
metrics, stops cleanly on SIGTERM/Ctrl-C (the current batch finishes, offsets and state
are committed together) and exits non-zero with the error when the query fails.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from typing import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from streamstate.jobs.checkpoints import StatePartitionsChanged, check_state_partitions
from streamstate.jobs.outage import failure_message
from streamstate.settings import Settings

log = logging.getLogger("streamstate.jobs")

JobBuilder = Callable[[SparkSession, Settings], DataFrame]
# name -> (builder of (kind, key, payload) rows, output mode): secondary queries of a job
ExtraQueries = dict[str, tuple[JobBuilder, str]]


def parse_args(job: str, description: str, argv: list[str] | None) -> tuple[argparse.Namespace, Settings]:
    parser = argparse.ArgumentParser(
        prog=f"streamstate-{job}-job",
        description=description,
        epilog="Every option defaults to its STREAMSTATE_* setting (see README, Configuration).",
    )
    parser.add_argument("--bootstrap-servers", help="Kafka bootstrap servers")
    parser.add_argument("--master", help="Spark master URL: local[N], spark://host:7077, k8s://...")
    parser.add_argument("--checkpoint", help=f"checkpoint location (default: <checkpoint_root>/{job})")
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
        "bootstrap_servers": args.bootstrap_servers,
        "spark_master": args.master,
        "trigger_interval": args.trigger,
        "max_offsets_per_trigger": args.max_offsets_per_trigger,
        "shuffle_partitions": args.shuffle_partitions,
        f"{job}_metrics_port": args.metrics_port,
    }
    try:
        settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValueError as exc:
        parser.error(" ".join(str(exc).split()))
    return args, settings


def start_query(
    spark: SparkSession,
    settings: Settings,
    job: str,
    build: JobBuilder,
    checkpoint: str,
    available_now: bool = False,
    metrics=None,
    output_mode: str = "append",
) -> StreamingQuery:
    """Start one of a job's streaming queries (also used in-process by the tests).

    Raises :class:`StatePartitionsChanged` when ``checkpoint`` was written with a state
    partition count other than ``settings.shuffle_partitions`` (Spark would silently keep the old one).
    """
    from streamstate.jobs.routing import batch_router

    check_state_partitions(spark, checkpoint, settings.shuffle_partitions)
    writer = (
        build(spark, settings)
        .writeStream.queryName(job)
        .outputMode(output_mode)
        .option("checkpointLocation", checkpoint)
        .foreachBatch(batch_router(settings, metrics))
    )
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime=settings.trigger_interval)
    return writer.start()


def _run_queries(spark, settings, job, build, extra, checkpoint, available_now, metrics, stop_requested):
    """Run the job's queries until stopped, drained (availableNow) or failed; returns the failures."""
    query = start_query(spark, settings, job, build, checkpoint, available_now=available_now, metrics=metrics)
    secondary = [
        start_query(spark, settings, name, builder, f"{checkpoint}-{name}", available_now, metrics, mode)
        for name, (builder, mode) in (extra or {}).items()
    ]
    log.info("query %s started: checkpoint %s, broker %s", job, checkpoint, settings.bootstrap_servers)
    queries = [query, *secondary]
    try:
        # availableNow: wait for every query to drain; otherwise any query ending ends the run.
        while not stop_requested.is_set() and (
            any(q.isActive for q in queries) if available_now else all(q.isActive for q in queries)
        ):
            stop_requested.wait(1)
    finally:
        for running in queries:
            if running.isActive:
                running.stop()
    return [(q.name, q.exception()) for q in queries if q.exception() is not None]


def run_job(
    job: str, description: str, build: JobBuilder, extra: ExtraQueries | None = None, argv: list[str] | None = None
) -> int:
    args, settings = parse_args(job, description, argv)
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {job}-job %(levelname)s %(message)s")
    from streamstate.jobs.metrics import JobMetrics
    from streamstate.jobs.spark import build_spark

    checkpoint = args.checkpoint or settings.checkpoint(job)
    spark = build_spark(settings, app_name=f"streamstate-{job}")
    metrics = JobMetrics(job=job, port=getattr(settings, f"{job}_metrics_port"))
    metrics.attach(spark)
    stop_requested = threading.Event()

    def _stop(signum, frame):  # noqa: ARG001
        log.info("signal %s: stopping; a batch cut short is re-run from the checkpoint on restart", signum)
        stop_requested.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    try:
        for attempt in range(settings.job_max_restarts + 1):
            failures = _run_queries(spark, settings, job, build, extra, checkpoint, args.available_now, metrics, stop_requested)
            if not failures or stop_requested.is_set():
                break
            delay = min(60.0, 5.0 * 2**attempt)
            next_step = (
                "the job gives up"
                if attempt == settings.job_max_restarts
                else f"restarting from the checkpoint in {delay:.0f}s (restart {attempt + 1} of {settings.job_max_restarts})"
            )
            for name, error in failures:
                # A lost broker fails deep in the source with a long traceback: name it plainly.
                log.error("%s", failure_message(name, error, settings.bootstrap_servers, checkpoint, next_step))
            if attempt == settings.job_max_restarts:
                log.error(
                    "giving up after %d restarts. Check that the Kafka broker at %s is reachable and the log above; "
                    "restarting the job resumes from its checkpoint %s, losing nothing",
                    attempt, settings.bootstrap_servers, checkpoint,
                )
                return 1
            if stop_requested.wait(delay):
                break
    except StatePartitionsChanged as exc:
        log.error("%s", exc)
        return 2
    finally:
        metrics.close()
        spark.stop()
    log.info("query %s stopped", job)
    return 0


def main_for(job: str, description: str, build: JobBuilder, extra: ExtraQueries | None = None) -> Callable[[], None]:
    def main() -> None:
        sys.exit(run_job(job, description, build, extra))

    return main
