"""How the API's view follower reads its topics, against the real broker: what the consumer holds,
up to a whole batch, at once, and a new record as soon as it arrives."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from streamstate_api.follower import READ_BATCH, next_records
from tests.integration.api_harness import publish

pytestmark = pytest.mark.timeout(120)

# Far longer than any read here takes: a read that waits it out has waited for a fuller batch.
LONG_WAIT_S = 20.0


def _consumer(bootstrap: str, topic: str) -> Consumer:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "follower-reads", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    return consumer


def _read_one(consumer: Consumer, wait_s: float = LONG_WAIT_S) -> tuple[list, float]:
    started = time.monotonic()
    records = next_records(consumer, wait_s=wait_s)
    return records, time.monotonic() - started


def test_once_caught_up_a_new_record_is_read_at_once_not_after_the_wait(bootstrap, new_topic):
    """Before, the follower asked for 5,000 records with a 200 ms timeout: at a few hundred
    snapshots a second every one waited out the timeout before the API served it."""
    topic = new_topic(1, "follower-reads")
    consumer = _consumer(bootstrap, topic)
    try:
        assert _read_one(consumer, wait_s=1.0)[0] == [], "nothing is there yet"
        publish(bootstrap, topic, [(b"u1", b"first")], partition=0)
        records, waited = _read_one(consumer)
        assert [r.value() for r in records] == [b"first"]
        assert waited < LONG_WAIT_S / 2, f"the read waited {waited:.1f} s for more records"

        publish(bootstrap, topic, [(f"u{i}".encode(), b"%d" % i) for i in range(300)], partition=0)
        time.sleep(1)  # fetched: the next read takes what the consumer holds, not one record
        records, _ = _read_one(consumer)
        assert len(records) > 1 and [r.value() for r in records] == [b"%d" % i for i in range(len(records))]
    finally:
        consumer.close()


def test_a_read_takes_a_whole_batch_when_held_and_what_is_left_without_waiting_for_more(bootstrap, new_topic):
    """Whole batches carry a rebuild's rate. Before, a read asked for 5,000 records with a 200 ms
    timeout: the last read of every rebuild (fewer left) waited the timeout out, and so did every
    read the consumer's queue was short of while a fetch was in flight."""
    topic = new_topic(1, "follower-reads")
    count = READ_BATCH + 1_000
    publish(bootstrap, topic, [(f"u{i}".encode(), b"%d" % i) for i in range(count)], partition=0)
    consumer = _consumer(bootstrap, topic)
    try:
        time.sleep(2)  # fetched, as a rule: the consumer holds them all
        records, sizes, waited = [], [], 0.0
        while len(records) < count and len(sizes) < 10:
            read, took = _read_one(consumer)
            records += read
            sizes.append(len(read))
            waited += took
        assert [r.value() for r in records] == [b"%d" % i for i in range(count)]
        assert max(sizes) == READ_BATCH, f"a whole batch when the consumer holds one: reads of {sizes}"
        assert waited < LONG_WAIT_S / 2, f"reads of {sizes} records waited {waited:.1f} s in all for more"
    finally:
        consumer.close()
