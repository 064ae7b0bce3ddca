"""The snapshot API as a real uvicorn process against the real embedded broker."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx
import pytest

from streamstate_stack.launcher import free_port
from tests.api_builders import alert, metric_snapshot, session_snapshot
from tests.integration.api_harness import ApiProcess, publish, wait_until

pytestmark = pytest.mark.timeout(180)


def all_pages(api: ApiProcess, limit: int, active: bool = False) -> tuple[list[str], int]:
    """Walk the session listing; returns the user ids in order and the number of pages."""
    users, cursor, pages = [], None, 0
    while True:
        params = {"limit": limit, "active": str(active).lower()} | ({"cursor": cursor} if cursor else {})
        response = api.get("/sessions", **params)
        assert response.status_code == 200, response.text
        body = response.json()
        users += [item["user_id"] for item in body["items"]]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            return users, pages


def test_every_endpoint_against_published_state(bootstrap, api_topics, start_api):
    users = [f"user-{i:02d}" for i in range(23)]
    publish(bootstrap, api_topics.sessions, [(u, session_snapshot(u, active=i % 3 != 0).to_json()) for i, u in enumerate(users)])
    publish(bootstrap, api_topics.series, [("cpu", metric_snapshot("cpu", 4.5).to_json()), ("mem", metric_snapshot("mem", -0.5).to_json())])
    burst, anomaly, late = alert("user-01", 2_000), alert("cpu", 3_000, kind="anomaly"), alert("user-02", 1_000)
    publish(bootstrap, api_topics.alerts, [(a.alert_id, a.to_json()) for a in (burst, anomaly, burst, late, anomaly)])
    publish(bootstrap, api_topics.sessions, [(b"user-00", b"{not json")])

    api = start_api(api_topics)
    api.wait_ready()

    # One user: the snapshot as published, with the offsets it reflects.
    response = api.get("/sessions/user-01")
    assert response.status_code == 200
    body = response.json()
    assert body["session"] == json.loads(session_snapshot("user-01").to_json())
    assert body["active"] is True
    assert body["freshness"]["caught_up"] is True
    assert sum(body["freshness"]["offsets"][api_topics.sessions].values()) == len(users) + 1
    missing = api.get("/sessions/nobody")
    assert missing.status_code == 404 and "nobody" in missing.json()["detail"]
    # The bad record was skipped, counted, and did not replace user-00's valid snapshot.
    assert api.get("/sessions/user-00").json()["active"] is False
    assert api.metric("streamstate_api_bad_records_total", topic=api_topics.sessions) == 1

    # Listing: pages of 5 cover every user once, in order; active=true keeps open sessions only.
    listed, pages = all_pages(api, limit=5)
    assert listed == users and pages == 5
    active, _ = all_pages(api, limit=4, active=True)
    assert active == [u for i, u in enumerate(users) if i % 3 != 0]
    bad_cursor = api.get("/sessions", cursor="xyz")
    assert bad_cursor.status_code == 400 and "cursor" in bad_cursor.json()["detail"]
    # Whitespace is no cursor, though bytes.fromhex would skip it (schemathesis' case; a trailing
    # newline is what a regex's "$" lets through).
    for spaced in ("\x0b", "7573\n", " 7573"):
        refused = api.get("/sessions", cursor=spaced, active="false", limit=128)
        assert refused.status_code == 400 and "cursor" in refused.json()["detail"], spaced
    assert api.get("/sessions", limit=0).status_code == 422
    assert api.get("/sessions", limit=1001).status_code == 422

    # Series.
    series = api.get("/series/cpu").json()
    assert series["series"]["last_z"] == 4.5 and series["series"]["last_anomaly"]["z"] == 4.5
    assert api.metric("streamstate_series_extreme") == 1  # cpu, |z| 4.5 > 3; its id is not published
    assert api.metric("streamstate_series_zscore", series_id="cpu") is None
    assert set(series["freshness"]["offsets"]) == {api_topics.series}
    assert api.get("/series/disk").status_code == 404

    # Alerts: one per id, newest first, filters.
    ids = lambda response: [a["alert_id"] for a in response.json()["items"]]  # noqa: E731
    assert ids(api.get("/alerts")) == [anomaly.alert_id, burst.alert_id, late.alert_id]
    assert ids(api.get("/alerts", kind="anomaly")) == [anomaly.alert_id]
    assert ids(api.get("/alerts", entity="user-02")) == [late.alert_id]
    assert ids(api.get("/alerts", since=2_000)) == [anomaly.alert_id, burst.alert_id]
    assert ids(api.get("/alerts", limit=1)) == [anomaly.alert_id]
    assert api.get("/alerts", since=-1).status_code == 422

    # Tombstones remove keys while the service runs.
    publish(bootstrap, api_topics.sessions, [("user-05", None)])
    publish(bootstrap, api_topics.series, [("cpu", None)])
    wait_until(lambda: api.get("/sessions/user-05").status_code == 404, what="session tombstone")
    wait_until(lambda: api.get("/series/cpu").status_code == 404, what="series tombstone")
    assert "user-05" not in all_pages(api, limit=100)[0]

    # Operations and metrics.
    assert api.get("/healthz").json() == {"status": "ok"}
    assert api.get("/readyz").json()["ready"] is True
    assert api.metric("streamstate_api_ready") == 1
    assert api.metric("streamstate_api_view_size", view="sessions") == len(users) - 1
    assert api.metric("streamstate_api_view_size", view="alerts") == 3
    assert api.metric("streamstate_api_alerts_seen_total", kind="bot_burst") == 2
    assert api.metric("streamstate_api_alerts_seen_total", kind="anomaly") == 1
    assert api.metric("streamstate_series_extreme") == 0  # cpu's tombstone took it out
    assert api.metric(
        "streamstate_api_requests_total", route="/sessions/{user_id}", method="GET", status="404"
    ) >= 2
    assert api.metric("streamstate_api_request_duration_seconds_count", route="/sessions", method="GET") >= 10
    wait_until(
        lambda: api.metric("streamstate_api_consumer_lag", topic=api_topics.sessions, partition="0") == 0,
        what="consumer lag gauge",
    )


def test_readiness_flips_after_catch_up_and_a_restart_serves_the_same_view_from_its_store(bootstrap, api_topics, start_api):
    count = 4_000
    publish(bootstrap, api_topics.sessions, [(f"u{i:05d}", session_snapshot(f"u{i:05d}", active=i % 2 == 0).to_json()) for i in range(count)])
    publish(bootstrap, api_topics.sessions, [(f"u{i:05d}", None) for i in range(0, count, 10)])
    publish(bootstrap, api_topics.series, [(f"s{i}", metric_snapshot(f"s{i}", float(i)).to_json()) for i in range(50)])
    publish(bootstrap, api_topics.alerts, [(a.alert_id, a.to_json()) for a in (alert(f"u{i}", i) for i in range(300))] * 2)
    expected_sessions = count - count // 10

    first = start_api(api_topics, api_end_probe_s="2")
    first.wait_listening()
    # Not ready while it rebuilds: the 503 says what is left.
    early = first.get("/readyz")
    assert early.status_code == 503 and early.json()["ready"] is False and early.json()["reason"]
    assert first.metric("streamstate_api_ready") == 0
    first.wait_ready()
    # Ready means complete: everything published before the start is in the view at once, and
    # the catch-up's own figures are there (set before readiness, which a reader waits for).
    assert first.metric("streamstate_api_view_size", view="sessions") == expected_sessions
    assert first.metric("streamstate_api_catch_up_records") == count + count // 10 + 50 + 600
    assert first.metric("streamstate_api_view_size", view="alerts") == 300

    def snapshot(api: ApiProcess) -> dict:
        return {
            "pages": [api.get("/sessions", limit=1000, cursor=c).json() for c in page_cursors(api)],
            "active": all_pages(api, limit=1000, active=True)[0],
            "series": [api.get(f"/series/s{i}").json() for i in range(50)],
            "alerts": api.get("/alerts", limit=1000).json(),
        }

    before = snapshot(first)
    assert sum(len(page["items"]) for page in before["pages"]) == expected_sessions
    first.stop()

    second = start_api(api_topics)
    second.wait_ready()
    assert snapshot(second) == before


def page_cursors(api: ApiProcess) -> list[str]:
    cursors, cursor = [""], None
    while True:
        cursor = api.get("/sessions", limit=1000, **({"cursor": cursor} if cursor else {})).json()["next_cursor"]
        if cursor is None:
            return cursors
        cursors.append(cursor)


def test_alert_stream_sends_each_new_alert_once_and_forgets_a_leaving_client(bootstrap, api_topics, start_api):
    api = start_api(api_topics, api_sse_keepalive_s="0.5")
    api.wait_ready()
    first, second = alert("u1", 100), alert("s1", 200, kind="anomaly")
    events: list[tuple[str, dict]] = []
    comments = 0
    with httpx.Client(base_url=api.url, timeout=15) as client:
        with client.stream("GET", "/alerts/stream") as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            lines = stream.iter_lines()
            assert next(lines).startswith(":"), "subscribed comment first"
            assert api.metric("streamstate_api_sse_clients") == 1
            publish(bootstrap, api_topics.alerts, [(a.alert_id, a.to_json()) for a in (first, first, second)])
            event_name = None
            for line in lines:
                if line.startswith(":"):
                    comments += 1
                elif line.startswith("event: "):
                    event_name = line.removeprefix("event: ")
                elif line.startswith("data: "):
                    events.append((event_name, json.loads(line.removeprefix("data: "))))
                    if len(events) == 2:
                        break
            # Then only keep-alives: the duplicate of `first` (same batch) never becomes an event.
            for line in lines:
                assert not line.startswith("event:"), f"unexpected event after both alerts: {line}"
                if line.startswith(":"):
                    break
    # The two alerts sit on different partitions, so their relative order is not defined.
    assert sorted((name, body["alert_id"]) for name, body in events) == sorted(
        [("alert", first.alert_id), ("alert", second.alert_id)]
    )
    wait_until(lambda: api.metric("streamstate_api_sse_clients") == 0, what="the stream client to be forgotten")
    assert api.metric("streamstate_api_requests_total", route="/alerts/stream", method="GET", status="200") == 1


def test_unreachable_broker_keeps_the_process_alive_and_not_ready(api_topics, start_api):
    api = start_api(api_topics, bootstrap_servers=f"127.0.0.1:{free_port()}", api_retry_s="0.5")
    api.wait_listening()
    report = wait_until(
        lambda: (r := api.get("/readyz").json()) and "unreachable" in r["reason"] and r, what="an unreachable reason"
    )
    assert report["ready"] is False
    assert api.get("/readyz").status_code == 503
    assert api.metric("streamstate_api_broker_up") == 0 and api.metric("streamstate_api_ready") == 0
    time.sleep(2)
    assert api.popen.poll() is None and api.get("/healthz").status_code == 200
    body = api.get("/sessions").json()
    assert body["items"] == [] and body["freshness"]["caught_up"] is False


class SilentBroker:
    """A listening socket that accepts every connection and never answers: a broker host that
    is up while its Kafka process hangs. Counts the connections, so a test knows when a client
    has just connected."""

    def __init__(self):
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.address = "127.0.0.1:%d" % self._socket.getsockname()[1]
        self.connections: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:  # closed
                return
            self.connections.append(connection)  # held open, never read or answered

    def close(self) -> None:
        self._socket.close()
        for connection in self.connections:
            connection.close()


def test_a_stop_does_not_wait_for_a_broker_that_never_answers(api_topics, start_api):
    """The follower asks the broker for its topics with a 5-s timeout, and a client call of
    librdkafka's blocks for all of it: a SIGTERM that came meanwhile waited for the call (3.5 s
    measured with a broker that refuses connections, 5 s with one that never answers)."""
    broker = SilentBroker()
    try:
        api = start_api(api_topics, bootstrap_servers=broker.address, api_retry_s="0.2")
        api.wait_listening()
        # Each attempt connects anew (a new consumer) and then asks for the topics: a SIGTERM
        # right after a new connection falls at the start of that wait.
        wait_until(lambda: (r := api.get("/readyz").json()) and "unreachable" in r["reason"], 30, "an attempt to fail")
        seen = len(broker.connections)
        wait_until(lambda: len(broker.connections) > seen, 15, "the next attempt to connect")
        stopping = time.monotonic()
        os.killpg(api.popen.pid, signal.SIGTERM)
        try:
            api.popen.wait(15)
        except subprocess.TimeoutExpired:
            pass
        waited = time.monotonic() - stopping
        # uvicorn ends a graceful shutdown by raising the signal it handled again.
        assert api.popen.returncode == -signal.SIGTERM, f"the API did not stop on SIGTERM (exit {api.popen.returncode}):\n{api.log_tail()}"
        assert waited < 3, f"the API took {waited:.1f} s to stop: it waited for the broker's answer"
    finally:
        broker.close()


def test_a_token_guards_the_data_endpoints_and_leaves_probes_and_metrics_open(bootstrap, api_topics, start_api):
    publish(bootstrap, api_topics.sessions, [("u1", session_snapshot("u1").to_json())])
    api = start_api(api_topics, api_token="s3cret-token")
    api.wait_ready()  # /readyz needs no token
    good, wrong = {"Authorization": "Bearer s3cret-token"}, {"Authorization": "Bearer nope"}
    for path in ("/sessions/u1", "/sessions", "/sessions?limit=1", "/series/cpu", "/alerts", "/alerts/stream"):
        missing = api.client.get(path)
        assert missing.status_code == 401, (path, missing.text)
        assert "Authorization: Bearer" in missing.json()["detail"] and missing.headers["www-authenticate"].startswith("Bearer")
        refused = api.client.get(path, headers=wrong)
        assert refused.status_code == 401 and "not valid" in refused.json()["detail"], (path, refused.text)
    assert api.client.get("/sessions/u1", headers=good).json()["session"]["user_id"] == "u1"
    assert [i["user_id"] for i in api.client.get("/sessions", headers=good).json()["items"]] == ["u1"]
    assert api.client.get("/series/cpu", headers=good).status_code == 404
    assert api.client.get("/alerts", headers=good).status_code == 200
    for path in ("/healthz", "/readyz", "/metrics"):
        assert api.client.get(path).status_code == 200, path
    schemes = api.client.get("/openapi.json").json()["components"]["securitySchemes"]
    assert [s["scheme"] for s in schemes.values()] == ["bearer"]


def test_the_fast_path_answers_as_the_routers_do(bootstrap, api_topics, start_api):
    users = [f"u{i:02d}" for i in range(12)]
    publish(bootstrap, api_topics.sessions, [(u, session_snapshot(u, active=i % 2 == 0).to_json()) for i, u in enumerate(users)])
    publish(bootstrap, api_topics.series, [("cpu", metric_snapshot("cpu", 1.5).to_json())])
    api = start_api(api_topics)
    api.wait_ready()
    cursor = api.get("/sessions", limit=3)
    # Each pair: a request the fast path answers, and one it leaves to FastAPI (an extra or
    # differently spelled parameter) that must mean the same.
    pairs = [
        ("/sessions/u03", "/sessions/u03?unused=1"),
        ("/series/cpu", "/series/cpu?unused=1"),
        ("/sessions", "/sessions?limit=100&active=False"),
        ("/sessions?limit=4&active=true", "/sessions?limit=4&active=1"),
        (f"/sessions?limit=3&cursor={cursor.json()['next_cursor']}", f"/sessions?limit=+3&cursor={cursor.json()['next_cursor']}"),
    ]
    for fast, routed in pairs:
        a, b = api.client.get(fast), api.client.get(routed)
        assert (a.status_code, a.json()) == (b.status_code, b.json()), (fast, routed)
        assert a.headers["content-type"] == b.headers["content-type"] == "application/json"
    routes = {"/sessions/{user_id}": 2, "/series/{series_id}": 2, "/sessions": 7}
    for route, count in routes.items():
        assert api.metric("streamstate_api_requests_total", route=route, method="GET", status="200") == count, route
    assert api.get("/sessions", limit="0").status_code == 422 and api.get("/sessions/nobody").status_code == 404


def test_the_command_takes_host_port_and_bootstrap_servers_flags_like_uvicorn(bootstrap, api_topics, tmp_path):
    command = [sys.executable, "-m", "streamstate_api"]
    usage = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 0
    for flag in ("--host", "--port", "--bootstrap-servers", "--version", "--help"):
        assert flag in usage.stdout
    version = subprocess.run([*command, "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("streamstate-api ")
    port = free_port()
    env = {**os.environ, **api_topics.env(), "STREAMSTATE_API_STORE_PATH": str(tmp_path / "store"),
           "STREAMSTATE_BOOTSTRAP_SERVERS": "127.0.0.1:1", "STREAMSTATE_API_PORT": "1"}
    with open(tmp_path / "api.log", "wb") as log:
        process = subprocess.Popen(
            [*command, "--host", "127.0.0.1", "--port", str(port), "--bootstrap-servers", bootstrap],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        wait_until(lambda: _ready(f"http://127.0.0.1:{port}"), 60, "the API started by flags to be ready")
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(15)


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=5).status_code == 200
    except httpx.TransportError:
        return False
