"""The compose stack end to end, with testcontainers, on the images `make images` builds here.

Brings up docker-compose.yml with infra/docker/compose.local-images.yml (everything but the
demo producers, so the scenario is the only traffic; Grafana has no local image), with no
.env: the secrets are the ones the `secrets` service generates, and the JVMs run with the
stack's default ``JVM_OPTIONS`` (C1 only and the serial collector, as `make test` and `make
run` start theirs). Then, in one story:

1. the shared scenario of ``tests/scenario.py`` is produced in parts while a Spark worker
   and then the Kafka container are killed (``docker kill``) and started again;
2. the output topics and the API (through the generated bearer token) equal the plain-Python
   reference exactly, and the checkpoints are objects in the MinIO bucket;
3. ``docker compose down`` (volumes kept) and ``up``: the jobs resume from their S3
   checkpoints and re-emit nothing; the scenario's last part then brings the outputs to
   the reference again, so nothing was lost either;
4. the demo ``producers`` service: its outputs flow within a minute, every Prometheus target
   is up and every dashboard panel's query returns data through compose's Prometheus.

Kafka's own tools run inside the broker's container along the way, as users call them
(``docker compose exec kafka kafka-console-consumer.sh ... --isolation-level read_committed``).

Without a Docker engine every test here fails rather than skips unless DOCKER_TESTS=off is
set: `make test` starts one (infra/docker/engine.sh). testcontainers' DockerCompose drives
the compose CLI and starts no Ryuk container (its image cannot be pulled here); the stack is
torn down (``down -v``) explicitly, whatever the outcome, and before it starts (what a killed run left).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml

from streamstate_jobs.spark import CHECKPOINT_FILE_MANAGER, CHECKPOINT_FILE_MANAGER_KEY
from streamstate_pipeline.settings import REPO_ROOT, Settings
from streamstate_stack.launcher import free_port
from tests.compose.compose_files import (
    JVM_SERVICES,
    LOCAL_IMAGES_FILE,
    SECRET_READERS,
    SECRETS,
    Dockerfile,
    compose,
    compose_defaults,
)

PROJECT = "streamstate-compose-test"
PROMETHEUS_CONFIG = REPO_ROOT / "infra" / "prometheus" / "prometheus.yml"
SCENARIO_SEED = 2026
# The demo producers would mix their traffic into the scenario's topics; Grafana has no local image.
SERVICES = ["secrets", "kafka", "topics", "minio", "minio-init", "spark-master", "spark-worker-1", "spark-worker-2",
            "sessions-job", "anomalies-job", "api", "prometheus"]
JOB_METRICS_PORTS = {
    service: int(compose()["services"][service]["environment"][f"STREAMSTATE_{service.removesuffix('-job').upper()}_METRICS_PORT"])
    for service in ("sessions-job", "anomalies-job")
}
# The scenario in five parts: one before each fault, one after the down/up.
PARTS = 5
# Then the demo producers, as a plain `docker compose up` runs them: their outputs within this.
DEMO_OUTPUTS_WITHIN_S = 60
# Topics every minute of demo traffic writes to (closed sessions and alerts need longer).
DEMO_OUTPUTS = ("session-state", "metric-state", "event-counts")
HEALTHY_WITHIN_S = 600
CLASS_ARCHIVE = Dockerfile.read(REPO_ROOT / "spark-jobs" / "Dockerfile").args["CLASS_ARCHIVE"]


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


# An engine is part of `make test` (it starts one): a missing one fails these tests, unless the
# user opted out of the Docker tests (DOCKER_TESTS=off, e.g. on a machine without root).
OPTED_OUT = os.environ.get("DOCKER_TESTS", "").lower() == "off"
pytestmark = [
    pytest.mark.docker,
    pytest.mark.timeout(3600),
    pytest.mark.skipif(OPTED_OUT, reason="DOCKER_TESTS=off: the Docker tests were opted out of"),
]


class Phases:
    """Progress of the test's long steps on stderr (``pytest -s`` shows it): each step's name
    and how long it took, so a slower run says which step slowed."""

    def __init__(self) -> None:
        self.last = time.monotonic()

    def done(self, step: str) -> None:
        now = time.monotonic()
        print(f"[compose test] {step}: {now - self.last:.1f} s", file=sys.stderr, flush=True)
        self.last = now


class Stack:
    """The running compose project: its CLI, the host ports it publishes, its generated token."""

    def __init__(self, compose_stack, bootstrap: str, api_url: str, prometheus_port: int):
        self.compose, self.bootstrap, self.api_url = compose_stack, bootstrap, api_url
        self.prometheus_port = prometheus_port
        self.token = self.read_secret(SECRETS["API_TOKEN"])

    def cli(self, *arguments: str, timeout: float = 600) -> str:
        result = subprocess.run([*self.compose.compose_command_property, *arguments], cwd=REPO_ROOT,
                                capture_output=True, text=True, timeout=timeout)
        assert result.returncode == 0, f"docker compose {' '.join(arguments)}:\n{result.stderr[-3000:]}"
        return result.stdout

    def read_secret(self, name: str) -> str:
        return self.cli("exec", "-T", "api", "cat", f"/run/secrets/{name}").strip()

    def kill(self, service: str) -> None:
        """SIGKILL, as a crash: compose's restart policy leaves a killed container down."""
        container = self.compose.get_container(service).ID
        subprocess.run(["docker", "kill", container], check=True, capture_output=True, timeout=60)

    def wait_until_healthy(self, services: list[str], timeout_s: float = HEALTHY_WITHIN_S) -> None:
        """Every long-running service healthy, every one-shot service exited 0."""
        deadline = time.monotonic() + timeout_s
        while True:
            states = {c.Service: c for c in self.compose.get_containers(include_all=True)}
            pending = []
            for name in services:
                container = states.get(name)
                if container is None:
                    pending.append(f"{name}: not created")
                elif container.State == "exited":
                    if container.ExitCode != 0:
                        raise AssertionError(f"{name} exited with {container.ExitCode}:\n{self.cli('logs', name)[-3000:]}")
                elif container.Health != "healthy":
                    pending.append(f"{name}: {container.State}/{container.Health or 'no health yet'}")
            if not pending:
                return
            if time.monotonic() > deadline:
                raise AssertionError("services not healthy in time: " + "; ".join(pending))
            time.sleep(3)

    def job_batches(self, service: str) -> float:
        """streamstate_job_batches_total of a job, read inside its container (the port is not published)."""
        probe = (
            "import urllib.request; t = urllib.request.urlopen('http://localhost:%d/metrics', timeout=5).read().decode(); "
            "print(sum(float(l.split()[-1]) for l in t.splitlines() if l.startswith('streamstate_job_batches_total')))"
        ) % JOB_METRICS_PORTS[service]
        return float(self.cli("exec", "-T", service, "python", "-c", probe).strip() or 0)

    def batch_counts(self) -> dict[str, float]:
        return {service: self.job_batches(service) for service in JOB_METRICS_PORTS}

    def wait_for_batches_since(self, start: dict[str, float], timeout_s: float = 300) -> None:
        """Each job completed a batch since ``start`` (its :meth:`batch_counts`), which is taken
        before the data is sent: Spark runs no batch without new data, and a batch that ran
        between the send and a later baseline would be missed."""
        deadline = time.monotonic() + timeout_s
        for service in JOB_METRICS_PORTS:
            while self.job_batches(service) <= start[service]:
                assert time.monotonic() < deadline, f"{service} runs no batches:\n{self.cli('logs', '--tail', '60', service)}"
                time.sleep(3)

    def driver_properties(self, service: str) -> dict[str, str]:
        """The Spark properties of a job's driver, from its UI's REST API inside its container."""
        probe = (
            "import json, urllib.request; u = 'http://localhost:4040/api/v1/applications'; "
            "a = json.load(urllib.request.urlopen(u, timeout=30))[0]['id']; "
            "print(json.dumps(json.load(urllib.request.urlopen(f'{u}/{a}/environment', timeout=30))['sparkProperties']))"
        )
        return dict(json.loads(self.cli("exec", "-T", service, "python", "-c", probe)))

    def api_page(self, path: str) -> bytes:
        request = urllib.request.Request(f"{self.api_url}{path}", headers={"Authorization": f"Bearer {self.token}"})
        return urllib.request.urlopen(request, timeout=10).read()


def host_ports(names: list[str]) -> dict[str, int]:
    """A distinct free host port for each name, outside the kernel's ephemeral range (see free_port)."""
    chosen: dict[str, int] = {}
    while len(chosen) < len(names):
        port = free_port()
        if port not in chosen.values():
            chosen[names[len(chosen)]] = port
    return chosen


def up_failure(compose_stack, error: subprocess.CalledProcessError) -> str:
    """Why `up` failed, first line first (the line a test summary shows): compose's last
    error line, then each service that is neither healthy nor exited 0, with its log's tail."""
    stderr = (error.stderr or b"").decode(errors="replace").strip().splitlines()
    reason = next((line for line in reversed(stderr) if line.strip()), f"exit status {error.returncode}")
    lines = [f"`docker compose up` failed: {reason.strip()}"]
    for container in compose_stack.get_containers(include_all=True):
        state = f"{container.State} {container.Health or ''} exit {container.ExitCode}".strip()
        lines.append(f"  {container.Service}: {state}")
        if container.Health not in ("healthy", None) or (container.State == "exited" and container.ExitCode != 0):
            logs = subprocess.run([*compose_stack.compose_command_property, "logs", "--tail", "40", container.Service],
                                  cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
            lines.extend(f"    {line}" for line in (logs.stdout + logs.stderr).splitlines())
    return "\n".join([*lines, "compose's output:", *stderr[-40:]])


def missing_local_images() -> list[str]:
    """The images the stack runs that are not on this engine (never pulled: `make images` builds them)."""
    result = subprocess.run(
        ["docker", "compose", "-f", "docker-compose.yml", "-f", str(LOCAL_IMAGES_FILE), "config", "--images", *SERVICES],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    images = sorted(set(result.stdout.split()))
    return [image for image in images
            if subprocess.run(["docker", "image", "inspect", image], capture_output=True, timeout=60).returncode != 0]


@pytest.fixture(scope="module")
def stack(tmp_path_factory, heavy_stack_alone):  # never beside the crash tests: see heavy_stack_alone
    reason = docker_unavailable_reason()
    if reason is not None:
        pytest.fail(f"the compose test needs a Docker engine, which `make test` starts: {reason} "
                    "(DOCKER_TESTS=off opts out)")
    missing = missing_local_images()
    assert not missing, f"images not built: {missing}; run `make images` (images are never pulled)"

    from testcontainers.compose import DockerCompose

    # No .env: what a fresh clone runs. Only the published host ports are the test's own, so a
    # stack the user runs (or another test session) does not collide with this one.
    ports = host_ports(["KAFKA_HOST_PORT", "API_PORT", "GRAFANA_PORT", "PROMETHEUS_PORT", "MINIO_API_PORT",
                        "MINIO_CONSOLE_PORT", "SPARK_MASTER_UI_PORT"])
    env_file = tmp_path_factory.mktemp("compose") / "ports.env"
    env_file.write_text("".join(f"{name}={value}\n" for name, value in
                                {"COMPOSE_PROJECT_NAME": PROJECT, **ports}.items()))
    assert not set(SECRETS) & set(os.environ), "a secret set in the environment would bypass the generated ones"
    compose_stack = DockerCompose(
        context=REPO_ROOT, compose_file_name=["docker-compose.yml", str(LOCAL_IMAGES_FILE)], build=False, pull=False,
        wait=False, services=SERVICES, env_file=str(env_file),
    )
    # A run killed before its teardown (a killed pytest, Ctrl-C twice) leaves this project's volumes,
    # whose topics and checkpoints would carry that run's records into this one: the same scenario
    # twice, every metric counted twice (seen). The project is the test's own, so only its leftovers go.
    phases = Phases()
    compose_stack.stop()
    try:
        try:
            compose_stack.start()
        except subprocess.CalledProcessError as error:
            raise AssertionError(up_failure(compose_stack, error)) from None
        running = Stack(compose_stack, f"127.0.0.1:{ports['KAFKA_HOST_PORT']}", f"http://127.0.0.1:{ports['API_PORT']}",
                        ports["PROMETHEUS_PORT"])
        running.wait_until_healthy(SERVICES)
        phases.done("the stack up and healthy")
        yield running
    finally:
        compose_stack.stop()  # `down -v`: the next run starts from empty volumes


def assert_kafka_tools_work(stack: Stack, outputs) -> None:
    """Kafka's own tools, as users of the official image call them, inside the broker's container:
    a read_committed console consumer prints an alert the jobs wrote, and the consumer-groups and
    configs tools answer."""
    from streamstate_pipeline.contracts import Alert

    first = stack.cli(
        "exec", "-T", "kafka", "kafka-console-consumer.sh", "--bootstrap-server", "kafka:9092", "--topic", "alerts",
        "--from-beginning", "--isolation-level", "read_committed", "--max-messages", "1", "--timeout-ms", "60000",
    )
    alert = Alert.model_validate_json(first.strip().splitlines()[-1])
    assert alert.alert_id in outputs.alerts, f"the console consumer printed an alert the jobs did not write: {first[:500]}"
    groups = stack.cli("exec", "-T", "kafka", "kafka-consumer-groups.sh", "--bootstrap-server", "kafka:9092", "--list")
    assert groups.strip(), "kafka-consumer-groups.sh --list printed no group (the API's and the jobs' exist)"
    configs = stack.cli("exec", "-T", "kafka", "kafka-configs.sh", "--bootstrap-server", "kafka:9092",
                        "--describe", "--entity-type", "topics", "--entity-name", "session-state")
    assert "cleanup.policy=compact" in configs, configs[:1000]


def assert_spark_jvms_map_the_class_archive(stack: Stack) -> None:
    """Every Spark JVM of the image maps its class archive (spark-jobs/Dockerfile): the master, the
    workers and the executors they started, and the drivers. A JVM that refused the archive runs
    without it, silently; only its memory map tells."""
    for service, least in (("spark-master", 1), ("spark-worker-1", 2), ("spark-worker-2", 2),
                           ("sessions-job", 1), ("anomalies-job", 1)):
        listing = stack.cli("exec", "-T", service, "sh", "-c",
                            'for p in $(pgrep -x java); do grep -q "$0" /proc/$p/maps && echo "mapped $p" '
                            '|| echo "unmapped $p $(tr "\\0" " " < /proc/$p/cmdline | cut -c1-300)"; done', CLASS_ARCHIVE)
        lines = listing.splitlines()
        assert len(lines) >= least and all(line.startswith("mapped ") for line in lines), f"{service}:\n{listing}"
    # ...and the executors' Python workers start through the jobs' launcher (no jar on their path).
    daemons = stack.cli("exec", "-T", "spark-worker-1", "sh", "-c", "pgrep -af 'pyspark[.]daemon' || true")
    assert daemons and all("streamstate-spark-python" in line for line in daemons.splitlines()), daemons


def assert_every_jvm_compiles_with_c1_only(stack: Stack) -> None:
    """Every JVM of the stack runs with JVM_OPTIONS' default, C1 only (docker-compose.yml): no C2
    compiler thread in the broker, the master, the workers and the executors they started, or
    the drivers. A JVM that missed the options would compile with C2 as well; only its threads tell."""
    for service in JVM_SERVICES:
        threads = stack.cli("exec", "-T", service, "sh", "-c",
                            'for d in /proc/[0-9]*; do [ "$(cat $d/comm 2>/dev/null)" = java ] || continue; '
                            'echo "java ${d#/proc/}"; cat $d/task/*/comm | grep -i compiler; done')
        jvms = [line for line in threads.splitlines() if line.startswith("java ")]
        assert jvms and "C1 CompilerThre" in threads and "C2 CompilerThre" not in threads, f"{service}:\n{threads}"


def assert_the_master_ui_cannot_kill(stack: Stack) -> None:
    """The master's page lists the running jobs without kill links (SPARK_DAEMON_JAVA_OPTS)."""
    probe = "import urllib.request; print(urllib.request.urlopen('http://localhost:8080', timeout=5).read().decode())"
    page = stack.cli("exec", "-T", "spark-master", "python", "-c", probe)
    assert "streamstate-sessions" in page and "streamstate-anomalies" in page, page[:2000]
    assert "kill-link" not in page and "(kill)" not in page, "the master's UI offers kill links"


def topic_ends(bootstrap: str, topics: tuple[str, ...]) -> dict[str, int]:
    """The sum of each topic's partitions' end offsets, from the host."""
    from confluent_kafka import Consumer

    from streamstate_pipeline.kafka_clients import watermarks

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "compose-test-ends"})
    try:
        metadata = consumer.list_topics(timeout=30)
        partitions = [(topic, p) for topic in topics for p in metadata.topics[topic].partitions]
        ends: dict[str, int] = dict.fromkeys(topics, 0)
        for (topic, _), (_, end) in watermarks(consumer, partitions).items():
            ends[topic] += end
        return ends
    finally:
        consumer.close()


def assert_demo_load_flows(stack: Stack) -> None:
    """The demo producers (the compose service, as `docker compose up` runs it): the outputs
    flow within a minute, every Prometheus scrape target is up, every dashboard panel's query
    returns data through compose's own Prometheus, under compose's defaults, and the producers
    still run. Each check ends as soon as it holds."""
    from tests.dashboards import Prometheus, every_panel_query

    scrape_jobs = {job["job_name"] for job in yaml.safe_load(PROMETHEUS_CONFIG.read_text())["scrape_configs"]}
    prometheus = Prometheus(stack.prometheus_port)
    before = topic_ends(stack.bootstrap, DEMO_OUTPUTS)
    stack.cli("up", "--detach", "producers")
    try:
        stack.wait_until_healthy(["producers"])
        deadline = time.monotonic() + DEMO_OUTPUTS_WITHIN_S
        while True:
            stack.api_page("/sessions?limit=5")  # the API's request panels need requests
            after = topic_ends(stack.bootstrap, DEMO_OUTPUTS)
            still = [topic for topic in DEMO_OUTPUTS if after[topic] <= before[topic]]
            if not still or time.monotonic() > deadline:
                break
            time.sleep(5)
        assert not still, f"no output on {still} after {DEMO_OUTPUTS_WITHIN_S} s of demo traffic ({before} -> {after})"
        assert scrape_jobs <= prometheus.targets_up(), f"scrape targets down: {sorted(scrape_jobs - prometheus.targets_up())}"
        queries = every_panel_query()
        deadline = time.monotonic() + 120  # the panels' [1m] windows need a few scrapes of the traffic
        while (empty := prometheus.empty_queries(queries)) and time.monotonic() < deadline:
            stack.api_page("/alerts?limit=5")
            time.sleep(5)
        assert not empty, f"{len(empty)} of {len(queries)} dashboard queries return no data under compose:\n" + "\n".join(
            f"  - {q}: {q.expr}" for q in empty)
        state = stack.cli("ps", "--format", "{{.Service}} {{.State}}", "producers")
        assert "running" in state, f"the demo producers stopped: {state}\n{stack.cli('logs', '--tail', '40', 'producers')}"
    finally:
        stack.cli("stop", "producers")


def test_the_stack_stays_exact_through_kills_and_a_down_up(stack):
    from tests.scenario import Feeder, assert_outputs_match, build_scenario, collect_outputs

    settings = Settings(bootstrap_servers=stack.bootstrap)
    feeder = Feeder(stack.bootstrap, settings, build_scenario(SCENARIO_SEED), PARTS)
    phases = Phases()

    # 1. Faults mid-stream: a worker, then the broker, killed while the jobs process a part.
    # (The healthchecks already say each job's query runs; no batch runs before there is data.)
    batches = stack.batch_counts()
    feeder.feed(0)
    stack.wait_for_batches_since(batches)
    phases.done("the first part processed")
    assert_spark_jvms_map_the_class_archive(stack)
    assert_every_jvm_compiles_with_c1_only(stack)
    assert_the_master_ui_cannot_kill(stack)
    stack.kill("spark-worker-1")
    feeder.feed(1)
    stack.cli("start", "spark-worker-1")
    stack.wait_until_healthy(["spark-worker-1"])
    phases.done("a worker killed and back")
    feeder.feed(2)
    stack.kill("kafka")
    time.sleep(5)
    stack.cli("start", "kafka")
    stack.wait_until_healthy(["kafka", "sessions-job", "anomalies-job"])
    phases.done("the broker killed and back")
    feeder.feed(3)

    # 2. Exact: the output topics and the API against the reference of what was produced.
    outputs = collect_outputs(stack.bootstrap, settings, api_url=stack.api_url, scenario=feeder.scenario,
                              timeout_s=600, api_token=stack.token)
    assert_outputs_match(feeder.scenario, outputs, settings)
    phases.done("the outputs exact")
    bucket = compose_defaults()["S3_BUCKET"]
    listing = stack.cli(
        "exec", "-T", "minio", "sh", "-c",
        'printf "%s\\n%s\\n" "$MINIO_ROOT_USER" "$(cat "$MINIO_ROOT_PASSWORD_FILE")" | mc alias set probe http://localhost:9000 >/dev/null'
        f" && mc ls --recursive probe/{bucket}/checkpoints/",
    )
    for job in ("sessions", "anomalies"):
        for part in ("offsets", "commits", "state"):
            assert f"{job}/{part}/" in listing, f"no {part} of {job} in s3a://{bucket}/checkpoints:\n{listing[:2000]}"
    # ...by the jobs' own MinIO user, the only S3 credentials they hold: each running service
    # sees the secrets it needs and no other, 0400 and its own user's.
    for service in ("minio", "sessions-job", "anomalies-job", "api"):
        expected = sorted(file for file, readers in SECRET_READERS.items() if service in readers)
        found = stack.cli("exec", "-T", service, "sh", "-c", "cd /run/secrets && stat -c '%n %a %u' *").split("\n")
        whose = stack.cli("exec", "-T", service, "id", "-u").strip()
        assert sorted(filter(None, found)) == [f"{file} 400 {whose}" for file in expected], f"{service}: {found}"
    # ...written through spark-jobs/jvm/'s manager, one PUT a file (a class Spark could not load would have failed the jobs).
    for service in JOB_METRICS_PORTS:
        assert stack.driver_properties(service).get(CHECKPOINT_FILE_MANAGER_KEY) == CHECKPOINT_FILE_MANAGER, service

    # The worker's and the broker's kills failed tasks mid-write: their transactions were aborted.
    assert outputs.duplicates() == {}, f"a read_committed consumer sees records twice: {outputs.duplicates()}"
    assert_kafka_tools_work(stack, outputs)
    phases.done("checkpoints, secrets and Kafka's console tools checked")

    # 3. down (volumes kept) and up: the jobs resume from their S3 checkpoints. A job that lost
    # its offsets or state would read its input again and write every alert, closed session
    # and dead letter a second time; one that lost data would miss the last part's outputs.
    before = outputs
    snapshot = stack.api_page("/sessions?limit=1000")
    stack.cli("down")
    stack.cli("up", "--detach", *SERVICES)
    stack.wait_until_healthy(SERVICES)
    phases.done("down and up")
    assert stack.read_secret(SECRETS["API_TOKEN"]) == stack.token, "the generated token changed across down/up"
    # The API's container is new: it rebuilds its view from the state topics, then serves the same page.
    deadline = time.monotonic() + 120
    while (page := stack.api_page("/sessions?limit=1000")) != snapshot:
        assert time.monotonic() < deadline, f"the API serves other sessions after up:\n{page[:500]!r}"
        time.sleep(2)
    phases.done("the API's view rebuilt")

    feeder.feed(PARTS - 1)
    outputs = collect_outputs(stack.bootstrap, settings, api_url=stack.api_url, scenario=feeder.scenario,
                              timeout_s=600, api_token=stack.token)
    assert_outputs_match(feeder.scenario, outputs, settings)
    for field, records in outputs.copies.items():
        written, new = records - before.copies[field], len(getattr(outputs, field)) - len(getattr(before, field))
        assert written == new, f"{field}: {written} records written after up for {new} new ones"
    phases.done("the last part exact, nothing written twice")

    # 4. The demo traffic, the scrape targets and the dashboards, under compose's own defaults.
    assert_demo_load_flows(stack)
    phases.done("the demo traffic, scrape targets and dashboards")
