"""Which failed topic creates are sent again (pure logic; the creates themselves run against a
real broker in tests/integration/test_cli_topics.py and on the three-node cluster)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from streamstate_pipeline.topics import worth_retrying


@pytest.mark.parametrize(
    "code", [KafkaError._DESTROY_BROKER, KafkaError._TRANSPORT, KafkaError._RESOLVE, KafkaError._TIMED_OUT, KafkaError.NOT_CONTROLLER],
)
def test_a_dropped_connection_or_a_moving_controller_is_tried_again(code):
    assert worth_retrying(KafkaError(code))


@pytest.mark.parametrize(
    "code", [KafkaError.INVALID_REPLICATION_FACTOR, KafkaError.INVALID_CONFIG, KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.POLICY_VIOLATION],
)
def test_a_refusal_no_retry_can_change_is_not(code):
    assert not worth_retrying(KafkaError(code))


def test_a_failure_that_is_not_a_kafka_error_is_not():
    assert not worth_retrying(TimeoutError("timed out"))
    assert not worth_retrying(None)
