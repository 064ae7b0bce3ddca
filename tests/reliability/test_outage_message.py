"""The outage diagnosis the job runner logs: a dead broker is named, a live one is not blamed."""

from __future__ import annotations

from streamstate_jobs.outage import failure_message
from streamstate_pipeline.kafka_clients import KafkaConnection, broker_problem
from streamstate_stack.launcher import free_port


def test_a_live_broker_is_not_blamed(bootstrap):
    assert broker_problem(KafkaConnection(bootstrap)) is None
    message = failure_message("q", ValueError("bad\n  thing"), KafkaConnection(bootstrap), "/ck", "the job exits")
    assert message == "query q failed: bad thing; the job exits"


def test_a_dead_broker_is_named_with_what_to_do():
    dead = f"127.0.0.1:{free_port()}"
    message = failure_message("q", RuntimeError("a long traceback"), KafkaConnection(dead), "/ck/q", "retrying in 5s")
    assert message.startswith(f"Kafka broker at {dead} unreachable (")
    assert "retrying in 5s" in message and "resumes from its checkpoint /ck/q" in message
    assert "\n" not in message and "traceback" not in message
