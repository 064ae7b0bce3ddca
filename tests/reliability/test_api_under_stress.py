"""The snapshot API under stress, as a real process on the real broker:
- killed (SIGKILL) and restarted while a load runs: once ready again, its view equals the
  view before the kill, and requests fail only while it is down;
- killed (SIGKILL) in the middle of its cold rebuild and restarted: it resumes from the
  offsets its store holds, and the whole view then equals the state topics;
- a sustained loopback load (30 s; 300 s with RELIABILITY_LARGE=1): no server errors, no
  transport errors, bounded memory.

Every load asserts per path: each path may only answer what it can legitimately answer.
The view's topics hold the reference outputs of the scripted scenario (no Spark needed)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from streamstate_stack.launcher import EmbeddedStack, ManagedProcess
from tests.api_builders import session_snapshot
from tests.integration.api_harness import publish, wait_until
from tests.reliability.conftest import LARGE
from tests.scenario import build_scenario, produce_scenario

LOAD_SECONDS = 300 if LARGE else 30
LOAD_RATE = 300
RSS_GROWTH_LIMIT_MB = 50


@pytest.fixture
def api_stack(pipeline_stack, bootstrap, tmp_path):
    """pipeline_stack with the scenario's reference outputs on the API's topics, and the API's
    store in the test's directory (a restarted API finds its predecessor's)."""
    pipeline_stack.settings = pipeline_stack.settings.model_copy(update={"api_store_path": tmp_path / "api-store"})
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


def _allowed(path: str, restarting: bool) -> set[str]:
    """The statuses a path may answer: its data once the view is there, /readyz a 503 while
    the API catches up after a restart, the unknown user a 404; nothing else, ever."""
    if path == "/sessions/nobody":
        return {"404"}
    if path == "/readyz":
        return {"200", "503"} if restarting else {"200"}
    return {"200"}


def _check_paths(result: dict, restarting: bool) -> None:
    unexpected = {
        path: statuses for path, statuses in result["by_path"].items() if set(statuses) - _allowed(path, restarting)
    }
    assert not unexpected, f"paths answered what they must not: {unexpected}"


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
    assert result["answered"] > 0
    # With the store, the restarted API has the whole view before it is ready: no 404 for a known user.
    _check_paths(result, restarting=True)
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
    _check_paths(warm, restarting=False)
    _check_paths(result, restarting=False)
    assert set(result["by_path"]) == set(_paths(api_stack)), "every path was exercised"
    assert rss_after - rss_before < RSS_GROWTH_LIMIT_MB


MID_REBUILD_USERS = 120_000  # enough that the cold rebuild takes seconds and uses the validation workers
REBUILD_PROGRESS = re.compile(r": ([\d,]+) of ([\d,]+) records \(")


def test_api_killed_mid_rebuild_resumes_from_its_store_and_equals_the_topics(pipeline_stack, bootstrap, tmp_path):
    stack = pipeline_stack
    stack.settings = stack.settings.model_copy(update={"api_store_path": tmp_path / "api-store"})
    topic = stack.settings.topic_session_state
    users = [f"u{i:06d}" for i in range(MID_REBUILD_USERS)]
    expected = {u: session_snapshot(u, active=i % 3 == 0, ts=1_000 + i).to_json() for i, u in enumerate(users)}
    publish(bootstrap, topic, list(expected.items()))
    # Later changes on the topic: newer snapshots, and tombstones that must stay deletions.
    for i in range(0, MID_REBUILD_USERS, 1_000):
        expected[users[i]] = session_snapshot(users[i], active=True, ts=5_000_000).to_json()
    deleted = users[500::2_000]
    publish(bootstrap, topic, [(u, expected[u]) for u in users[::1_000]] + [(u, None) for u in deleted])
    for user in deleted:
        del expected[user]

    with httpx.Client(base_url=_url(stack), timeout=10) as client:
        api = stack.start_api()

        def rebuilding() -> str | None:
            assert api.alive(), f"the API exited:\n{api.tail()}"
            try:
                reason = client.get("/readyz").json()["reason"]
            except httpx.TransportError:
                return None
            # Progress, not one of the rebuild's other steps (reading the end offsets): some records done.
            done = REBUILD_PROGRESS.search(reason)
            return reason if "rebuilding" in reason and done and int(done[1].replace(",", "")) > 0 else None

        progress = wait_until(rebuilding, 90, "the cold rebuild to make progress")
        api.kill()
        print(f"\nkilled mid-rebuild at: {progress}")
        assert "%" in progress and "records/s" in progress, progress

        api = _start_ready(stack, client)
        log = api.log_path.read_text()
        resumed = log[log.rindex("Started server process"):] if "Started server process" in log else log
        assert "catching up from the offsets in the view's store" in resumed, "the restart rebuilt from the start instead of resuming"
        # Progress reported is progress kept (a rebuild writes its store without the log): the
        # restart has at most what was left when the kill came still to read.
        done, total = (int(n.replace(",", "")) for n in REBUILD_PROGRESS.search(progress).groups())  # type: ignore[union-attr]
        left = re.search(r"catching up from the offsets in the view's store: 0 of ([\d,]+) records", resumed)
        assert left is not None, resumed[-2_000:]
        assert int(left[1].replace(",", "")) <= total - done, f"the restart resumed behind the {done:,} records reported done"

        listed, cursor = {}, None
        while True:
            body = client.get("/sessions", params={"limit": 1000, **({"cursor": cursor} if cursor else {})}).json()
            listed.update({item["user_id"]: item for item in body["items"]})
            cursor = body["next_cursor"]
            if cursor is None:
                break
        active = []
        cursor = None
        while True:
            body = client.get("/sessions", params={"limit": 1000, "active": "true", **({"cursor": cursor} if cursor else {})}).json()
            active += [item["user_id"] for item in body["items"]]
            cursor = body["next_cursor"]
            if cursor is None:
                break
        offsets = body["freshness"]["offsets"][topic]
        api.stop()
    assert listed == {u: json.loads(v) for u, v in expected.items()}, "the view equals the state topic"
    assert active == sorted(u for u, v in expected.items() if json.loads(v)["open_session"] is not None)
    assert sum(offsets.values()) == MID_REBUILD_USERS + len(users[::1_000]) + len(deleted)
