"""Topic definitions (infra/kafka/topics.toml) and their creation on a broker.

The broker is given as a :class:`~streamstate_pipeline.kafka_clients.KafkaConnection`: ``Settings.kafka``
(its bootstrap servers and client options) or, in tests and benchmarks, ``KafkaConnection("host:port")``;
:mod:`streamstate_pipeline.kafka_clients` builds the client."""

from __future__ import annotations

import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from streamstate_pipeline.kafka_clients import UNANSWERED, KafkaConnection, admin
from streamstate_pipeline.settings import Settings


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    config: dict[str, str] = field(default_factory=dict)


def load_topics(path: Path, partitions: int | None = None) -> list[TopicSpec]:
    """Read the topic file; ``partitions`` overrides every topic's own count."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"cannot read topic definitions from {path}: {exc}") from None
    return [
        TopicSpec(name, int(partitions or spec.get("partitions", 1)), {k: str(v) for k, v in spec.get("config", {}).items()})
        for name, spec in data.get("topics", {}).items()
    ]


def existing_topics(broker: KafkaConnection, timeout_s: float = 10.0) -> dict[str, int]:
    """Topic name -> partition count, as the broker reports it."""
    metadata = admin(broker).list_topics(timeout=timeout_s)
    return {name: len(t.partitions) for name, t in metadata.topics.items() if not t.error}


def create_topics(broker: KafkaConnection, specs: list[TopicSpec], timeout_s: float = 30.0, replication_factor: int = 1) -> list[str]:
    """Create the topics that do not exist yet, each partition on ``replication_factor``
    brokers (3 on a cluster of three: infra/docker/compose.kafka-3.yml); returns the names created.

    A create that fails with an error a later attempt can pass (:func:`worth_retrying`) is
    tried again until ``timeout_s``: a cluster that has just started moves its controller and
    its brokers' metadata for a while, and librdkafka then drops the connection a request was
    waiting on (``_DESTROY_BROKER``)."""
    deadline = time.monotonic() + timeout_s
    present = existing_topics(broker)
    missing = [s for s in specs if s.name not in present]
    pending = missing
    while pending:
        failed = _create_once(admin(broker), pending, replication_factor, max(1.0, deadline - time.monotonic()))
        if failed and time.monotonic() >= deadline:
            raise failed[0][1]
        pending = [spec for spec, _ in failed]
        if pending:
            time.sleep(0.5)
    # Metadata can lag the create: wait until every partition is visible.
    while time.monotonic() < deadline:
        present = existing_topics(broker)
        if all(present.get(s.name) == s.partitions for s in missing):
            break
        time.sleep(0.1)
    return [s.name for s in missing]


def _create_once(client: AdminClient, specs: list[TopicSpec], replication_factor: int, timeout_s: float) -> list[tuple[TopicSpec, KafkaException]]:
    """One CreateTopics request; returns the topics whose create failed in a way worth
    retrying, each with its error. Any other error is raised; a topic that already exists
    (made by a concurrent caller or by an earlier attempt whose answer was lost) is done."""
    by_name = {s.name: s for s in specs}
    futures = client.create_topics(
        [NewTopic(s.name, num_partitions=s.partitions, replication_factor=replication_factor, config=s.config) for s in specs],
        request_timeout=timeout_s,
    )
    retry = []
    for name, future in futures.items():
        try:
            future.result(timeout=timeout_s + 5)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            if not worth_retrying(error):
                raise
            retry.append((by_name[name], exc))
    return retry


# A broker that did not answer, a broker handle librdkafka dropped with the request on it, and
# the broker's answers while a new cluster moves its controller.
_RETRIED = UNANSWERED | {KafkaError._DESTROY_BROKER, KafkaError.NOT_CONTROLLER, KafkaError.REQUEST_TIMED_OUT}


def worth_retrying(error: object) -> bool:
    """Whether a topic create that failed with ``error`` can pass if sent again."""
    return isinstance(error, KafkaError) and (error.code() in _RETRIED or error.retriable())


def ensure_topics(settings: Settings, replication_factor: int = 1) -> list[str]:
    return create_topics(settings.kafka, load_topics(settings.topics_file, settings.partitions), replication_factor=replication_factor)
