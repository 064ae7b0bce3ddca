"""Offline checks of docker-compose.kinesis.yml, the Kinesis overlay of the compose stack."""

from __future__ import annotations

import yaml

from streamstate_pipeline.settings import REPO_ROOT, Settings
from streamstate_pipeline.topics import load_topics
from tests.compose.compose_files import COMPOSE_FILE, compose_config_without_dot_env, image_tag

OVERLAY = REPO_ROOT / "docker-compose.kinesis.yml"


def merged() -> dict:
    """The overlay merged onto docker-compose.yml, as a user without a .env sees it."""
    result = compose_config_without_dot_env(COMPOSE_FILE, OVERLAY)
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


def test_the_overlay_adds_a_pinned_healthy_kinesis_server_and_points_the_jobs_at_it():
    services = merged()["services"]
    kinesis = services["kinesis"]
    assert image_tag(kinesis["image"]) not in (None, "latest")
    assert kinesis["mem_limit"]
    assert kinesis["healthcheck"]["test"]
    port = kinesis["environment"]["KINESIS_MOCK_PLAIN_PORT"]
    for name in ("sessions-job", "anomalies-job", "producers"):
        environment = services[name]["environment"]
        assert environment["STREAMSTATE_SOURCE"] == "kinesis"
        assert environment["STREAMSTATE_KINESIS_ENDPOINT_URL"] == f"http://kinesis:{port}"
        assert services[name]["depends_on"]["kinesis"]["condition"] == "service_healthy"


def test_the_server_creates_the_input_streams_with_the_topics_partition_counts():
    kinesis = yaml.safe_load(OVERLAY.read_text())["services"]["kinesis"]
    streams = dict(entry.split(":")[:2] for entry in kinesis["environment"]["INITIALIZE_STREAMS"].split(","))
    settings = Settings()
    topics = {t.name: t.partitions for t in load_topics(settings.topics_file)}
    assert {name: int(shards) for name, shards in streams.items()} == {
        name: topics[name] for name in (settings.topic_user_events, settings.topic_metrics)
    }
