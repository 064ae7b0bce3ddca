"""JobMetrics against a real streaming query: the listener feeds what /metrics serves."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

import dataclasses

from streamstate.jobs.metrics import JobMetrics
from streamstate.jobs.registry import JOBS
from streamstate.stack.launcher import free_port
from tests.integration.addresses import external_address
from tests.integration.api_harness import wait_until

pytestmark = pytest.mark.spark


def scrape(port: int) -> dict[tuple[str, frozenset], float]:
    """name + labels -> value, as Prometheus would read it from the HTTP endpoint."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def job_named(name: str):
    """A declared job under another name: its metrics are apart from the real job's."""
    return dataclasses.replace(JOBS["anomalies"], name=name)


def value(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def test_listener_feeds_progress_metrics_over_http(spark, tmp_path):
    from pyspark.sql import functions as F

    port = free_port()
    metrics = JobMetrics(job_named("metrics-test"), port=port)
    listener = metrics.attach(spark)
    query = None
    try:
        windowed = (
            spark.readStream.format("rate").option("rowsPerSecond", 50).load()
            .withWatermark("timestamp", "3 seconds")
            .groupBy(F.window("timestamp", "2 seconds"))
            .count()
        )
        query = (
            windowed.writeStream.queryName("rate_counts").format("noop").outputMode("update")
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(processingTime="500 milliseconds")
            .start()
        )
        labels = {"job": "metrics-test", "query": "rate_counts"}
        samples = wait_until(
            lambda: (s := scrape(port))
            and (value(s, "streamstate_job_batches_total", **labels) or 0) >= 3
            and value(s, "streamstate_job_watermark_delay_seconds", **labels) is not None
            and (value(s, "streamstate_job_state_rows", **labels) or 0) > 0
            and s,
            timeout_s=60, what="three batches with state and a watermark",
        )
        assert value(samples, "streamstate_job_up", job="metrics-test") == 1
        assert value(samples, "streamstate_job_input_rows_total", **labels) > 0
        assert value(samples, "streamstate_job_state_memory_bytes", **labels) > 0
        assert value(samples, "streamstate_job_last_batch_id", **labels) >= 2
        # The rate source stamps rows with the clock: the watermark trails it by about the
        # 3 s delay plus a batch or two, never by hours and never ahead of it.
        assert 0 < value(samples, "streamstate_job_watermark_delay_seconds", **labels) < 120
        assert value(samples, "streamstate_job_processed_rows_per_second", **labels) >= 0

        metrics.alerts.labels(kind="anomaly").inc(2)
        metrics.dead_letters.labels(stage="clock_skew").inc()
        after = scrape(port)
        assert value(after, "streamstate_job_alerts_total", job="metrics-test", kind="anomaly") == 2
        assert value(after, "streamstate_job_dead_letters_total", job="metrics-test", stage="clock_skew") == 1

        query.stop()
        stopped = wait_until(
            lambda: (s := scrape(port)) and value(s, "streamstate_job_up", job="metrics-test") == 0 and s,
            timeout_s=60, what="streamstate_job_up to drop to 0 after the query stopped",
        )
        # Compared once no batch runs: a scrape is not atomic across metrics, and one taken while
        # a batch's progress is recorded can read the histogram before it and the counter after.
        batches = value(stopped, "streamstate_job_batches_total", **labels)
        assert value(stopped, "streamstate_job_batch_duration_seconds_count", **labels) == batches >= 3
    finally:
        if query is not None and query.isActive:
            query.stop()
        spark.streams.removeListener(listener)
        metrics.close()


def test_the_metrics_server_binds_loopback_unless_told_otherwise():
    """The README says every server binds 127.0.0.1 unless configured (the jobs' bound 0.0.0.0)."""
    import socket

    outside = external_address()
    port, everywhere = free_port(), free_port()
    JobMetrics(job_named("bind-test"), port=port)
    JobMetrics(job_named("bind-test-all"), port=everywhere, host="0.0.0.0")
    for open_port in (port, everywhere):
        socket.create_connection(("127.0.0.1", open_port), timeout=5).close()
    if outside is not None:
        socket.create_connection((outside, everywhere), timeout=5).close()  # the address reaches this machine
        with pytest.raises(OSError):
            socket.create_connection((outside, port), timeout=5).close()
