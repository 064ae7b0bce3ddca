"""JobMetrics against a real streaming query: the listener feeds what /metrics serves."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

import dataclasses

from streamstate_jobs.metrics import JobMetrics
from streamstate_jobs.registry import JOBS
from streamstate_stack.launcher import free_port
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
    # Each progress crosses from the JVM as its JSON, one py4j call (PySpark's listener rebuilt
    # it field by field: a sixth of a core on the listener bus at two batches a second).
    received = []
    record_progress = metrics.record_progress
    metrics.record_progress = lambda progress: (received.append(progress), record_progress(progress))
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
        assert received and all(type(progress) is dict for progress in received), {type(p) for p in received}

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


def test_a_job_s_metrics_count_what_its_writer_tasks_wrote(spark, settings, new_topic, bootstrap, tmp_path):
    # The writer is the query's last step: its tasks' summaries reach the driver only in each
    # batch's progress (the observed metric), which the listener reads.
    from streamstate_jobs.runner import start_query
    from tests.integration.dead_letter_job import dead_letter_job
    from tests.state_queries import produce_json

    run = settings.model_copy(update={"topic_metrics": new_topic(1, "summary-in"), "topic_dead_letters": new_topic(1, "summary-out")})
    job = dead_letter_job("summary-test")
    produce_json(bootstrap, run.topic_metrics, [{"stage": "contract" if i % 3 else "clock_skew", "n": i} for i in range(12)])
    metrics = JobMetrics(job)
    listener = metrics.attach(spark)
    try:
        query = start_query(spark, run, job, str(tmp_path / "checkpoint"), available_now=True, metrics=metrics)
        query.awaitTermination(120)
        assert query.exception() is None, query.exception()
        sample = metrics.registry.get_sample_value
        wait_until(lambda: sample("streamstate_job_records_out_total", {"job": "summary-test", "topic": run.topic_dead_letters}) == 12,
                   timeout_s=60, what="the batch's progress to reach the listener")
        assert sample("streamstate_job_dead_letters_total", {"job": "summary-test", "stage": "contract"}) == 8
        assert sample("streamstate_job_dead_letters_total", {"job": "summary-test", "stage": "clock_skew"}) == 4
    finally:
        spark.streams.removeListener(listener)


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


def handler_threads() -> int:
    """Threads serving a connection (socketserver names them after process_request_thread)."""
    import threading

    return sum("process_request_thread" in thread.name for thread in threading.enumerate())


def closed_by_server(connection, answers: list | None = None) -> bool:
    """Whether the server closed ``connection`` (read to its end, a reset counts; a socket still
    open has nothing to read); what it answered first is appended to ``answers``."""
    import select

    if not select.select([connection], [], [], 0)[0]:
        return False
    received = b""
    try:
        while chunk := connection.recv(65536):  # the sockets block for 5 s at most
            received += chunk
    except OSError:
        pass
    if answers is not None:
        answers.append(received)
    return True


def test_idle_connections_are_capped_and_closed_after_the_read_timeout_and_a_scrape_still_works():
    """Issue 51: every idle socket held a thread for ever (500 of them: 502 threads after 30 s).
    Now at most ``max_connections`` are served at once (more are closed unanswered), one that sends
    nothing is closed after the read timeout, and a scrape among idle sockets is answered."""
    import socket

    cap, port = 8, free_port()
    metrics = JobMetrics(job_named("idle-test"), port=port, read_timeout_s=120.0, max_connections=cap)
    held = []
    try:
        held = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(cap)]
        wait_until(lambda: handler_threads() == cap, timeout_s=60, what="a thread for each idle socket within the cap")
        excess = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(100)]
        pending, answers = set(excess), []
        wait_until(
            lambda: not pending.difference_update({c for c in pending if closed_by_server(c, answers)}) and not pending,
            timeout_s=60, what="the connections past the cap to be answered and closed",
        )
        for connection in excess:
            connection.close()
        assert {answer.split(b"\r\n")[0] for answer in answers} == {b"HTTP/1.0 503 Service Unavailable"}
        assert handler_threads() == cap, "no thread for a connection past the cap"
        assert not any(closed_by_server(c) for c in held), "the idle sockets within the cap are still served"
        held.pop().close()
        wait_until(lambda: handler_threads() == cap - 1, timeout_s=60, what="a slot freed by a client that left")
        assert value(scrape(port), "streamstate_job_up", job="idle-test") == 0, "a scrape among idle sockets"
    finally:
        for connection in held:
            connection.close()
        metrics.close()

    port = free_port()
    metrics = JobMetrics(job_named("timeout-test"), port=port, read_timeout_s=0.5, max_connections=cap)
    try:
        idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(cap)]
        wait_until(lambda: all(closed_by_server(c) for c in idle), timeout_s=60, what="idle sockets closed after the read timeout")
        wait_until(lambda: handler_threads() == 0, timeout_s=60, what="their threads to end")
        partial = socket.create_connection(("127.0.0.1", port), timeout=5)
        partial.sendall(b"GET /metrics HTTP/1.1\r\n")  # a request that never ends
        wait_until(lambda: closed_by_server(partial), timeout_s=60, what="a half-sent request closed after the read timeout")
        assert value(scrape(port), "streamstate_job_up", job="timeout-test") == 0
    finally:
        metrics.close()
