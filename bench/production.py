"""The production path's figures: the sessions and anomalies throughput and the event-to-alert
latency on Apache Kafka (KRaft) with Spark's built-in connector (spark-sql-kafka-0-10) and
s3a:// checkpoints in MinIO.

The same protocol and the same fixed-seed datasets as the embedded figures
(:mod:`bench.sessions_throughput`, :mod:`bench.anomalies_throughput`, :mod:`bench.latency`),
in the same run and the same SparkSession (which carries the connector and S3A jars), so the
two sets of rows sit side by side. Both profiles run the same broker and connector and differ
only in where checkpoints go: here s3a:// in MinIO instead of the local disk. The latency
is measured again with Spark's own checkpoint file manager in place of spark-jobs/jvm/'s:
one PUT per checkpoint file against Spark's copy into place, side by side. The broker (a
second one of the same build, so the datasets start on fresh topics) and MinIO are the
production profile's native servers (:class:`streamstate_stack.launcher.EmbeddedStack` with
:data:`streamstate_stack.profiles.PRODUCTION`), started for this figure and stopped after it.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from bench import latency
from bench.anomalies_throughput import anomalies_job_once
from bench.dataset import produce_metrics, produce_user_events
from bench.measure import broker_description, connector_description, repeat
from bench.sessions_throughput import sessions_job_once
from streamstate_jobs.spark import CHECKPOINT_FILE_MANAGER, CHECKPOINT_FILE_MANAGER_KEY
from streamstate_stack.profiles import PRODUCTION
from streamstate_pipeline.settings import Settings
from streamstate_stack.launcher import EmbeddedStack

BUCKET = "streamstate"
SPARK_FILE_MANAGER = "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager"


def measure(spark, base: Settings, workdir: Path, args: argparse.Namespace, seed: int, warm_up_events: int) -> dict[str, Any]:
    from streamstate_jobs.kafka import require_connector
    from streamstate_jobs.spark import configure_s3a

    require_connector(spark)  # before any server starts: the bench's SparkSession must carry the connector's jars

    stack = EmbeddedStack(
        settings=base.model_copy(update={"checkpoint_root": f"s3a://{BUCKET}/bench"}),
        workdir=workdir / "production", quiet=True, profile=PRODUCTION,
    )
    try:
        stack.start_broker()  # Apache Kafka (KRaft), as under the embedded profile
        stack.start_object_store(BUCKET)  # what the production profile adds: MinIO, s3a:// checkpoints
        settings = stack.settings
        configure_s3a(spark, settings, stack.s3_credentials.env())
        os.environ.update(stack.s3_credentials.env())
        bootstrap = settings.bootstrap_servers
        started = time.perf_counter()
        events = produce_user_events(bootstrap, "bench-user-events", args.events, args.users, seed)
        points = produce_metrics(bootstrap, "bench-metrics", args.metrics, args.series, seed)
        produced_s = time.perf_counter() - started
        print(f"  Apache Kafka at {bootstrap}: datasets produced in {produced_s:.0f}s", flush=True)

        def checkpoint(name: str) -> str:
            return f"s3a://{BUCKET}/bench/{name}-{uuid.uuid4().hex[:8]}"

        def measure_latency(name: str) -> dict[str, Any]:
            return latency.measure(spark, settings, workdir, args.runs, args.latency_rate, args.latency_seconds,
                                   checkpoint=checkpoint(name), lead_in_s=args.latency_lead_in)

        # The first batches on s3a:// checkpoints pay S3A's class loading and connection pool: discarded.
        warm_events = produce_user_events(bootstrap, "bench-warm-up-user-events", warm_up_events, warm_up_events // 10, seed + 1)
        warm_points = produce_metrics(bootstrap, "bench-warm-up-metrics", warm_up_events, warm_up_events // 100, seed + 1)
        sessions_job_once(spark, settings, warm_events, checkpoint("warm-up-sessions"))
        anomalies_job_once(spark, settings, warm_points, checkpoint("warm-up-anomalies"))

        figures = {
            "broker": broker_description(),
            "kafka_connector": connector_description(spark),
            "checkpoints": f"s3a:// in MinIO {_version('MINIO_RELEASE')} (native, loopback)",
            "dataset_s": round(produced_s, 1),
            "sessions_job": repeat(args.runs, "sessions job (s3a:// checkpoints in MinIO)",
                                   lambda i: sessions_job_once(spark, settings, events, checkpoint(f"sessions-{i}"))),
            "anomalies_job": repeat(args.runs, "anomalies job (s3a:// checkpoints in MinIO)",
                                    lambda i: anomalies_job_once(spark, settings, points, checkpoint(f"anomalies-{i}"))),
            "latency": measure_latency("latency"),
        }
        if spark.conf.get(CHECKPOINT_FILE_MANAGER_KEY, None) == CHECKPOINT_FILE_MANAGER:
            print("  the same latency with Spark's checkpoint file manager (each file copied into place):", flush=True)
            figures["latency_spark_file_manager"] = _with_spark_file_manager(spark, lambda: measure_latency("latency-spark-manager"))
        return figures
    finally:
        stack.stop()


def _with_spark_file_manager(spark, once: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``once()`` with Spark's own checkpoint file manager (each file copied into place on S3)
    for the query it starts, where the session otherwise has spark-jobs/jvm/'s (one PUT a file)."""
    spark.conf.set(CHECKPOINT_FILE_MANAGER_KEY, SPARK_FILE_MANAGER)
    try:
        return once()
    finally:
        spark.conf.set(CHECKPOINT_FILE_MANAGER_KEY, CHECKPOINT_FILE_MANAGER)


def _version(key: str) -> str:
    from streamstate_pipeline.binaries import versions

    return versions()[key]
