"""progress_sample: what one StreamingQueryProgress turns into (no JVM needed)."""

from __future__ import annotations

import uuid

import pytest
from pyspark.sql.streaming.listener import StreamingQueryProgress

from streamstate_jobs.metrics import JobMetrics, progress_sample, source_lag
from streamstate_jobs.registry import JOBS
from streamstate_pipeline.settings import Settings


def state_operator(name: str, rows: int, memory: int) -> dict:
    return {
        "operatorName": name, "numRowsTotal": rows, "numRowsUpdated": 0, "allUpdatesTimeMs": 0,
        "numRowsRemoved": 0, "allRemovalsTimeMs": 0, "commitTimeMs": 0, "memoryUsedBytes": memory,
        "numRowsDroppedByWatermark": 0, "numShufflePartitions": 4, "numStateStoreInstances": 4,
    }


def progress_json(**overrides) -> dict:
    base = {
        "id": str(uuid.uuid4()),
        "runId": str(uuid.uuid4()),
        "name": "sessions",
        "timestamp": "2026-01-01T12:00:10.000Z",
        "batchId": 7,
        "batchDuration": 1500,
        "numInputRows": 120,
        "inputRowsPerSecond": 60.0,
        "processedRowsPerSecond": 80.0,
        "durationMs": {"triggerExecution": 1500},
        "eventTime": {"watermark": "2026-01-01T12:00:00.000Z"},
        "stateOperators": [state_operator("a", 10, 1000), state_operator("b", 5, 24)],
        "sources": [
            {
                "description": "kafka",
                "startOffset": {"user-events": {"0": 0, "1": 0}},
                "endOffset": {"user-events": {"0": 50, "1": 70}},
                "latestOffset": {"user-events": {"0": 60, "1": 70}},
                "numInputRows": 120,
                "inputRowsPerSecond": 60.0,
                "processedRowsPerSecond": 80.0,
            }
        ],
        "sink": {"description": "kafka", "numOutputRows": 3},
    }
    base.update(overrides)
    return base


def test_sample_sums_state_operators_and_measures_watermark_delay():
    sample = progress_sample(StreamingQueryProgress.fromJson(progress_json()))
    assert sample.query == "sessions"
    assert sample.batch_id == 7
    assert sample.input_rows == 120
    assert sample.batch_duration_seconds == pytest.approx(1.5)
    assert sample.state_rows == 15
    assert sample.state_memory_bytes == 1024
    assert sample.watermark_delay_seconds == pytest.approx(10.0)
    assert sample.source_lag == {"user-events": 10}


def test_the_progress_json_as_parsed_gives_the_same_sample():
    """The jobs' listener hands over the JVM's progress JSON, parsed: the same figures as PySpark's object."""
    as_json = progress_json()
    assert progress_sample(as_json) == progress_sample(StreamingQueryProgress.fromJson(as_json))
    assert progress_sample(as_json).source_lag == {"user-events": 10}


def test_epoch_watermark_means_no_delay_yet():
    raw = progress_json(eventTime={"watermark": "1970-01-01T00:00:00.000Z"})
    assert progress_sample(StreamingQueryProgress.fromJson(raw)).watermark_delay_seconds is None


def test_unnamed_query_is_labelled_by_its_id():
    raw = progress_json(name=None)
    assert progress_sample(raw).query == raw["id"]


@pytest.mark.parametrize(
    "end, latest, expected",
    [
        ('{"t": {"0": 5}}', '{"t": {"0": 9}}', {"t": 4}),
        # A broker under-reporting its end must not produce negative lag.
        ('{"t": {"0": 9}}', '{"t": {"0": 5}}', {"t": 0}),
        # Offsets of a non-Kafka source are not lag.
        ("42", "43", {}),
        ("not json", '{"t": {"0": 1}}', {}),
        ('{"t": {"0": "x"}}', '{"t": {"0": 1}}', {}),
    ],
)
def test_source_lag_reads_only_kafka_shaped_offsets(end, latest, expected):
    assert source_lag([{"endOffset": end, "latestOffset": latest}]) == expected


def test_known_label_values_exist_before_the_first_increment():
    metrics = JobMetrics(JOBS["sessions"])
    kinds = {
        s.labels["kind"]
        for family in metrics.registry.collect()
        if family.name == "streamstate_job_alerts"
        for s in family.samples
        if s.name.endswith("_total")
    }
    assert kinds == {"bot_burst", "purchase_without_view", "long_session"}
    assert metrics.registry.get_sample_value("streamstate_job_up", {"job": "sessions"}) == 0


def test_records_out_binds_the_job_label():
    metrics = JobMetrics(JOBS["anomalies"])
    metrics.records_out.labels(topic="alerts").inc(3)
    assert metrics.registry.get_sample_value(
        "streamstate_job_records_out_total", {"job": "anomalies", "topic": "alerts"}
    ) == 3


def test_session_end_reasons_follow_the_closed_session_contract():
    metrics = JobMetrics(JOBS["sessions"])
    for reason in ("logout", "timeout"):
        assert metrics.registry.get_sample_value("streamstate_sessions_closed_total", {"ended_by": reason}) == 0


def _summary(*rows):
    keys = ("kind", "label", "counter", "rows", "total")
    return [dict(zip(keys, row)) for row in rows]


def test_a_batch_feeds_the_counters_and_gauges_the_job_declares():
    """The sessions job's own series (closed by reason, open, events per window) come from its
    declaration: routing hands every job's batch summary over in one shape."""
    metrics = JobMetrics(JOBS["sessions"])
    topics = JOBS["sessions"].output_topics(Settings())
    metrics.count_batch(
        _summary(
            ("count", None, "sessions_opened", 2, 5),
            ("count", None, "sessions_closed:logout", 1, 2),
            ("count", None, "late_events", 1, 3),
            ("session", None, None, 2, None),
            ("alert", "bot_burst", None, 1, None),
            ("dead_letter", "late", None, 3, None),
            ("dead_letter", None, None, 2, None),
        ),
        topics,
    )
    value = metrics.registry.get_sample_value
    assert value("streamstate_sessions_closed_total", {"ended_by": "logout"}) == 2
    assert value("streamstate_sessions_closed_total", {"ended_by": "timeout"}) == 0
    assert value("streamstate_sessions_open", {}) == 3
    assert value("streamstate_job_late_events_total", {"job": "sessions"}) == 3
    assert value("streamstate_job_alerts_total", {"job": "sessions", "kind": "bot_burst"}) == 1
    assert value("streamstate_job_dead_letters_total", {"job": "sessions", "stage": "late"}) == 3
    assert value("streamstate_job_dead_letters_total", {"job": "sessions", "stage": "state"}) == 2  # no stage: the state layer's
    assert value("streamstate_job_records_out_total", {"job": "sessions", "topic": "sessions"}) == 2

    metrics.count_batch(_summary(("count", None, "sessions_closed:timeout", 1, 9)), topics)
    assert value("streamstate_sessions_open", {}) == 0  # never below zero after a restart

    metrics.read_rows("event_count", [
        {"type": "click", "window_start": 0, "window_end": 60, "count": 7},
        {"type": "click", "window_start": 60, "window_end": 120, "count": 2},
        {"type": "login", "window_start": 60, "window_end": 120, "count": 1},
    ])
    assert value("streamstate_events_in_window", {"type": "click"}) == 2
    assert value("streamstate_events_in_window", {"type": "login"}) == 1


def test_the_anomalies_job_has_no_session_series():
    metrics = JobMetrics(JOBS["anomalies"])
    names = {family.name for family in metrics.registry.collect()}
    assert "streamstate_sessions_open" not in names and "streamstate_sessions_closed" not in names


def test_a_batch_s_observed_writer_summaries_are_counted_from_its_progress():
    """The jobs' writer tasks hand their summaries to the driver in the progress, as an observed
    metric whose rows are the summary's (the JSON Spark gives a progress event)."""
    from streamstate_jobs.routing import OUTPUT_SUMMARY

    metrics = JobMetrics(JOBS["anomalies"])
    metrics.writes_to(JOBS["anomalies"].output_topics(Settings()))
    rows = [
        {"kind": "alert", "label": "spike", "counter": None, "rows": 2, "total": None, "payload": None},
        {"kind": "alert", "label": "spike", "counter": None, "rows": 1, "total": None, "payload": None},  # another task's
        {"kind": "metric_state", "label": None, "counter": None, "rows": 5, "total": None, "payload": None},
    ]
    metrics.record_progress(progress_json(observedMetrics={OUTPUT_SUMMARY: {"rows": rows}}))
    metrics.record_progress(progress_json())  # a batch without the metric (another query's) counts nothing
    value = metrics.registry.get_sample_value
    assert value("streamstate_job_alerts_total", {"job": "anomalies", "kind": "spike"}) == 3
    assert value("streamstate_job_records_out_total", {"job": "anomalies", "topic": Settings().topic_metric_state}) == 5
