"""The per-worker consumers of the transactional ids' groups: kept while used, closed once idle.

Real confluent-kafka consumers (a consumer connects lazily: no broker is needed to make or close one)."""

from __future__ import annotations

import time

import pytest

from streamstate_jobs.kafka import partition_writer

NOWHERE = {"bootstrap.servers": "127.0.0.1:9", "log_level": 0}  # nothing listens there: no connection-refused lines


def _closed(consumer) -> bool:
    try:
        consumer.memberid()
    except RuntimeError:  # confluent-kafka: "Consumer closed"
        return True
    return False


@pytest.fixture(autouse=True)
def no_groups_left():
    yield
    with partition_writer._groups_lock:
        held = [consumer for consumer, _ in partition_writer._groups.values()]
        partition_writer._groups.clear()
    for consumer in held:
        consumer.close()


def test_an_id_asked_again_gets_its_consumer_and_consumers_in_use_stay_open():
    first = partition_writer._group("job.sessions.0", NOWHERE)
    other = partition_writer._group("job.sessions.1", NOWHERE)
    assert partition_writer._group("job.sessions.0", NOWHERE) is first
    assert first is not other and not _closed(first) and not _closed(other)


def test_consumers_idle_past_the_bound_are_closed_and_forgotten_and_a_new_one_is_made_for_their_id():
    old = [partition_writer._group(f"finished-query.{n}", NOWHERE) for n in range(3)]
    time.sleep(0.05)
    current = partition_writer._group("running-query.0", NOWHERE, idle_s=0.01)
    deadline = time.monotonic() + 10
    while not all(map(_closed, old)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(map(_closed, old)), "idle consumers left open"
    assert not _closed(current)
    assert len(partition_writer._groups) == 1
    again = partition_writer._group("finished-query.0", NOWHERE)
    assert again is not old[0] and not _closed(again)
