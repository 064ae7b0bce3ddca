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
from confluent_kafka.admin import NewTopic

from streamstate_pipeline.kafka_clients import KafkaConnection, admin
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
    brokers (3 on a cluster of three: infra/docker/compose.kafka-3.yml); returns the names created."""
    client = admin(broker)
    present = existing_topics(broker)
    missing = [s for s in specs if s.name not in present]
    if not missing:
        return []
    futures = client.create_topics(
        [NewTopic(s.name, num_partitions=s.partitions, replication_factor=replication_factor, config=s.config) for s in missing],
        request_timeout=timeout_s,
    )
    for future in futures.values():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if not (isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS):
                raise
    # Metadata can lag the create: wait until every partition is visible.
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        present = existing_topics(broker)
        if all(present.get(s.name) == s.partitions for s in missing):
            break
        time.sleep(0.1)
    return [s.name for s in missing]


def ensure_topics(settings: Settings, replication_factor: int = 1) -> list[str]:
    return create_topics(settings.kafka, load_topics(settings.topics_file, settings.partitions), replication_factor=replication_factor)
