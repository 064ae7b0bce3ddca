"""The view follower against records and conditions that stopped it (issue 51), through a real
uvicorn process and the real broker: a record the store cannot hold, transactional topics."""

from __future__ import annotations

import signal
import time
import uuid

import pytest
from confluent_kafka import Producer

from tests.api_builders import session_snapshot
from tests.integration.api_harness import ApiTopics, publish, wait_until

pytestmark = pytest.mark.timeout(180)


def test_a_snapshot_the_store_cannot_hold_is_counted_and_the_live_view_goes_on(bootstrap, api_topics, start_api):
    """The review's case: a session snapshot with ``ts`` = 2^63 passed the strict check and failed
    the store write; the follower retried it for ever, served nothing later, counted nothing,
    and /readyz stayed 200."""
    api = start_api(api_topics)
    api.wait_ready()
    huge = session_snapshot("frozen", ts=1).to_json().replace(b'"ts":1,', b'"ts":%d,' % 2**63)
    publish(bootstrap, api_topics.sessions, [("frozen", huge), ("after", session_snapshot("after").to_json())], partition=0)
    wait_until(lambda: api.get("/sessions/after").status_code == 200, 30, "the record after the bad one to be served")
    assert api.get("/sessions/frozen").status_code == 404
    assert api.metric("streamstate_api_bad_records_total", topic=api_topics.sessions) == 1
    publish(bootstrap, api_topics.sessions, [("later", session_snapshot("later").to_json())], partition=0)
    wait_until(lambda: api.get("/sessions/later").status_code == 200, 30, "a later record to be served")
    assert api.get("/readyz").status_code == 200


def test_the_lag_gauge_reads_zero_once_caught_up_on_a_topic_written_in_transactions(bootstrap, api_topics, start_api):
    """Issue 51: each transaction's commit marker takes an offset the consumer never receives,
    so end offset minus the position of the last record stayed >= 1 for ever on the topics the
    jobs write in transactions."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"lag-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)

    def transaction(users: list[str]) -> None:
        producer.begin_transaction()
        for user in users:
            for partition in (0, 1):
                producer.produce(api_topics.sessions, key=user, value=session_snapshot(user).to_json(), partition=partition)
        producer.commit_transaction(30)

    transaction(["a", "b"])
    api = start_api(api_topics)
    api.wait_ready()
    transaction(["c"])
    transaction(["d", "e"])
    wait_until(lambda: api.get("/sessions/e").status_code == 200, 30, "the last transaction to be served")

    def lags() -> list[float | None]:
        return [api.metric("streamstate_api_consumer_lag", topic=api_topics.sessions, partition=p) for p in ("0", "1")]

    try:
        wait_until(lambda: lags() == [0, 0], 30, "the lag gauge to read 0")
    except AssertionError:
        offsets = api.get("/sessions").json()["freshness"]["offsets"]
        raise AssertionError(f"the lag gauge reads {lags()} with the view at {offsets}, each partition's end at 8") from None
    producer.flush(10)


def test_the_lag_refresh_never_holds_back_the_live_view_or_a_stop(bootstrap, new_topic, start_api):
    """Every 5 s once caught up, the follower asked the broker for each partition's end through
    its own consumer: each answer waited behind that consumer's fetch, which the broker holds up
    to fetch.wait.max.ms (500 ms) when nothing is new. Half a second a partition: with 48, the
    follower spent about 24 s of every 29 there, a new snapshot waited that long to be served,
    and a SIGTERM as long to stop the API (the harness kills it after 15 s)."""
    topics = ApiTopics(new_topic(16, "session-state"), new_topic(16, "metric-state"), new_topic(16, "alerts"))
    api = start_api(topics)
    api.wait_ready()
    for i in range(6):  # about 7 s: past the first refresh, which starts as the view catches up, and into the next
        user = f"fresh-{i}"
        publish(bootstrap, topics.sessions, [(user, session_snapshot(user).to_json())])
        wait_until(lambda user=user: api.get(f"/sessions/{user}").status_code == 200, 5, f"{user}'s snapshot to be served within 5 s")
        time.sleep(1)
    partitions = [str(p) for p in range(16)]
    wait_until(lambda: all(api.metric("streamstate_api_consumer_lag", topic=topics.sessions, partition=p) == 0 for p in partitions),
               30, "the lag gauge to read 0 on every partition")
    api.stop()
    # uvicorn ends a graceful shutdown by raising the signal it handled again; -9: killed after 15 s.
    assert api.popen.returncode == -signal.SIGTERM, f"the API did not stop on SIGTERM within 15 s (exit {api.popen.returncode})"
