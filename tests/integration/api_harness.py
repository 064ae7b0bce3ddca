"""Running the snapshot API as a real process against the test broker, and feeding it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from confluent_kafka import Producer

from streamstate_stack.launcher import free_port


@dataclass(frozen=True)
class ApiTopics:
    sessions: str
    series: str
    alerts: str

    def env(self) -> dict[str, str]:
        return {
            "STREAMSTATE_TOPIC_SESSION_STATE": self.sessions,
            "STREAMSTATE_TOPIC_METRIC_STATE": self.series,
            "STREAMSTATE_TOPIC_ALERTS": self.alerts,
        }


def make_topics(new_topic) -> ApiTopics:
    return ApiTopics(new_topic(2, "session-state"), new_topic(2, "metric-state"), new_topic(2, "alerts"))


def publish(bootstrap: str, topic: str, records: list[tuple[str | bytes | None, bytes | None]], partition: int | None = None) -> None:
    """Write (key, value) records and wait until the broker has them all."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    where = {} if partition is None else {"partition": partition}
    for key, value in records:
        while True:
            try:
                producer.produce(topic, key=key, value=value, **where)
                break
            except BufferError:  # librdkafka's local queue (100,000 records) is full: let it drain
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(30) == 0, "records not delivered"


class ApiProcess:
    """``python -m streamstate_api`` in its own process group, stopped by PID."""

    def __init__(self, bootstrap: str, topics: ApiTopics, log_path: Path, **settings: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        env = {
            **os.environ,
            "STREAMSTATE_BOOTSTRAP_SERVERS": bootstrap,
            "STREAMSTATE_API_HOST": "127.0.0.1",
            "STREAMSTATE_API_PORT": str(self.port),
            "PYTHONUNBUFFERED": "1",
            # Its own view store unless told (a restarted API is given its predecessor's).
            "STREAMSTATE_API_STORE_PATH": str(log_path.parent / f"api-store-{topics.sessions}"),
            **topics.env(),
            **{f"STREAMSTATE_{k.upper()}": v for k, v in settings.items()},
        }
        with open(log_path, "ab") as log:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "streamstate_api"],
                env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            )
        self.client = httpx.Client(base_url=self.url, timeout=10)

    def wait_listening(self, timeout_s: float = 30.0) -> None:
        self._wait(lambda: self.client.get("/healthz").status_code == 200, timeout_s, "answer /healthz")

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        self._wait(lambda: self.client.get("/readyz").status_code == 200, timeout_s, "become ready")

    def _wait(self, probe, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.popen.poll() is None, f"API exited with {self.popen.returncode}:\n{self.log_tail()}"
            try:
                if probe():
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"API did not {what} within {timeout_s}s:\n{self.log_tail()}")

    def get(self, path: str, **params) -> httpx.Response:
        return self.client.get(path, params=params)

    def metric(self, name: str, **labels: str) -> float | None:
        """The value of one sample on /metrics, or None when absent."""
        wanted = name + ("{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}" if labels else "")
        for line in self.client.get("/metrics").text.splitlines():
            if line.startswith("#"):
                continue
            sample, _, value = line.rpartition(" ")
            if _normalise(sample) == wanted:
                return float(value)
        return None

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        self.client.close()
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(5)


def _normalise(sample: str) -> str:
    """Label order as sorted, so lookups do not depend on the exposition order."""
    if "{" not in sample:
        return sample
    name, _, rest = sample.partition("{")
    labels = sorted(part for part in rest.rstrip("}").split(",") if part)
    return name + "{" + ",".join(labels) + "}"


def wait_until(condition, timeout_s: float = 20.0, what: str = "condition"):
    """Poll ``condition`` until it returns a truthy value; that value is returned."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


class InProcessApi:
    """The API app served by a real uvicorn server on a thread of the test's process (the same
    protocol and options as ``streamstate-api``), so a test can reach the parts behind the HTTP
    answers: which thread ran something, the follower thread itself. Use as a context manager."""

    SERVER_THREAD = "api-server"

    def __init__(self, settings):
        import uvicorn

        from streamstate_api.app import create_app
        from streamstate_api.timeouts import request_head_protocol

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.app = create_app(settings.model_copy(update={"api_host": "127.0.0.1", "api_port": self.port}))
        self.context = self.app.context
        protocol = request_head_protocol(settings.api_request_head_timeout_s, settings.api_max_request_head_bytes)
        config = uvicorn.Config(
            self.app, host="127.0.0.1", port=self.port, loop="uvloop", http=protocol,
            limit_concurrency=settings.api_max_connections, access_log=False, log_level="warning",
        )
        self.server = uvicorn.Server(config)
        self.client = httpx.Client(base_url=self.url, timeout=10)

    def __enter__(self) -> "InProcessApi":
        import threading

        self.thread = threading.Thread(target=self.server.run, name=self.SERVER_THREAD, daemon=True)
        self.thread.start()
        wait_until(lambda: self.server.started, 30, "the in-process server to start")
        return self

    def __exit__(self, *_) -> None:
        self.client.close()
        self.server.should_exit = True
        self.thread.join(30)

    def get(self, path: str, **params) -> httpx.Response:
        return self.client.get(path, params=params)

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        wait_until(lambda: self.get("/readyz").status_code == 200, timeout_s, "the in-process API to be ready")
