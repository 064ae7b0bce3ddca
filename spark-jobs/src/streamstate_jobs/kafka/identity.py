"""Which topic a checkpoint's offsets belong to: Kafka topic ids.

A topic deleted and created again under the same name (or a broker whose data was deleted)
restarts its offsets at 0. Once the new topic has grown past the
offsets a checkpoint holds, offsets alone cannot tell it from the old one, and a job would
silently skip the new topic's first records. Brokers since Kafka 2.8 give every
topic a random id at creation; comparing ids closes that gap. A broker without ids answers
the all-zero id, and then only offsets (checked by the sources at planning) are compared.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient

from streamstate_pipeline.kafka_clients import KafkaConnection, admin
from streamstate_pipeline.errors import SourceError, coded

NO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"  # the all-zero Uuid, base64
TIMEOUT_S = 10.0


class SourceResetError(SourceError, RuntimeError):
    """An input topic is not the one the checkpoint was written from, or lost records under it.
    Its message starts with ``[SOURCE_RESET]``: raised in a writer task, it reaches the driver
    as text inside a JVM error, and the runner recognises it there by that code
    (:func:`streamstate_jobs.lost_input.is_source_reset`)."""

    condition = "SOURCE_RESET"

    def __init__(self, detail: str) -> None:
        super().__init__(coded(self.condition, detail))


def topic_ids(broker: KafkaConnection, topics: Iterable[str], client: AdminClient | None = None) -> dict[str, str]:
    """Topic id (base64) of each topic that has one; topics without an id are left out.
    ``broker``: the job's connection (``Settings.kafka``);
    ``client``: an admin client of that broker to ask instead of a new one."""
    names = sorted(set(topics))
    ids: dict[str, str] = {}
    if client is None:
        client = admin(broker)  # held until the futures are resolved: a collected client fails them (_DESTROY)
    for name, future in client.describe_topics(TopicCollection(names), request_timeout=TIMEOUT_S).items():
        try:
            topic_id = str(future.result(TIMEOUT_S).topic_id)
        except KafkaException:
            continue  # a missing topic has no id: the sources report missing topics themselves
        except FutureTimeout:
            # A broker lost mid-batch (its leadership not yet moved) can leave the answer late: this
            # batch goes on with the offsets' own checks, and the next one asks again, rather than
            # failing the batch and restarting the query for a question the next batch answers.
            continue
        if topic_id and topic_id != NO_TOPIC_ID:
            ids[name] = topic_id
    return ids


def changed_topics(recorded: dict[str, str], current: dict[str, str]) -> dict[str, tuple[str, str]]:
    """Topics whose id differs from the recorded one: name -> (recorded id, current id)."""
    return {
        name: (old, current[name]) for name, old in recorded.items() if name in current and current[name] != old
    }


def raise_if_changed(recorded: dict[str, str], current: dict[str, str], checkpoint: str) -> None:
    """Raise :class:`SourceResetError` when a topic's id is not the one ``checkpoint`` recorded."""
    changed = changed_topics(recorded, current)
    if changed:
        described = ", ".join(f"{name} (id {old} -> {new})" for name, (old, new) in sorted(changed.items()))
        raise SourceResetError(
            f"input topic {described} was deleted and created again since checkpoint {checkpoint} read it: "
            "its offsets belong to the old topic, and reading on would skip records of the new one"
        )


@dataclass(frozen=True)
class InputTopics:
    """The input topics' ids a checkpoint recorded, checked again by every writer task of every
    batch before it writes anything (:mod:`streamstate_jobs.kafka.partition_writer`): a topic
    recreated while the job runs fails the batch before any of its records is written or its
    offsets are committed. A topic that had no id when the query started is checked from its
    next start on."""

    broker: KafkaConnection
    recorded: tuple[tuple[str, str], ...]  # (topic, id): a tuple pickles to the tasks and hashes
    checkpoint: str

    def check(self) -> None:
        recorded = dict(self.recorded)
        raise_if_changed(recorded, topic_ids(self.broker, recorded, _worker_admin(self.broker)), self.checkpoint)


# One admin client per Python worker and broker: a new one costs 7-25 ms of connecting, each batch.
_admins: dict[KafkaConnection, AdminClient] = {}
_admins_lock = threading.Lock()


def _worker_admin(broker: KafkaConnection) -> AdminClient:
    with _admins_lock:
        client = _admins.get(broker)
        if client is None:
            client = _admins[broker] = admin(broker)
        return client
