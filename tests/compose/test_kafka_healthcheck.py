"""The broker's healthcheck in both compose files (docker-compose.yml, compose.kafka-3.yml): one
Kafka ApiVersions request over bash's /dev/tcp, no JVM. The Kafka tool it replaced started a
JVM every 10 s for the broker's whole life (about 1.6 CPU-seconds each, 8% of a 2-core
machine). Run here as Docker runs it, against the suite's real broker and a closed port."""

from __future__ import annotations

import socket
import subprocess

import pytest
import yaml

from streamstate_pipeline.settings import REPO_ROOT
from tests.compose.compose_files import compose, run_healthcheck

KAFKA_3_FILE = REPO_ROOT / "infra" / "docker" / "compose.kafka-3.yml"


def healthchecks() -> dict[str, list[str]]:
    return {
        "docker-compose.yml": compose()["services"]["kafka"]["healthcheck"]["test"],
        "compose.kafka-3.yml": yaml.safe_load(KAFKA_3_FILE.read_text())["services"]["kafka-2"]["healthcheck"]["test"],
    }


def run_against(test: list[str], port: int) -> subprocess.CompletedProcess[str]:
    return run_healthcheck(test, 9092, port)


@pytest.mark.parametrize("name", sorted(healthchecks()))
def test_the_healthcheck_starts_no_jvm(name):
    assert not [part for part in healthchecks()[name] if "kafka-" in part or "java" in part]


@pytest.mark.parametrize("name", sorted(healthchecks()))
def test_a_running_broker_is_healthy(name, bootstrap):
    host, port = bootstrap.rsplit(":", 1)
    assert host in ("127.0.0.1", "localhost")
    result = run_against(healthchecks()[name], int(port))
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("name", sorted(healthchecks()))
def test_no_broker_is_unhealthy(name):
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    assert run_against(healthchecks()[name], port).returncode != 0


def test_a_listener_that_never_answers_is_unhealthy():
    """A port that accepts but sends nothing (a broker still starting) fails, not hangs (run_against's timeout)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        assert run_against(healthchecks()["docker-compose.yml"], silent.getsockname()[1]).returncode != 0
