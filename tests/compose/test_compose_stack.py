"""The compose stack end to end, with testcontainers: the embedded e2e scenario on a cluster.

Brings up docker-compose.yml (everything but the demo producers, so the scenario is the
only traffic), produces the shared scenario of ``tests/scenario.py``, and asserts with
the same functions as the embedded end-to-end test: alerts on the alerts topic and the
API's REST snapshots. Then it checks the checkpoints are objects in the MinIO bucket,
restarts the sessions job's container and asserts it resumed from them: its state and
offsets survive (no output is re-emitted, the snapshots are unchanged) and it keeps
processing. Without a Docker engine every test here skips with the reason.
"""

from __future__ import annotations

import re
import subprocess
import time
import urllib.request

import pytest

from streamstate.settings import REPO_ROOT, Settings
from tests.compose.compose_files import ENV_EXAMPLE, compose, compose_defaults, throwaway_secrets

# .env as a user makes it: the example with the secrets set (written to a temporary file).
DEFAULTS = compose_defaults()
SECRETS = throwaway_secrets()
BOOTSTRAP = f"127.0.0.1:{DEFAULTS['KAFKA_HOST_PORT']}"
API_URL = f"http://127.0.0.1:{DEFAULTS['API_PORT']}"
AUTH = {"Authorization": f"Bearer {SECRETS['API_TOKEN']}"}
SCENARIO_SEED = 2026
# The demo producers would mix their traffic into the scenario's topics.
SERVICES = ["kafka", "topics", "minio", "minio-init", "spark-master", "spark-worker-1", "spark-worker-2",
            "sessions-job", "anomalies-job", "api", "prometheus", "grafana"]
HEALTHY_WITHIN_S = 900


def docker_unavailable_reason() -> str | None:
    """Why the compose tests cannot run here, or None when a Docker engine answers."""
    try:
        result = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        return "the docker CLI is not installed"
    except subprocess.TimeoutExpired:
        return "`docker info` did not answer within 30 s"
    if result.returncode != 0:
        lines = (result.stderr or result.stdout).strip().splitlines()
        return f"no Docker engine: `docker info` failed: {lines[-1] if lines else result.returncode}"
    return None


SKIP_REASON = docker_unavailable_reason()
pytestmark = [
    pytest.mark.docker,
    pytest.mark.timeout(3600),
    pytest.mark.skipif(SKIP_REASON is not None, reason=f"compose stack tests need Docker: {SKIP_REASON}"),
]


def wait_until_healthy(compose, services: list[str], timeout_s: float) -> None:
    """Every long-running service healthy, every one-shot service exited 0."""
    deadline = time.monotonic() + timeout_s
    while True:
        states = {c.Service: c for c in compose.get_containers(include_all=True)}
        pending = []
        for name in services:
            container = states.get(name)
            if container is None:
                pending.append(f"{name}: not created")
            elif container.State == "exited":
                if container.ExitCode != 0:
                    raise AssertionError(f"{name} exited with {container.ExitCode}:\n{compose.get_logs(name)[0][-3000:]}")
            elif container.Health != "healthy":
                pending.append(f"{name}: {container.State}/{container.Health or 'no health yet'}")
        if not pending:
            return
        if time.monotonic() > deadline:
            raise AssertionError("services not healthy in time: " + "; ".join(pending))
        time.sleep(5)


@pytest.fixture(scope="module")
def compose_stack(tmp_path_factory):
    from testcontainers.compose import DockerCompose

    env_file = tmp_path_factory.mktemp("compose") / ".env"
    text = ENV_EXAMPLE.read_text()
    for name, value in SECRETS.items():
        text = re.sub(rf"^{name}=$", f"{name}={value}", text, flags=re.MULTILINE)
    env_file.write_text(text)
    stack = DockerCompose(
        context=REPO_ROOT, compose_file_name=["docker-compose.yml"], build=True, wait=False, services=SERVICES,
        quiet_build=True, env_file=str(env_file),
    )
    stack.start()
    try:
        wait_until_healthy(stack, SERVICES, HEALTHY_WITHIN_S)
        yield stack
    finally:
        stack.stop()  # `down -v`: the next run starts from empty volumes


@pytest.fixture(scope="module")
def scenario_outputs(compose_stack):
    """The shared scenario produced into the compose stack, and what the stack made of it."""
    from tests.scenario import build_scenario, collect_outputs, produce_scenario

    topics = Settings(bootstrap_servers=BOOTSTRAP)
    scenario = build_scenario(SCENARIO_SEED)
    produce_scenario(BOOTSTRAP, scenario, topics)
    return scenario, collect_outputs(BOOTSTRAP, topics, api_url=API_URL, scenario=scenario, api_token=SECRETS["API_TOKEN"])


def topic_record_counts(topics: list[str]) -> dict[str, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": BOOTSTRAP, "group.id": "compose-test-counts"})
    try:
        metadata = consumer.list_topics(timeout=10)
        counts = {}
        for topic in topics:
            total = 0
            for partition in metadata.topics[topic].partitions:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
                total += high - low
            counts[topic] = total
        return counts
    finally:
        consumer.close()


def job_batches(compose, service: str, port: int) -> float:
    """streamstate_job_batches_total of a job, read inside its container (the port is not published)."""
    probe = (
        "import urllib.request; t = urllib.request.urlopen('http://localhost:%d/metrics', timeout=5).read().decode(); "
        "print(sum(float(l.split()[-1]) for l in t.splitlines() if l.startswith('streamstate_job_batches_total')))"
    ) % port
    stdout, stderr, code = compose.exec_in_container(["python", "-c", probe], service_name=service)
    assert code == 0, stderr
    return float(stdout.strip() or 0)


def api_sessions_page() -> bytes:
    request = urllib.request.Request(f"{API_URL}/sessions?limit=1000", headers=AUTH)
    return urllib.request.urlopen(request, timeout=10).read()


def test_scenario_alerts_and_snapshots_match(scenario_outputs):
    from tests.scenario import assert_outputs_match

    assert_outputs_match(*scenario_outputs, Settings(bootstrap_servers=BOOTSTRAP))


def test_checkpoints_are_objects_in_the_minio_bucket(compose_stack, scenario_outputs):
    bucket = DEFAULTS["S3_BUCKET"]
    listing, stderr, code = compose_stack.exec_in_container(
        ["sh", "-c", 'mc alias set probe http://localhost:9000 "$MINIO_ROOT_USER" "$MINIO_ROOT_PASSWORD" >/dev/null'
                     f" && mc ls --recursive probe/{bucket}/checkpoints/"],
        service_name="minio",
    )
    assert code == 0, stderr
    for job in ("sessions", "anomalies"):
        assert f"{job}/offsets/" in listing, f"no offset log of {job} in s3a://{bucket}/checkpoints:\n{listing}"
        assert f"{job}/commits/" in listing, f"no commit log of {job} in s3a://{bucket}/checkpoints"
        assert f"{job}/state/" in listing, f"no state store files of {job} in s3a://{bucket}/checkpoints"


def test_sessions_job_restart_resumes_its_state(compose_stack, scenario_outputs):
    settings = Settings()
    outputs_of_sessions = [settings.topic_sessions, settings.topic_alerts, settings.topic_session_state]
    before_counts = topic_record_counts(outputs_of_sessions)
    before_snapshot = api_sessions_page()

    subprocess.run(
        [*compose_stack.compose_command_property, "restart", "sessions-job"],
        cwd=REPO_ROOT, check=True, capture_output=True, timeout=300,
    )
    wait_until_healthy(compose_stack, ["sessions-job"], 600)
    port = int(compose()["services"]["sessions-job"]["environment"]["STREAMSTATE_SESSIONS_METRICS_PORT"])
    # Progress after the restart: the resumed query runs batches (empty ones included).
    deadline = time.monotonic() + 300
    while job_batches(compose_stack, "sessions-job", port) < 2:
        assert time.monotonic() < deadline, "the restarted sessions job runs no batches"
        time.sleep(5)

    # Restarted from its checkpoint, the job neither re-reads its input nor re-emits outputs:
    # a job that lost its offsets or state would write every session and alert again.
    assert topic_record_counts(outputs_of_sessions) == before_counts
    assert api_sessions_page() == before_snapshot
