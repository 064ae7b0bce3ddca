"""The view follower's liveness as the probes report it, and the replacement of a damaged store
off the serving loop (issue 51), through a real uvicorn server and the real broker. The server
runs in the test's process (:class:`~tests.integration.api_harness.InProcessApi`) so that a
test can see which thread did something and stand in for a follower that died or hangs."""

from __future__ import annotations

import ctypes
import logging
import shutil

import pytest

from tests.api_builders import session_snapshot
from tests.integration.api_harness import InProcessApi, publish, wait_until
from tests.reliability.damage import garbage

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def api_settings(settings, api_topics, tmp_path):
    return settings.model_copy(update={
        "topic_session_state": api_topics.sessions, "topic_metric_state": api_topics.series,
        "topic_alerts": api_topics.alerts, "api_store_path": tmp_path / "api-store", "api_retry_s": 0.5,
        "api_follower_stall_s": 2.0,
    })


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the death is the point
def test_readiness_and_health_fail_with_a_message_once_the_follower_thread_has_died(bootstrap, api_topics, api_settings):
    """Before, /readyz said 200 "caught up" and /healthz 200 whatever became of the thread. The
    death is an exception its loop does not catch (SystemExit, raised in the thread as CPython
    raises an asynchronous exception)."""
    publish(bootstrap, api_topics.sessions, [("u1", session_snapshot("u1").to_json())])
    with InProcessApi(api_settings) as api:
        api.wait_ready()
        follower = api.context.follower
        assert ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(follower.ident), ctypes.py_object(SystemExit)) == 1
        follower.join(30)
        assert not follower.is_alive()
        ready = api.get("/readyz")
        assert ready.status_code == 503 and "follower" in ready.json()["reason"] and "stopped" in ready.json()["reason"], ready.text
        health = api.get("/healthz")
        assert health.status_code == 503 and "follower" in health.json()["detail"], health.text
        assert "streamstate_api_ready 0.0" in api.get("/metrics").text


def test_readiness_fails_while_the_follower_makes_no_progress_on_available_records(bootstrap, api_topics, api_settings):
    """A follower blocked in a store write (a RocksDB write stall, a hung disk) made no progress,
    and /readyz still said 200. The test stands in for the stall by holding the view's write lock."""
    publish(bootstrap, api_topics.sessions, [("u1", session_snapshot("u1").to_json())])
    with InProcessApi(api_settings) as api:
        api.wait_ready()
        lock = api.context.view._write_lock
        with lock:
            publish(bootstrap, api_topics.sessions, [("u2", session_snapshot("u2").to_json())])
            report = wait_until(
                lambda: (r := api.get("/readyz")).status_code == 503 and r.json(), 30, "readyz to report the stall"
            )
            assert "no progress" in report["reason"], report
            assert api.get("/sessions/u1").status_code == 200, "the view it has is still served"
        wait_until(lambda: api.get("/sessions/u2").status_code == 200, 30, "the follower to go on")
        api.wait_ready(30)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _damage_and_wait_for_the_rebuild(api: InProcessApi, bootstrap: str, users: list[str], logs: _Records, ts: int) -> None:
    def rebuilds() -> int:
        return sum("rebuilding the view from the topics" in r.getMessage() for r in logs.records)

    before = rebuilds()
    # Newer snapshots of every user, flushed into a table file of their own, which the damage
    # then hits: a block an earlier read left in the block cache is served as it was cached
    # (a rebuild flushes its store itself, and the check after one reads every user).
    publish(bootstrap, api.context.settings.topic_session_state, [(u, session_snapshot(u, ts=ts).to_json()) for u in users])
    view = api.context.view
    wait_until(lambda: all(view.session(u)[0].ts == ts for u in users), 60, "the newer snapshots to be applied")  # type: ignore[union-attr]
    api.context.view._store.db.flush()
    table = max(api.context.settings.api_store_path.glob("*.sst"), key=lambda f: int(f.stem))  # the newest
    garbage(table.stat().st_size // 3, length=4096, seed=7).apply(table)
    statuses = {api.get(f"/sessions/{u}").status_code for u in users}
    assert 503 in statuses, f"the damage was not met: {statuses}"
    wait_until(lambda: rebuilds() > before, 60, "the follower to replace the damaged store")
    api.wait_ready(120)
    assert all(api.get(f"/sessions/{u}").status_code == 200 for u in users), "the rebuilt view serves every user"


def test_a_damaged_store_is_replaced_off_the_serving_loop_and_a_failed_copy_does_not_end_the_follower(
    bootstrap, api_topics, api_settings
):
    """Before, the damaged store was closed, copied aside and recreated on the serving loop: every
    request waited for the copy, and a copy longer than the follower's 120 s wait (or one that
    failed) ended the follower thread for good while /healthz stayed 200."""
    users = [f"user-{n:05d}" for n in range(5_000)]
    publish(bootstrap, api_topics.sessions, [(u, session_snapshot(u).to_json()) for u in users])
    handler = _Records()
    store_log = logging.getLogger("streamstate_api")
    store_log.addHandler(handler)
    try:
        with InProcessApi(api_settings) as api:
            api.wait_ready()
            _damage_and_wait_for_the_rebuild(api, bootstrap, users, handler, ts=2_000)
            set_aside = [r for r in handler.records if "copied to" in r.getMessage()]
            assert set_aside, [r.getMessage() for r in handler.records]
            assert {r.threadName for r in set_aside} != {InProcessApi.SERVER_THREAD}, "the copy ran on the serving loop"
            assert all(r.threadName != InProcessApi.SERVER_THREAD for r in handler.records if r.name == "streamstate_api.store"
                       and "is damaged" not in r.getMessage())  # a request may be the one that finds the damage

            # Again, with the copy's place taken by a file: the copy fails, the follower goes on.
            corrupt = api_settings.api_store_path.with_name(f"{api_settings.api_store_path.name}.corrupt")
            shutil.rmtree(corrupt)
            corrupt.write_text("in the way")
            _damage_and_wait_for_the_rebuild(api, bootstrap, users, handler, ts=3_000)
            assert api.context.follower.is_alive() and api.get("/healthz").status_code == 200
    finally:
        store_log.removeHandler(handler)
