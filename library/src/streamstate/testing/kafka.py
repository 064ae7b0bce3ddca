"""A throwaway Apache Kafka broker in a container, and reading and writing its topics in tests.

testcontainers' own ``KafkaContainer`` drives Confluent's images (their start scripts), so
this runs Apache Kafka's image (``apache/kafka``) the way its documentation does: one KRaft
node configured from ``KAFKA_*`` variables. The host port is chosen before the container
starts, because the broker must advertise the address clients reach it at.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from streamstate.errors import UnavailableError

# Apache Kafka's official image at the release the project is tested with (infra/versions.env).
OFFICIAL_IMAGE = "apache/kafka:3.9.1"
# The same release built locally by `make images`, on machines that reach no registry.
LOCAL_IMAGE = "streamstate-local/kafka:3.9.1"
IMAGE_VARIABLE = "STREAMSTATE_TEST_KAFKA_IMAGE"
STARTED_LINE = "Kafka Server started"
START_TIMEOUT_S = 120.0
Record = tuple[str | bytes | None, str | bytes | None]  # key, value


class KafkaTestError(UnavailableError, RuntimeError):
    """The test broker could not be started or reached, or a topic could not be written or read."""


def kafka_image() -> str:
    """``$STREAMSTATE_TEST_KAFKA_IMAGE``; else the locally built stand-in when it exists (a
    machine without a registry); else Apache Kafka's official image."""
    chosen = os.environ.get(IMAGE_VARIABLE)
    if chosen:
        return chosen
    from docker import from_env
    from docker.errors import ImageNotFound

    try:
        from_env().images.get(LOCAL_IMAGE)
        return LOCAL_IMAGE
    except ImageNotFound:
        return OFFICIAL_IMAGE


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _without_reaper_unless_present() -> None:
    """testcontainers starts a reaper container (Ryuk) that removes what a killed test run left.
    Where its image cannot be had (no registry), run without it: the fixtures here stop their
    containers themselves."""
    if "TESTCONTAINERS_RYUK_DISABLED" in os.environ:
        return
    from docker import from_env
    from docker.errors import ImageNotFound
    from testcontainers.core.config import testcontainers_config

    try:
        from_env().images.get(testcontainers_config.ryuk_image)
    except ImageNotFound:
        testcontainers_config.ryuk_disabled = True


def produce(bootstrap_servers: str, topic: str, records: Iterable[Record]) -> int:
    """Write (key, value) records to ``topic``, each acknowledged (idempotent producer); returns
    how many; :class:`KafkaTestError` names what was not delivered."""
    errors: list[str] = []
    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True, "linger.ms": 5})
    sent = 0
    for key, value in records:
        while True:
            try:
                producer.produce(topic, key=key, value=value, on_delivery=lambda err, _: errors.append(str(err)) if err else None)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.05)
        sent += 1
    unsent = producer.flush(60)
    if unsent or errors:
        raise KafkaTestError(f"{unsent} of {sent} records to {topic} unsent, errors: {errors[:3]}")
    return sent


# Refusals of a create that a later attempt can pass: a request that got no answer, a broker
# handle librdkafka dropped with the request on it, a controller moving on a new cluster.
_CREATE_RETRIED = frozenset({
    KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN, KafkaError._RESOLVE, KafkaError._DESTROY_BROKER,
    KafkaError.NOT_CONTROLLER, KafkaError.REQUEST_TIMED_OUT,
})


def create_worth_retrying(error: object) -> bool:
    """Whether a topic create that failed with ``error`` can pass if sent again."""
    return isinstance(error, KafkaError) and (error.code() in _CREATE_RETRIED or error.retriable())


@dataclass
class KafkaBroker:
    """A running broker: where to reach it, and the reads and writes a test needs."""

    bootstrap_servers: str
    _admin: AdminClient = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})

    def new_topic(self, name: str | None = None, partitions: int = 1, config: dict[str, str] | None = None, timeout_s: float = 30.0) -> str:
        """Create a topic (a fresh random name unless given) and return its name once every
        partition is in the broker's metadata.

        A create refused in a way a later one can pass (:func:`create_worth_retrying`: a broker
        that has just started moves its controller for a while) is sent again until
        ``timeout_s``; a name that already exists is an error, unless an earlier attempt of
        this call made it and its answer was lost."""
        topic = name or f"test-{uuid.uuid4().hex[:10]}"
        deadline = time.monotonic() + timeout_s
        attempts = 0
        while True:
            attempts += 1
            futures = self._admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})], request_timeout=timeout_s)
            try:
                futures[topic].result(timeout_s + 5)
                break
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if attempts > 1 and isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    break
                if not create_worth_retrying(error) or time.monotonic() >= deadline:
                    raise KafkaTestError(f"creating topic {topic} (attempt {attempts}): {error}") from exc
            time.sleep(0.5)
        while len(self._partitions_known(topic, max(1.0, deadline - time.monotonic()))) < partitions:
            if time.monotonic() >= deadline:
                raise KafkaTestError(f"creating topic {topic}: not all of its {partitions} partitions in the metadata within {timeout_s:g} s")
            time.sleep(0.1)
        return topic

    def _partitions_known(self, topic: str, timeout_s: float) -> dict:
        try:
            return self._admin.list_topics(topic, timeout=timeout_s).topics[topic].partitions
        except KafkaException as error:
            raise KafkaTestError(f"reading the metadata of topic {topic}: {error}") from error

    def produce(self, topic: str, records: Iterable[Record]) -> int:
        """Write (key, value) records, each acknowledged; returns how many."""
        return produce(self.bootstrap_servers, topic, records)

    def read_committed(self, topic: str, timeout_s: float = 60.0) -> list[tuple[bytes | None, bytes | None]]:
        """Every committed (key, value) of ``topic``, as a ``read_committed`` consumer sees it:
        records of aborted transactions are not there, and a transaction open when the read
        starts is waited for until it commits or aborts (at most ``timeout_s``)."""
        consumer = Consumer({
            "bootstrap.servers": self.bootstrap_servers, "group.id": f"streamstate-testing-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed", "enable.partition.eof": True, "enable.auto.commit": False,
            # A partition's end is known from an empty fetch, which the broker holds for this long.
            "fetch.wait.max.ms": 10,
        })
        try:
            metadata = consumer.list_topics(topic, timeout=30).topics[topic]
            if metadata.error is not None:
                raise KafkaTestError(f"reading {topic}: {metadata.error}")
            partitions = sorted(metadata.partitions)
            ends = self._ends(topic, partitions)
            consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
            records: list[tuple[bytes | None, bytes | None]] = []
            finished: set[int] = set()
            deadline = time.monotonic() + timeout_s
            while len(finished) < len(partitions):
                if time.monotonic() > deadline:
                    raise KafkaTestError(f"reading {topic}: partitions {sorted(set(partitions) - finished)} not at their end within {timeout_s:g} s")
                # consume() returns early only with all 1,000 records: a short wait per call.
                for message in consumer.consume(1000, timeout=0.05):
                    error = message.error()
                    if error is None:
                        records.append((message.key(), message.value()))
                    elif error.code() == KafkaError._PARTITION_EOF:
                        # A read_committed consumer's end is the last stable offset: short of the
                        # partition's end while a transaction is open.
                        partition = message.partition() or 0
                        if (message.offset() or 0) >= ends[partition]:
                            finished.add(partition)
                    else:
                        raise KafkaTestError(f"reading {topic}: {error}")
            return records
        finally:
            consumer.close()

    def _ends(self, topic: str, partitions: list[int]) -> dict[int, int]:
        """Each partition's end, open transactions' records included (the high watermark)."""
        futures = self._admin.list_offsets(
            {TopicPartition(topic, p): OffsetSpec.latest() for p in partitions},
            isolation_level=IsolationLevel.READ_UNCOMMITTED, request_timeout=30,
        )
        try:
            return {tp.partition: future.result().offset for tp, future in futures.items()}
        except KafkaException as error:
            raise KafkaTestError(f"reading the ends of {topic}: {error}") from error


class KafkaContainer:
    """Apache Kafka in a container, single KRaft node, reachable from the host on 127.0.0.1.

    Use as a context manager, or ``start()`` / ``stop()``. ``image`` defaults to :func:`kafka_image`.
    """

    def __init__(self, image: str | None = None) -> None:
        from testcontainers.core.container import DockerContainer

        _without_reaper_unless_present()
        self.image = image or kafka_image()
        self.port = _free_port()
        self.container = (
            DockerContainer(self.image)
            .with_bind_ports(9092, self.port)
            .with_env("CLUSTER_ID", "c3RyZWFtc3RhdGUtdGVzdA")
            .with_env("KAFKA_NODE_ID", "1")
            .with_env("KAFKA_PROCESS_ROLES", "broker,controller")
            .with_env("KAFKA_CONTROLLER_QUORUM_VOTERS", "1@localhost:9093")
            .with_env("KAFKA_CONTROLLER_LISTENER_NAMES", "CONTROLLER")
            .with_env("KAFKA_LISTENERS", "PLAINTEXT://:9092,CONTROLLER://:9093")
            .with_env("KAFKA_ADVERTISED_LISTENERS", f"PLAINTEXT://127.0.0.1:{self.port}")
            .with_env("KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT")
            .with_env("KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR", "1")
            .with_env("KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR", "1")
            .with_env("KAFKA_TRANSACTION_STATE_LOG_MIN_ISR", "1")
            # One partition each on one node: Kafka's 50 + 50 cost a new broker's first
            # transaction and group lookup about a CPU-second more.
            .with_env("KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS", "1")
            .with_env("KAFKA_TRANSACTION_STATE_LOG_NUM_PARTITIONS", "1")
            .with_env("KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS", "0")
            .with_env("KAFKA_AUTO_CREATE_TOPICS_ENABLE", "false")
            .with_env("KAFKA_HEAP_OPTS", "-Xmx384m")
        )
        self.broker: KafkaBroker | None = None

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> KafkaBroker:
        """Start the container and wait until the broker answers; the broker's handle."""
        self.container.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            stdout, stderr = self.container.get_logs()
            if STARTED_LINE.encode() in stdout + stderr and self._answers():
                break
            if self.container.get_wrapped_container().status == "exited" or time.monotonic() > deadline:
                tail = (stdout + stderr).decode(errors="replace")[-2000:]
                self.stop()
                raise KafkaTestError(f"Kafka ({self.image}) did not start within {START_TIMEOUT_S:g} s:\n{tail}")
            time.sleep(0.5)
            self.container.get_wrapped_container().reload()
        self.broker = KafkaBroker(self.bootstrap_servers)
        return self.broker

    def _answers(self) -> bool:
        try:
            AdminClient({"bootstrap.servers": self.bootstrap_servers}).list_topics(timeout=2)
            return True
        except KafkaException:
            return False

    def stop(self) -> None:
        self.container.stop()

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
