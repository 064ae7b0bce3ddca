"""The snapshot API under stress, as a real process on the real broker:
- killed (SIGKILL) and restarted while a load runs: once ready again, its view equals the
  view before the kill, and requests fail only while it is down;
- a sustained 60 s loopback load: no server errors, no transport errors, bounded memory.

The view's topics hold the reference outputs of the scripted scenario (no Spark needed)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from streamstate.stack import EmbeddedStack, ManagedProcess
from tests.integration.api_harness import publish, wait_until
from tests.reliability.conftest import LARGE
from tests.scenario import build_scenario, produce_scenario

LOAD_SECONDS = 300 if LARGE else 60
LOAD_RATE = 300
RSS_GROWTH_LIMIT_MB = 50


@pytest.fixture
def api_stack(pipeline_stack, bootstrap):
    """pipeline_stack with the scenario's reference outputs on the API's topics."""
    settings = pipeline_stack.settings
    scenario = build_scenario(seed=7)
    produce_scenario(bootstrap, scenario, settings)
    expected = scenario.expected(settings)
    publish(bootstrap, settings.topic_session_state, [(k, v.to_json()) for k, v in expected.session_state.items()])
    publish(bootstrap, settings.topic_metric_state, [(k, v.to_json()) for k, v in expected.metric_state.items()])
    publish(bootstrap, settings.topic_alerts, [(k, v.to_json()) for k, v in expected.alerts.items()])
    pipeline_stack.expected = expected
    return pipeline_stack


def _url(stack: EmbeddedStack) -> str:
    return f"http://{stack.settings.api_host}:{stack.settings.api_port}"


def _start_ready(stack: EmbeddedStack, client: httpx.Client) -> ManagedProcess:
    api = stack.start_api()

    def ready() -> bool:
        assert api.alive(), f"the API exited:\n{api.tail()}"
        try:
            return client.get("/readyz").status_code == 200
        except httpx.TransportError:
            return False

    wait_until(ready, 90, "the API to be ready")
    return api


def _paths(stack: EmbeddedStack) -> list[str]:
    users, series = sorted(stack.expected.session_state), sorted(stack.expected.metric_state)
    paths = [f"/sessions/{u}" for u in users] + [f"/series/{s}" for s in series]
    paths += ["/sessions?limit=20", "/alerts?limit=50", "/sessions/nobody", "/readyz", "/metrics"]
    return paths


def _view(client: httpx.Client, stack: EmbeddedStack) -> dict[str, object]:
    """Every answer of the view's read endpoints, by path."""
    view = {}
    for path in _paths(stack):
        if path not in ("/readyz", "/metrics"):
            response = client.get(path)
            view[path] = (response.status_code, response.json())
    view["/sessions?limit=1000"] = client.get("/sessions", params={"limit": 1000}).json()
    view["/alerts?limit=1000"] = client.get("/alerts", params={"limit": 1000}).json()
    return view


def _load(stack: EmbeddedStack, seconds: float, log: Path) -> subprocess.Popen:
    argv = [sys.executable, "-m", "tests.reliability.api_load", _url(stack), "--duration", str(seconds)]
    argv += ["--rate", str(LOAD_RATE), "--paths", *_paths(stack)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=open(log, "wb"), cwd=Path(__file__).parents[2])


def _result(load: subprocess.Popen, timeout_s: float) -> dict:
    out, _ = load.communicate(timeout=timeout_s)
    assert load.returncode == 0, f"load generator failed with {load.returncode}"
    return json.loads(out)


def _rss_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1]) / 1024


def test_api_killed_under_load_comes_back_with_the_same_view(api_stack, tmp_path):
    with httpx.Client(base_url=_url(api_stack), timeout=10) as client:
        api = _start_ready(api_stack, client)
        before = _view(client, api_stack)
        assert len(before["/sessions?limit=1000"]["items"]) == len(api_stack.expected.session_state)
        load = _load(api_stack, 25, tmp_path / "load.log")
        time.sleep(5)
        api.kill()
        killed_at = time.time()
        api = _start_ready(api_stack, client)
        ready_at = time.time()
        after = _view(client, api_stack)
        result = _result(load, 120)
        api.stop()
    print(f"\nAPI restart under load: {result['answered']} answered, {result['errors']} failed while down, {result['statuses']}")
    assert after == before
    assert result["answered"] > 0 and not set(result["statuses"]) - {"200", "404", "503"}, result
    late = [t for t in result["error_times"] if not killed_at - 1 <= t <= ready_at + 1]
    assert not late, f"requests failed outside the restart window: {result['error_samples']}"


@pytest.mark.slow
def test_api_under_sustained_load_has_no_errors_and_bounded_memory(api_stack, tmp_path):
    with httpx.Client(base_url=_url(api_stack), timeout=10) as client:
        api = _start_ready(api_stack, client)
        warm = _result(_load(api_stack, 5, tmp_path / "warm.log"), 60)
        rss_before = _rss_mb(api.pid)
        result = _result(_load(api_stack, LOAD_SECONDS, tmp_path / "load.log"), LOAD_SECONDS + 60)
        rss_after = _rss_mb(api.pid)
        assert client.get("/readyz").status_code == 200
        api.stop()
    print(
        f"\nAPI load: {result['answered']} requests in {result['seconds']:.0f}s ({result['statuses']}), "
        f"{result['errors']} errors; RSS {rss_before:.1f} -> {rss_after:.1f} MB"
    )
    assert warm["errors"] == 0 and result["errors"] == 0, result["error_samples"]
    assert set(result["statuses"]) <= {"200", "404"}, result["statuses"]
    assert result["statuses"].get("404", 0) <= result["answered"] // 10  # only /sessions/nobody
    assert rss_after - rss_before < RSS_GROWTH_LIMIT_MB
