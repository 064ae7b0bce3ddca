"""Telling a Kafka outage apart from other query failures, in one line an operator can act on.

A query that loses its broker fails deep inside the Python data source with a multi-line
Spark traceback; the runner asks the broker directly instead, so the log says plainly
that Kafka is unreachable, what the job does about it, and what the operator should do.
"""

from __future__ import annotations

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

PROBE_TIMEOUT_S = 5.0


def broker_problem(bootstrap_servers: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None when the broker answers a metadata request within ``timeout_s``, else why not."""
    client = AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 0, "socket.timeout.ms": int(timeout_s * 1000)})
    try:
        client.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else exc
        return error.str() if hasattr(error, "str") else str(error)
    return None


def failure_message(query: str, error: object, bootstrap_servers: str, checkpoint: str, next_step: str) -> str:
    """One line for a failed query: a broker outage named as such, else the error's first 2000 characters.

    ``next_step`` says what the job does now, e.g. "restarting from the checkpoint in 5s (restart 1 of 5)".
    """
    problem = broker_problem(bootstrap_servers)
    if problem is not None:
        return (
            f"Kafka broker at {bootstrap_servers} unreachable ({problem}): query {query} stopped; {next_step}. "
            f"Start the broker or fix --bootstrap-servers: the job resumes from its checkpoint {checkpoint} and loses nothing"
        )
    return f"query {query} failed: {' '.join(str(error).split())[:2000]}; {next_step}"
