"""A job started beside its broker: Spark starts while the broker does, then the job waits for it.

``streamstate up`` starts the jobs' processes as soon as the broker's process is started,
not once it answers: a job's first seconds go to its JVM and SparkSession, which need no
broker, and they overlap the broker's own start and the topics' creation. Before its
start-up checks (checkpoints against the topics, the output transactions) the job then
waits, up to ``job_broker_wait_s``, until the broker answers and its topics exist. With
the default 0, or when the wait runs out, the checks run at once and fail as they always
did when the broker or a topic is missing.
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import KafkaException

from streamstate_jobs.declaration import JobSpec
from streamstate_pipeline.kafka_clients import admin
from streamstate_pipeline.settings import Settings

log = logging.getLogger("streamstate_jobs")


def job_topics(settings: Settings, spec: JobSpec) -> set[str]:
    """The topics a job reads (from Kafka) and writes."""
    inputs = spec.input_topics(settings) if settings.source == "kafka" else []
    return {*inputs, *spec.output_topics(settings).values()}


def await_broker_and_topics(settings: Settings, spec: JobSpec, monotonic=time.monotonic, sleep=time.sleep) -> bool:
    """Wait up to ``settings.job_broker_wait_s`` for the broker to answer with every topic
    of :func:`job_topics`; whether it did (True at once when the wait is 0)."""
    if settings.job_broker_wait_s <= 0:
        return True
    wanted = job_topics(settings, spec)
    client = admin(settings.kafka)
    deadline = monotonic() + settings.job_broker_wait_s
    missing: set[str] = wanted
    while True:
        try:
            metadata = client.list_topics(timeout=max(0.1, min(2.0, deadline - monotonic())))
            missing = {name for name in wanted if name not in metadata.topics or metadata.topics[name].error is not None}
            if not missing:
                return True
        except KafkaException:
            pass
        if monotonic() >= deadline:
            log.warning("the broker at %s did not answer with the topics %s within %gs; starting anyway",
                        settings.bootstrap_servers, ", ".join(sorted(missing)), settings.job_broker_wait_s)
            return False
        sleep(0.1)
