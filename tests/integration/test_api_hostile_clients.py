"""The API under hostile but valid clients, through a real uvicorn process and broker.

- Idle sockets and slowly sent request heads are cut off, so they cannot hold the
  connection limit (issue: six silent sockets kept every new request at 503).
- The fast path and FastAPI's routes give the same answer and the same error for any query
  (issue: ``?limit=`` with 4,301 digits was a 500 on the fast path, a 422 on the routes).
- Ids of any characters round-trip through the listing and a lookup (issue: an id with
  ``/`` was listed but could not be fetched).
- /metrics names no series unless the operator asks, and then wants the token.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api_builders import metric_snapshot, session_snapshot
from tests.integration.api_harness import publish, wait_until

pytestmark = pytest.mark.timeout(240)

HEAD_TIMEOUT_S = 2


def _closed_by_server(connection: socket.socket, within_s: float) -> bool:
    connection.settimeout(within_s)
    try:
        return connection.recv(1024) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_streams_and_connections_beyond_their_limits_are_refused_then_idle_sockets_are_cut_off(api_topics, start_api):
    api = start_api(
        api_topics, api_max_streams="2", api_max_connections="6", api_request_head_timeout_s=str(HEAD_TIMEOUT_S)
    )
    api.wait_ready()
    with httpx.Client(base_url=api.url, timeout=10) as client, contextlib.ExitStack() as streams:
        lines = []  # kept: a line iterator dropped by the garbage collector closes its stream
        for _ in range(2):
            stream = streams.enter_context(client.stream("GET", "/alerts/stream"))
            lines.append(stream.iter_lines())
            assert stream.status_code == 200 and next(lines[-1]).startswith(":")
        wait_until(lambda: api.metric("streamstate_api_sse_clients") == 2, 10, "two streams")
        third = httpx.get(f"{api.url}/alerts/stream", timeout=10)
        assert third.status_code == 429 and "too many alert streams" in third.json()["detail"]
        assert third.headers["retry-after"]
        time.sleep(HEAD_TIMEOUT_S * 2)  # a stream is a response under way: no head deadline applies
        assert next(lines[0]) is not None and api.metric("streamstate_api_sse_clients") == 2
    # Sockets that connect and say nothing, up to the limit: the next request is answered 503
    # at once (not left hanging), and the head deadline then closes them from the server's side.
    idle = [socket.create_connection(("127.0.0.1", api.port)) for _ in range(6)]
    try:
        over = httpx.get(f"{api.url}/healthz", timeout=5)
        assert over.status_code == 503 and over.text == "Service Unavailable"
        wait_until(lambda: httpx.get(f"{api.url}/healthz", timeout=5).status_code == 200, 15, "idle sockets to be cut off")
        assert all(_closed_by_server(connection, 5) for connection in idle)
    finally:
        for connection in idle:
            connection.close()


def test_a_request_head_sent_a_byte_at_a_time_is_cut_off_and_a_keep_alive_request_is_not(api_topics, start_api):
    api = start_api(api_topics, api_request_head_timeout_s=str(HEAD_TIMEOUT_S))
    api.wait_listening()
    slow = socket.create_connection(("127.0.0.1", api.port))
    started = time.monotonic()
    try:
        for byte in b"GET /healthz HTTP/1.1\r\nX-Slow: " + b"a" * 100:
            try:
                slow.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                break
            time.sleep(0.25)
        else:
            pytest.fail("a head sent a byte every 0.25 s stayed open for 30 s")
        assert time.monotonic() - started < HEAD_TIMEOUT_S + 5
    finally:
        slow.close()
    # A client that keeps its connection and sends requests in time is served on it throughout.
    with httpx.Client(base_url=api.url, timeout=5) as client:
        for _ in range(4):
            assert client.get("/healthz").status_code == 200
            time.sleep(HEAD_TIMEOUT_S / 2)


def _rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _send_until_closed(port: int, head_start: bytes, total: int) -> int:
    """Send ``head_start`` then header bytes (never the head's end) until ``total`` or until the
    server closes; returns how many bytes were sent."""
    sent = 0
    with socket.create_connection(("127.0.0.1", port)) as connection:
        connection.sendall(head_start)
        chunk = b"a" * 65536
        try:
            while sent < total:
                connection.sendall(chunk)
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
    return sent


def test_a_request_head_over_the_bound_gets_431_before_any_auth_and_is_not_read_further(api_topics, start_api):
    """Issue 51: request heads had no size limit, checked before any auth: four connections took
    the API from 65 MB to 637 MB of RSS in 1.3 s (compose gives it 512 MB)."""
    limit = 16_384
    api = start_api(api_topics, api_token="t-" + "x" * 30, api_max_request_head_bytes=str(limit))
    api.wait_listening()
    pad = {"x-pad": "a" * (limit - 2_000)}
    assert httpx.get(f"{api.url}/healthz", headers=pad, timeout=5).status_code == 200, "a head within the bound is served"
    assert httpx.get(f"{api.url}/sessions", headers=pad, timeout=5).status_code == 401, "and authenticated as before"

    # Over the bound, on a data path and without the token: 431 from the server itself, then closed.
    with socket.create_connection(("127.0.0.1", api.port)) as connection:
        connection.sendall(b"GET /sessions HTTP/1.1\r\nHost: api\r\nX-Pad: " + b"a" * (limit + 1_000))
        connection.settimeout(10)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 "), answer[:200]
    assert b"connection: close" in head.lower()
    detail = json.loads(body)["detail"]
    assert "STREAMSTATE_API_MAX_REQUEST_HEAD_BYTES" in detail and str(limit) in detail

    # The server stops reading such a head: 64 MB are not taken in, and its memory stays put.
    before = _rss_mb(api.popen.pid)
    total = 64 << 20
    sent = [_send_until_closed(api.port, b"GET /sessions HTTP/1.1\r\nX-Pad: ", total) for _ in range(2)]
    assert all(n < total for n in sent), f"the server read on: {sent} bytes sent"
    assert _rss_mb(api.popen.pid) - before < 32, "a refused head leaves no memory behind"
    assert httpx.get(f"{api.url}/healthz", timeout=5).status_code == 200


_QUERY_NAMES = st.sampled_from(["limit", "active", "cursor", "LIMIT", "limit[]", ""])
_QUERY_VALUES = st.one_of(
    st.sampled_from(["1", "3", "1000", "1001", "0", "-1", "+3", "0003", " 3", "3.0", "1e3", "٣", "²", "true",
                     "false", "True", "1", "yes", "", "%", "%ZZ", "=", "&"]),
    st.integers(min_value=0, max_value=5000).map(lambda n: "9" * n),  # up to 5,000 digits (Python refuses int() beyond 4,300)
    st.text(max_size=40),
    st.just(quote(json.dumps("u03"))),
)


def test_the_fast_path_and_the_routes_agree_on_any_query(bootstrap, api_topics, start_api):
    """The fast path answers only plainly valid requests and leaves the rest to FastAPI; a
    parameter it does not know (``zz``) makes it leave the request to FastAPI, which ignores
    that parameter. So ``q`` and ``q&zz=1`` must get the same status and body."""
    users = [f"u{i:02d}" for i in range(12)]
    publish(bootstrap, api_topics.sessions, [(u, session_snapshot(u, active=i % 2 == 0).to_json()) for i, u in enumerate(users)])
    api = start_api(api_topics)
    api.wait_ready()
    cursor = api.get("/sessions", limit=3).json()["next_cursor"]
    answers: dict[int, int] = {}

    def same(target: str) -> None:
        separator = "&" if "?" in target else "?"
        fast, routed = api.client.get(target), api.client.get(f"{target}{separator}zz=1")
        assert fast.status_code < 500, (target, fast.status_code, fast.text)
        assert (fast.status_code, fast.json()) == (routed.status_code, routed.json()), target
        answers[fast.status_code] = answers.get(fast.status_code, 0) + 1

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(pairs=st.lists(st.tuples(_QUERY_NAMES, st.one_of(_QUERY_VALUES, st.just(cursor))), max_size=3))
    def listing(pairs: list[tuple[str, str]]) -> None:
        same("/sessions?" + "&".join(f"{quote(n)}={quote(v, safe='')}" for n, v in pairs) if pairs else "/sessions")

    @settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
    @given(user_id=st.one_of(st.sampled_from(users), st.text(min_size=1, max_size=30)))
    def lookup(user_id: str) -> None:
        same(f"/sessions/{quote(user_id, safe='')}")

    listing()
    lookup()
    same("/sessions?limit=" + "9" * 4301)  # the review's case
    assert answers.get(200) and answers.get(422) and answers.get(404), answers
    before = api.metric("streamstate_api_requests_total", route="/sessions", method="GET", status="422") or 0
    assert api.client.get("/sessions?limit=" + "9" * 4301).status_code == 422
    assert api.metric("streamstate_api_requests_total", route="/sessions", method="GET", status="422") == before + 1


ODD_IDS = [
    "a/b", "/lead", "trail/", "a//b", "../up", "a/./b", "%2F", "100%", "?q=1", "#frag", "a&b=c", "a+b", " spaced ",
    "tab\there", "ünïcødé", "emoji 🎉", "back\\slash", "semi;colon", "quote\"d", "<tag>", "x" * 256, "...", "-",
]


def test_ids_of_any_characters_round_trip_through_listing_and_lookup(bootstrap, api_topics, start_api):
    publish(bootstrap, api_topics.sessions, [(u, session_snapshot(u).to_json()) for u in ODD_IDS])
    publish(bootstrap, api_topics.series, [(s, metric_snapshot(s, 1.0).to_json()) for s in ODD_IDS])
    api = start_api(api_topics)
    api.wait_ready()
    listed = [item["user_id"] for item in api.get("/sessions", limit=1000).json()["items"]]
    assert sorted(listed) == sorted(ODD_IDS)
    for odd in listed:
        session = api.client.get(f"/sessions/{quote(odd, safe='')}")
        assert session.status_code == 200 and session.json()["session"]["user_id"] == odd, (odd, session.text)
        series = api.client.get(f"/series/{quote(odd, safe='')}")
        assert series.status_code == 200 and series.json()["series"]["series_id"] == odd, (odd, series.text)
    assert api.metric("streamstate_api_requests_total", route="/sessions/{user_id}", method="GET", status="200") == len(ODD_IDS)


def test_metrics_name_no_series_unless_asked_and_then_require_the_token(bootstrap, api_topics, start_api):
    publish(bootstrap, api_topics.series, [("calm", metric_snapshot("calm", 0.5).to_json()),
                                           ("wild", metric_snapshot("wild", -9.0).to_json())])
    token = "t-" + "x" * 30
    default = start_api(api_topics, api_token=token)
    default.wait_ready()
    text = httpx.get(f"{default.url}/metrics", timeout=5).text  # open: it names no series
    assert "streamstate_series_extreme 1.0" in text and "wild" not in text and "calm" not in text
    default.stop()

    asked = start_api(api_topics, api_token=token, api_metrics_series_ids="true")
    asked.wait_ready()
    refused = httpx.get(f"{asked.url}/metrics", timeout=5)
    assert refused.status_code == 401 and "bearer token" in refused.json()["detail"]
    assert httpx.get(f"{asked.url}/metrics", headers={"authorization": "Bearer wrong"}, timeout=5).status_code == 401
    text = httpx.get(f"{asked.url}/metrics", headers={"authorization": f"Bearer {token}"}, timeout=5).text
    assert 'streamstate_series_zscore{series_id="wild"} -9.0' in text and "calm" not in text


@pytest.mark.parametrize("token", ["", " ", "\t \n"])
def test_a_blank_token_is_refused_at_start_with_a_message(api_topics, start_api, token):
    """Issue 51: ``STREAMSTATE_API_TOKEN=""`` turned auth off silently, and ``" "`` made the fast
    path (which wanted ``Bearer `` plus the blank) and the routes (which required no token) disagree."""
    api = start_api(api_topics, api_token=token)
    try:
        code = api.popen.wait(30)
    except Exception:
        pytest.fail(f"the API started with a blank token:\n{api.log_tail()}")
    assert code != 0
    assert "STREAMSTATE_API_TOKEN" in api.log_tail() and "blank" in api.log_tail(), api.log_tail()
