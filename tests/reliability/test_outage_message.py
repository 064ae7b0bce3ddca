"""The outage diagnosis the job runner logs: a dead broker is named, a live one is not blamed."""

from __future__ import annotations

import pytest

from streamstate_jobs.outage import failure_message
from streamstate_pipeline.kafka_clients import BrokerUnreachable, KafkaConnection, broker_problem
from streamstate_stack.launcher import free_port


def test_a_live_broker_is_not_blamed(bootstrap):
    assert broker_problem(KafkaConnection(bootstrap)) is None
    message = failure_message("q", ValueError("bad\n  thing"), KafkaConnection(bootstrap), "/ck", "the job exits")
    assert message == "query q failed: bad thing; the job exits"
    # An error that found the broker down keeps its finding: the broker is not asked twice. It
    # is raised as the queries start, so the query did not start (it was not running to stop).
    found = failure_message("q", BrokerUnreachable(bootstrap, "it did not answer"), KafkaConnection(bootstrap), "/ck", "retrying")
    assert found.startswith(f"Kafka broker at {bootstrap} unreachable (it did not answer): query q did not start; retrying"), found


def test_a_dead_broker_is_named_with_what_to_do():
    dead = f"127.0.0.1:{free_port()}"
    message = failure_message("q", RuntimeError("a long traceback"), KafkaConnection(dead), "/ck/q", "retrying in 5s")
    assert message.startswith(f"Kafka broker at {dead} unreachable (") and ": query q stopped; " in message
    assert "retrying in 5s" in message and "resumes from its checkpoint /ck/q" in message
    assert "\n" not in message and "traceback" not in message


def test_a_dead_broker_is_never_read_as_kafkas_default_markers_retention(bootstrap):
    """The markers' check assumes Kafka's 7 days only where the brokers answer and refuse to
    describe their settings; a broker that does not answer is an outage (its retention may be a
    minute, and a batch replayed past it would be written twice)."""
    from streamstate_jobs.checkpoints import offsets_retention_ms
    from streamstate_pipeline.errors import UnavailableError
    from streamstate_pipeline.settings import Settings

    dead = f"127.0.0.1:{free_port()}"
    with pytest.raises(UnavailableError, match=f"Kafka broker at {dead} unreachable"):
        offsets_retention_ms(Settings(bootstrap_servers=dead))
    assert offsets_retention_ms(Settings(bootstrap_servers=bootstrap)) > 0  # a live broker answers
