"""The healthchecks of the services `docker compose up --wait` waits for in a chain (the Spark
master, the workers, the jobs, the API; the broker's is tests/compose/test_kafka_healthcheck.py):
bash over /dev/tcp every 5 s, run here as Docker runs them against real servers on the host
(the API's own process, the jobs' own metrics server, an HTTP server answering as told).

They were Python one-liners every 5-10 s: about 103 ms of CPU a check with the engine's exec,
against 47 ms for bash (measured on this machine's engine), and the broker and the jobs were
seen healthy 5 s after they were, on average."""

from __future__ import annotations

import socket
import subprocess
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from prometheus_client import CollectorRegistry, Gauge

from streamstate_jobs.metrics_server import serve_metrics
from streamstate_stack.launcher import free_port
from tests.compose.compose_files import compose, run_healthcheck

CHAINED = ("kafka", "spark-master", "spark-worker-1", "spark-worker-2", "sessions-job", "anomalies-job", "api")
HTTP_OK = {"spark-master": 8080, "spark-worker-1": 8081, "spark-worker-2": 8081, "api": 8000}
JOBS = {"sessions-job": ("sessions", 9101), "anomalies-job": ("anomalies", 9102)}


def healthcheck(service: str) -> dict:
    return compose()["services"][service]["healthcheck"]


def seconds(duration: str) -> float:
    assert duration.endswith("s") and duration[:-1].isdigit(), duration
    return float(duration[:-1])


def run_against(service: str, port: int, in_container: int) -> subprocess.CompletedProcess[str]:
    return run_healthcheck(healthcheck(service)["test"], in_container, port)


@pytest.mark.parametrize("service", CHAINED)
def test_each_chained_check_runs_bash_every_5_s_and_tolerates_a_minute_of_failures(service):
    check = healthcheck(service)
    assert check["test"][:2] == ["CMD", "bash"], "no Python or JVM started by a check"
    assert seconds(check["interval"]) <= 5
    assert seconds(check["interval"]) * check["retries"] >= 60, "as many seconds of failing checks as before"


@contextmanager
def http_server(status: int) -> Iterator[int]:
    """A real HTTP server on an ephemeral port answering every GET with ``status``."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's interface
            self.send_response(status)
            self.end_headers()
            self.wfile.write(b"page")

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("service", sorted(HTTP_OK))
def test_an_http_check_passes_on_200_only(service):
    with http_server(200) as port:
        assert run_against(service, port, HTTP_OK[service]).returncode == 0
    with http_server(503) as port:
        assert run_against(service, port, HTTP_OK[service]).returncode != 0
    assert run_against(service, free_port(), HTTP_OK[service]).returncode != 0


def test_an_http_check_fails_on_a_server_that_never_answers():
    """Within the check's own read timeout (3 s), so every service is checked at once."""
    with socket.socket() as silent:  # accepts (the kernel's backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(len(HTTP_OK))
        port = silent.getsockname()[1]
        with ThreadPoolExecutor(len(HTTP_OK)) as pool:
            codes = dict(zip(HTTP_OK, pool.map(lambda service: run_against(service, port, HTTP_OK[service]).returncode, HTTP_OK)))
    assert all(code != 0 for code in codes.values()), codes


def test_the_api_check_passes_on_the_apis_own_server(bootstrap, new_topic, tmp_path):
    from tests.integration.api_harness import ApiProcess, make_topics

    api = ApiProcess(bootstrap, make_topics(new_topic), tmp_path / "api.log")
    try:
        api.wait_listening()
        result = run_against("api", api.port, HTTP_OK["api"])
        assert result.returncode == 0, result.stderr
    finally:
        api.stop()


@pytest.mark.parametrize("service", sorted(JOBS))
def test_a_job_check_passes_while_its_own_job_is_up(service):
    """Against the jobs' own metrics server: healthy while ``streamstate_job_up`` of this job is 1,
    not while it is 0, nor on the other job's line."""
    job, in_container = JOBS[service]
    registry = CollectorRegistry()
    up = Gauge("streamstate_job_up", "up", ["job"], registry=registry)
    server = serve_metrics(registry, "127.0.0.1", 0)
    port = server.server_address[1]
    try:
        up.labels(job=job).set(1)
        result = run_against(service, port, in_container)
        assert result.returncode == 0, result.stderr
        up.labels(job=job).set(0)
        assert run_against(service, port, in_container).returncode != 0
        up.remove(job)
        up.labels(job="sessions" if job == "anomalies" else "anomalies").set(1)
        assert run_against(service, port, in_container).returncode != 0
    finally:
        server.shutdown()
        server.server_close()
    assert run_against(service, free_port(), in_container).returncode != 0
