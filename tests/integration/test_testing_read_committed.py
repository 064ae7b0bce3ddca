"""``streamstate.testing``'s ``read_committed`` against Apache Kafka: what a read_committed
consumer sees, aborted transactions left out and an open one waited for."""

from __future__ import annotations

import threading
import uuid

import pytest
from confluent_kafka import Producer

from streamstate.errors import StreamstateError
from streamstate.testing.kafka import KafkaBroker


def transactional_producer(bootstrap: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"read-committed-test-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    return producer


def test_committed_records_are_read_and_aborted_ones_are_not(bootstrap):
    broker = KafkaBroker(bootstrap)
    topic = broker.new_topic(partitions=3)
    broker.produce(topic, [(b"plain", b"1")])
    producer = transactional_producer(bootstrap)
    producer.begin_transaction()
    producer.produce(topic, key=b"aborted", value=b"2", partition=1)
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, key=b"committed", value=b"3", partition=2)
    producer.commit_transaction(30)

    assert sorted(broker.read_committed(topic)) == [(b"committed", b"3"), (b"plain", b"1")]


def open_transaction(bootstrap: str, topic: str, partition: int) -> Producer:
    """A producer whose transaction holds one acknowledged record on ``partition``, still open."""
    producer = transactional_producer(bootstrap)
    producer.begin_transaction()
    producer.produce(topic, key=b"open", value=b"1", partition=partition)
    producer.flush(30)
    return producer


def test_an_open_transaction_is_waited_for_until_it_commits(bootstrap):
    broker = KafkaBroker(bootstrap)
    topic = broker.new_topic(partitions=2)
    producer = open_transaction(bootstrap, topic, partition=0)
    committer = threading.Timer(2.0, lambda: producer.commit_transaction(30))
    committer.start()
    try:
        assert broker.read_committed(topic, timeout_s=60) == [(b"open", b"1")]
    finally:
        committer.join()


def test_a_transaction_left_open_fails_the_read_naming_the_partition(bootstrap):
    broker = KafkaBroker(bootstrap)
    topic = broker.new_topic(partitions=2)
    producer = open_transaction(bootstrap, topic, partition=1)
    try:
        with pytest.raises(StreamstateError, match=r"partitions \[1\] not at their end within 3 s"):
            broker.read_committed(topic, timeout_s=3)
    finally:
        producer.abort_transaction(30)
