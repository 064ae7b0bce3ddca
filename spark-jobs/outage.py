"""Telling a Kafka outage apart from other query failures, in one line an operator can act on.

A query that loses its broker fails deep inside the Python data source with a multi-line
Spark traceback; the runner asks the broker directly instead, so the log says plainly
that Kafka is unreachable, what the job does about it, and what the operator should do.
"""

from __future__ import annotations

from streamstate.kafka_clients import bootstrap_of, broker_problem

PROBE_TIMEOUT_S = 5.0


def failure_message(query: str, error: object, broker: object, checkpoint: str, next_step: str) -> str:
    """One line for a failed query: a broker outage named as such, else the error's first 2000 characters.

    ``broker`` is the job's ``Settings`` (or bootstrap servers); ``next_step`` says what the job
    does now, e.g. "restarting from the checkpoint in 5s (restart 1 of 5)".
    """
    problem = broker_problem(broker, PROBE_TIMEOUT_S)
    if problem is not None:
        return (
            f"Kafka broker at {bootstrap_of(broker)} unreachable ({problem}): query {query} stopped; {next_step}. "
            f"Start the broker or fix --bootstrap-servers: the job resumes from its checkpoint {checkpoint} and loses nothing"
        )
    return f"query {query} failed: {' '.join(str(error).split())[:2000]}; {next_step}"
