"""How the scenario tests read output topics (``tests.scenario.read_topics``), against Apache
Kafka: up to each partition's end at the time of reading, as a ``read_committed`` consumer
(the API) or a ``read_uncommitted`` one sees it, ended by the partitions' end events, not by
waiting for quiet."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from tests.integration.kafka_testing import abort_then_commit, open_transaction, transactional_producer
from tests.scenario import read_topics

# Longer than this test may take: a read that waited for quiet instead of each partition's end
# would run into the timeout below and fail.
NEVER_QUIET_S = 600


def _pairs(messages) -> list[tuple[bytes, bytes]]:
    return sorted((m.key(), m.value()) for m in messages)


@pytest.mark.timeout(120)
def test_a_read_ends_at_each_partitions_end_without_aborted_or_open_records(bootstrap, new_topic):
    plain, transactional, empty = new_topic(2, "reads-plain"), new_topic(2, "reads-txn"), new_topic(3, "reads-empty")
    producer = Producer({"bootstrap.servers": bootstrap})
    for n in range(5):
        producer.produce(plain, key=b"p", value=str(n).encode(), partition=n % 2)
    producer.flush(30)
    writer = transactional_producer(bootstrap)
    abort_then_commit(writer, transactional, aborted=(b"aborted", b"a", 0), committed=(b"committed", b"c", 0))
    stuck = open_transaction(bootstrap, transactional, partition=1)
    try:
        writer.begin_transaction()  # committed, but behind the open transaction on partition 1
        writer.produce(transactional, key=b"behind", value=b"b", partition=1)
        writer.commit_transaction(30)

        committed = read_topics(bootstrap, [plain, transactional, empty], idle_s=NEVER_QUIET_S)
        everything = read_topics(bootstrap, [plain, transactional, empty], idle_s=NEVER_QUIET_S, isolation="read_uncommitted")
    finally:
        stuck.abort_transaction(30)

    assert _pairs(committed[plain]) == [(b"p", str(n).encode()) for n in range(5)]
    assert _pairs(committed[transactional]) == [(b"committed", b"c")]
    assert committed[empty] == []
    assert _pairs(everything[transactional]) == [(b"aborted", b"a"), (b"behind", b"b"), (b"committed", b"c"), (b"open", b"1")]
    assert len(everything[plain]) == 5 and everything[empty] == []
