"""``streamstate.testing``'s ``read_committed`` against Apache Kafka: what a read_committed
consumer sees, aborted transactions left out and an open one waited for."""

from __future__ import annotations

import threading

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient

from streamstate.errors import StreamstateError
from streamstate.testing.kafka import KafkaBroker, create_worth_retrying
from tests.integration.kafka_testing import abort_then_commit, open_transaction, transactional_producer


def test_committed_records_are_read_and_aborted_ones_are_not(bootstrap):
    broker = KafkaBroker(bootstrap)
    topic = broker.new_topic(partitions=3)
    broker.produce(topic, [(b"plain", b"1")])
    abort_then_commit(transactional_producer(bootstrap), topic, aborted=(b"aborted", b"2", 1), committed=(b"committed", b"3", 2))

    assert sorted(broker.read_committed(topic)) == [(b"committed", b"3"), (b"plain", b"1")]


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


def test_a_new_topic_is_in_the_metadata_whole_and_a_taken_name_is_refused_by_name(bootstrap):
    broker = KafkaBroker(bootstrap)
    topic = broker.new_topic(partitions=12)
    assert len(AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10).topics[topic].partitions) == 12
    with pytest.raises(StreamstateError, match=rf"creating topic {topic} \(attempt 1\): .*already exists"):
        broker.new_topic(topic)


@pytest.mark.parametrize(("code", "retried"), [
    (KafkaError._TRANSPORT, True), (KafkaError._DESTROY_BROKER, True), (KafkaError.NOT_CONTROLLER, True),
    (KafkaError.TOPIC_ALREADY_EXISTS, False), (KafkaError.INVALID_PARTITIONS, False), (KafkaError.INVALID_CONFIG, False),
])
def test_a_create_is_sent_again_only_after_a_refusal_a_later_attempt_can_pass(code, retried):
    assert create_worth_retrying(KafkaError(code)) is retried
    assert not create_worth_retrying("not a KafkaError")
