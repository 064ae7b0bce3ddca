"""An input topic deleted and created again under a job's checkpoint, then refilled past the
checkpointed offsets while the job was down: offsets alone look fine, yet reading on would
skip the new topic's first records. The job (a real process) must stop with exit code 2 and
say what happened; told to start over, it moves the checkpoint aside and processes the new
topic from its first record."""

from __future__ import annotations

import json
import time

import pytest
from confluent_kafka.admin import AdminClient

from tests.state_queries import produce_json
from streamstate_pipeline.kafka_clients import KafkaConnection
from streamstate_pipeline.topics import TopicSpec, create_topics
from tests.integration.api_harness import wait_until
from tests.scenario import read_topic

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def points(series: str, count: int, start_ts: int, base: float) -> list[dict]:
    return [{"series_id": series, "ts": start_ts + i * 1000, "value": base + i % 7} for i in range(count)]


def latest(bootstrap: str, topic: str, series: str) -> tuple[int, float] | None:
    """(count, min) of the series' latest snapshot."""
    states = [m.value() for m in read_topic(bootstrap, topic, idle_s=0.5) if m.key() == series.encode()]
    if not states or states[-1] is None:
        return None
    state = json.loads(states[-1])
    return state["count"], state["min"]


def recreate(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(30)
    deadline = time.monotonic() + 30
    while True:  # deletion completes asynchronously on some brokers
        try:
            create_topics(KafkaConnection(bootstrap), [TopicSpec(topic, 1, {})])
            return
        except Exception:  # noqa: BLE001 - still being deleted
            assert time.monotonic() < deadline, f"could not recreate {topic}"
            time.sleep(0.5)


def test_a_recreated_topic_stops_the_job_or_is_read_from_its_start(pipeline_stack, bootstrap, new_topic):
    stack = pipeline_stack
    metrics_topic = new_topic(1, "metrics")
    stack.settings = stack.settings.model_copy(update={"topic_metrics": metrics_topic})
    settings = stack.settings

    produce_json(bootstrap, metrics_topic, points("s", 50, 1_700_000_000_000, 0.0), key_field="series_id")
    job = stack.start_job("anomalies")
    wait_until(lambda: latest(bootstrap, settings.topic_metric_state, "s") == (50, 0.0), 300, f"the first run:\n{job.tail()}")
    job.stop()

    recreate(bootstrap, metrics_topic)
    produce_json(bootstrap, metrics_topic, points("s", 120, 1_700_100_000_000, 100.0), key_field="series_id")

    job = stack.start_job("anomalies")
    wait_until(lambda: not job.alive(), 300, f"the job to stop on the recreated topic:\n{job.tail()}")
    assert job.popen.returncode == 2, job.tail(60)
    log = job.tail(200)
    assert "was deleted and created again" in log and "STREAMSTATE_ON_SOURCE_RESET=start-over" in log, log
    assert latest(bootstrap, settings.topic_metric_state, "s") == (50, 0.0), "nothing of the new topic may be applied"

    stack.settings = settings.model_copy(update={"on_source_reset": "start-over"})
    job = stack.start_job("anomalies")
    # A fresh state from the new topic's first record: 120 values, all >= 100 (reading on from the
    # old offsets would add only the last 70 to the old state, whose minimum is 0).
    wait_until(lambda: latest(bootstrap, settings.topic_metric_state, "s") == (120, 100.0), 300, f"starting over:\n{job.tail()}")
    assert job.alive(), job.tail(40)
    assert "moved to" in job.tail(400)
    job.stop()
