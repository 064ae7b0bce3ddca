"""Telling a Kafka outage apart from other query failures, in one line an operator can act on.

A query that loses its broker either fails deep inside Spark with a multi-line traceback or,
with Spark's Kafka source, does not fail at all: its client retries and the query waits
without a word. The runner asks the broker directly instead, so the log says plainly that
Kafka is unreachable, what the job does about it, and what the operator should do.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from streamstate_pipeline.kafka_clients import BrokerUnreachable, KafkaConnection, broker_problem

PROBE_TIMEOUT_S = 5.0
# How often a running job asks its broker: a metadata request every 15 s costs nothing, and an
# outage is named well before anyone would look at a silent job.
WATCH_INTERVAL_S = 15.0

log = logging.getLogger("streamstate_jobs.outage")


def failure_message(query: str, error: object, broker: KafkaConnection, checkpoint: str, next_step: str) -> str:
    """One line for a failed query: a broker outage named as such, else the error's first 2000 characters.

    ``broker`` is the job's connection (``Settings.kafka``); ``next_step`` says what the job
    does now, e.g. "restarting from the checkpoint in 5s (restart 1 of 5)". A
    :class:`BrokerUnreachable` error (the runner's check before and during its queries' start)
    has asked the broker already, and is not asked again.
    """
    problem: str | None
    if isinstance(error, BrokerUnreachable):  # the runner's check as its queries start
        problem, outcome = error.problem, "did not start"
    else:
        problem, outcome = broker_problem(broker, PROBE_TIMEOUT_S), "stopped"
    if problem is not None:
        return (
            f"Kafka broker at {broker.bootstrap_servers} unreachable ({problem}): query {query} {outcome}; {next_step}. "
            f"Start the broker or fix --bootstrap-servers: the job resumes from its checkpoint {checkpoint} and loses nothing"
        )
    return f"query {query} failed: {' '.join(str(error).split())[:2000]}; {next_step}"


class BrokerWatch:
    """Asks the broker every ``WATCH_INTERVAL_S`` while the job's queries run; says in one line
    when it stops answering and when it answers again, and tells ``on_change`` (the job's
    ``streamstate_job_up`` follows it: a query waiting for its broker is not up)."""

    def __init__(self, broker: KafkaConnection, query: str, checkpoint: str, on_change: Callable[[bool], None]):
        self._broker, self._query, self._checkpoint, self._on_change = broker, query, checkpoint, on_change
        self._next_probe = time.monotonic() + WATCH_INTERVAL_S
        self._reachable = True

    @property
    def reachable(self) -> bool:
        """The last probe's verdict (True before the first)."""
        return self._reachable

    def poll(self) -> None:
        if time.monotonic() < self._next_probe:
            return
        problem = broker_problem(self._broker, PROBE_TIMEOUT_S)
        self._next_probe = time.monotonic() + WATCH_INTERVAL_S
        if (problem is None) == self._reachable:
            return
        self._reachable = problem is None
        self._on_change(self._reachable)
        if problem is None:
            log.warning("Kafka broker at %s answers again: query %s goes on", self._broker.bootstrap_servers, self._query)
        else:
            log.error(
                "Kafka broker at %s unreachable (%s): query %s waits for it (Spark's Kafka client keeps retrying). "
                "Start the broker or fix --bootstrap-servers: the job resumes from its checkpoint %s and loses nothing",
                self._broker.bootstrap_servers, problem, self._query, self._checkpoint,
            )
