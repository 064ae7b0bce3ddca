"""Acceptance of issue 7: every number on the Grafana dashboards is real.

The whole stack runs (both Spark jobs on Apache Kafka with Spark's built-in connector, the
API, real Prometheus, the demo producers) on topics of its own, and every PromQL expression of every
dashboard panel is evaluated through Prometheus' HTTP API until each returns data.
Panels that stay empty are reported together, by dashboard and panel title.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.dashboards import PanelQuery, Prometheus, every_panel_query
from streamstate_pipeline.settings import REPO_ROOT
from streamstate_stack.launcher import EmbeddedStack, free_port
from streamstate_pipeline.topics import TopicSpec, create_topics, load_topics

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

SCRAPE_JOBS = ("prometheus", "api", "sessions", "anomalies")
# Prometheus scrapes every 2 s and the panels use [1m] windows: a couple of minutes of
# traffic is plenty; the deadline only bounds a broken stack.
DATA_DEADLINE_S = 300
PRODUCER_ARGS = (
    "demo", "--events-rate", "150", "--metrics-rate", "100", "--users", "100", "--series", "10",
    "--malformed", "0.02", "--anomaly-rate", "0.01", "--seed", "7",
)
# The fields of Settings that name pipeline topics, and the topic-file entry of each.
TOPIC_FIELDS = {
    "topic_user_events": "user-events", "topic_metrics": "metrics", "topic_alerts": "alerts",
    "topic_sessions": "sessions", "topic_session_state": "session-state",
    "topic_metric_state": "metric-state", "topic_dead_letters": "dead-letters",
    "topic_event_counts": "event-counts",
}


def ensure_prometheus() -> str:
    """The prometheus binary; installs Debian's package where it is absent."""
    if shutil.which("prometheus") is None:
        script = REPO_ROOT / "infra" / "install-test-deps.sh"
        result = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=600)
        if result.returncode != 0 or shutil.which("prometheus") is None:
            pytest.fail(f"Prometheus is needed and {script} could not install it: {result.stderr.strip()[-500:]}")
    return shutil.which("prometheus")


def private_topics(stack: EmbeddedStack) -> dict[str, str]:
    """Fresh copies of the pipeline topics, so this run shares no data with other tests."""
    suffix = uuid.uuid4().hex[:6]
    specs = {spec.name: spec for spec in load_topics(stack.settings.topics_file, stack.settings.partitions)}
    names = {field: f"dash-{topic}-{suffix}" for field, topic in TOPIC_FIELDS.items()}
    create_topics(
        stack.settings.kafka,
        [TopicSpec(name, specs[TOPIC_FIELDS[field]].partitions, specs[TOPIC_FIELDS[field]].config)
         for field, name in names.items()],
    )
    return names


def exercise_api(settings) -> None:
    """A user's few requests, so the API's latency panels see more than /metrics."""
    base = f"http://127.0.0.1:{settings.api_port}"
    for path in ("/readyz", "/sessions?limit=5", "/alerts?limit=5", "/healthz"):
        try:
            urllib.request.urlopen(base + path, timeout=5).read()
        except (urllib.error.URLError, OSError):
            pass


def wait_for_panels(prometheus: Prometheus, queries: list[PanelQuery], stack: EmbeddedStack) -> list[PanelQuery]:
    """Poll until every query has data or the deadline passes; returns the empty ones."""
    deadline = time.monotonic() + DATA_DEADLINE_S
    pending = list(queries)
    while pending and time.monotonic() < deadline:
        exercise_api(stack.settings)
        pending = prometheus.empty_queries(pending)
        dead = [p.name for p in stack.processes.values() if p.name != "producers" and not p.alive()]
        if dead:
            break
        time.sleep(3)
    return pending


def describe_failure(empty: list[PanelQuery], stack: EmbeddedStack, prometheus: Prometheus) -> str:
    lines = [f"{len(empty)} dashboard panel queries returned no data:"]
    lines += [f"  - {q}: {q.expr}" for q in empty]
    lines.append(f"scrape targets up: {sorted(prometheus.targets_up())}")
    for proc in stack.processes.values():
        if proc.name != "broker" and (not proc.alive() or empty):
            state = "running" if proc.alive() else f"exited {proc.popen.returncode}"
            lines.append(f"--- {proc.name} ({state}), last lines of {proc.log_path}:\n{proc.tail(15)}")
    return "\n".join(lines)


def test_every_dashboard_panel_has_data(stack: EmbeddedStack, tmp_path: Path):
    ensure_prometheus()
    queries = every_panel_query()
    assert queries, "no dashboard queries found"

    original = stack.settings
    stack.settings = original.model_copy(update={
        **private_topics(stack),
        "api_host": "127.0.0.1",
        "api_port": free_port(),
        "sessions_metrics_port": free_port(),
        "anomalies_metrics_port": free_port(),
        "prometheus_port": free_port(),
        "checkpoint_root": str(tmp_path / "checkpoints"),
        # Nothing else: every panel must show data under the defaults compose runs with too.
    })
    started = []
    try:
        started.append(stack.start_prometheus())
        started.append(stack.start_api())
        started.append(stack.start_job("sessions"))
        started.append(stack.start_job("anomalies"))
        started.append(stack.start_producers(*PRODUCER_ARGS))
        prometheus = Prometheus(stack.settings.prometheus_port)

        deadline = time.monotonic() + 120
        while set(SCRAPE_JOBS) - prometheus.targets_up() and time.monotonic() < deadline:
            time.sleep(1)
        missing = set(SCRAPE_JOBS) - prometheus.targets_up()
        if missing:
            pytest.fail(f"scrape targets never up: {sorted(missing)}\n" + describe_failure([], stack, prometheus),
                        pytrace=False)

        empty = wait_for_panels(prometheus, queries, stack)
        if empty:
            pytest.fail(describe_failure(empty, stack, prometheus), pytrace=False)
    finally:
        for proc in started:
            if proc is not None:
                proc.stop()
        stack.settings = original
