"""The one place Kafka clients are configured, reached and asked where partitions end.

Every librdkafka client of the project (the demo producers, the snapshot API, the CLI, the
stack launcher and the test and benchmark tools) gets its
settings from the role functions here, built in layers, later ones winning:

1. the role's defaults (:func:`producer_config`, :func:`reader_config`, :func:`admin_config`),
2. what the call site tunes for its purpose (keyword arguments, dots as in librdkafka),
3. the connection, a :class:`KafkaConnection` (``Settings.kafka``): ``bootstrap.servers`` and
   the user's ``Settings.kafka_client_options`` (SASL, SSL, ``client.id``, timeouts: any librdkafka setting),
4. the settings a reader manages itself (a throw-away group id, no commits), which no option
   may change (:data:`MANAGED_KEYS` are refused when the settings are read).

Spark's built-in ``kafka`` format runs the Java client, which takes the same connection as
``kafka.*`` options: :meth:`KafkaConnection.spark_options` translates the librdkafka names that differ
(``sasl.username``/``sasl.password`` become a ``sasl.jaas.config``, ``ssl.ca.location`` a PEM
trust store) and passes options prefixed ``java.`` to the Java client only. Secrets never
reach a log line or ``streamstate config`` unmasked (:func:`masked`).

Also here, once each: the reachability check (:func:`broker_problem`, :func:`wait_for_broker`),
the coordinators' warm-up of a new broker (:func:`warm_coordinators`), partitions' end
offsets (:func:`watermarks` through a consumer not yet fetching, with the earliest;
:func:`end_offsets` through an admin client, for a consumer that is), the brokers' own settings (:func:`broker_settings`), and the
turning of a Kafka error into a one-line reason (:func:`reason`).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec, ResourceType

from streamstate_pipeline.errors import UnavailableError

log = logging.getLogger("streamstate.kafka")

TopicPartitionKey = tuple[str, int]
ClientConfig = dict[str, Any]

SPARK_PREFIX = "kafka."
# An option under this prefix goes to Spark's Java client only (e.g. java.sasl.jaas.config).
JAVA_PREFIX = "java."
# Set from their own settings or by the role itself: an option could only break them.
MANAGED_KEYS = (
    "bootstrap.servers",
    "group.id",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "enable.partition.eof",
    "auto.offset.reset",
)
# An option whose key contains one of these is a secret: its value is never shown.
SECRET_MARKERS = ("password", "secret", "jaas", "key", "token")
MASK = "***"

# librdkafka names the Java client does not know (translated where a translation exists).
LIBRDKAFKA_ONLY = (
    "sasl.username",
    "sasl.password",
    "sasl.mechanisms",
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
    "enable.ssl.certificate.verification",
    "socket.timeout.ms",
    "log_level",
    "debug",
)
JAAS_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}

METADATA_TIMEOUT_S = 10.0


# --------------------------------------------------------------------------- options
def parse_options(value: object) -> dict[str, str]:
    """``Settings.kafka_client_options`` from a mapping or its JSON text (the environment variable)."""
    if isinstance(value, (str, bytes)):
        try:
            value = json.loads(value or "{}")
        except ValueError as exc:
            raise ValueError(f'Kafka client options must be a JSON object like {{"client.id": "x"}}: {exc}') from None
    if not isinstance(value, Mapping):
        raise ValueError(f'Kafka client options must be a JSON object like {{"client.id": "x"}}, got {type(value).__name__}')
    return validate_options(value)


def validate_options(options: Mapping[str, object]) -> dict[str, str]:
    """``Settings.kafka_client_options`` checked: string keys and values, no managed key."""
    checked: dict[str, str] = {}
    for key, value in options.items():
        name = str(key).strip()
        if not name or any(c.isspace() for c in name):
            raise ValueError(f"Kafka client option {key!r}: a key is a librdkafka setting name such as security.protocol")
        if name.lower() in MANAGED_KEYS:
            hint = " (use bootstrap_servers)" if name.lower() == "bootstrap.servers" else ""
            raise ValueError(f"Kafka client option {name} is managed by streamstate and cannot be set{hint}")
        if value is None or isinstance(value, (dict, list)):
            raise ValueError(f"Kafka client option {name}: the value must be a string, number or boolean")
        checked[name] = str(value).lower() if isinstance(value, bool) else str(value)
    return checked


def is_secret(key: str) -> bool:
    lowered = key.lower()
    return any(marker in lowered for marker in SECRET_MARKERS)


def masked(options: Mapping[str, object]) -> dict[str, object]:
    """``options`` with every secret's value replaced by ``***``: for logs and printed settings."""
    return {key: MASK if is_secret(str(key)) else value for key, value in options.items()}


def masked_json(options: Mapping[str, object]) -> str:
    return json.dumps(masked(options), sort_keys=True)


def librdkafka_options(options: Mapping[str, str]) -> dict[str, str]:
    """The options meant for librdkafka clients: all but the ``java.`` ones."""
    return {k: v for k, v in options.items() if not k.startswith(JAVA_PREFIX)}


@dataclass(frozen=True, init=False, repr=False)
class KafkaConnection:
    """Where a client connects and how: the bootstrap servers and the user's client options
    (``Settings.kafka_client_options``: SASL, SSL, ``client.id``, any librdkafka setting, and
    ``java.`` ones for Spark's Java client only). Immutable and checked when made: the bootstrap
    servers are not blank and the options pass :func:`validate_options`. Its repr masks every
    secret's value (:func:`masked`).

    ``Settings.kafka`` is the job's, the API's and the CLI's; a bare broker address (tests,
    benchmarks) is ``KafkaConnection("host:port")``."""

    bootstrap_servers: str
    # The checked options as (name, value) pairs, in their given order: a tuple cannot be changed
    # in place, hashes and pickles (a MappingProxyType does not pickle).
    options: tuple[tuple[str, str], ...]

    def __init__(self, bootstrap_servers: str, options: Mapping[str, object] | Iterable[tuple[str, object]] = ()) -> None:
        if not isinstance(bootstrap_servers, str):
            raise TypeError(f"Kafka bootstrap servers must be a string like host:port[,host:port], got {type(bootstrap_servers).__name__}")
        if not bootstrap_servers.strip():
            raise ValueError("Kafka bootstrap servers are not set: give host:port[,host:port]")
        checked = validate_options(options if isinstance(options, Mapping) else dict(options))
        object.__setattr__(self, "bootstrap_servers", bootstrap_servers)
        object.__setattr__(self, "options", tuple(checked.items()))

    def __repr__(self) -> str:
        return f"KafkaConnection(bootstrap_servers={self.bootstrap_servers!r}, options={masked(dict(self.options))!r})"

    def with_bootstrap_servers(self, bootstrap_servers: str | None) -> KafkaConnection:
        """The same options towards other bootstrap servers (a command-line flag); unchanged for None or ""."""
        return KafkaConnection(bootstrap_servers, self.options) if bootstrap_servers else self

    def client_config(self) -> ClientConfig:
        """``bootstrap.servers`` plus the options meant for librdkafka (all but the ``java.`` ones)."""
        return {"bootstrap.servers": self.bootstrap_servers, **librdkafka_options(dict(self.options))}

    def spark_options(self) -> dict[str, str]:
        """The connection as the ``kafka.*`` options of Spark's Kafka connector, the librdkafka
        settings translated for its Java client by :func:`java_client_options`."""
        client = java_client_options(dict(self.options))
        return {f"{SPARK_PREFIX}bootstrap.servers": self.bootstrap_servers, **{SPARK_PREFIX + k: v for k, v in client.items()}}


# --------------------------------------------------------------------------- roles
def producer_config(connection: KafkaConnection, **tuning: Any) -> ClientConfig:
    """A producer whose records count as written once all in-sync replicas have them."""
    defaults = {"acks": "all", "linger.ms": 5}
    return {**defaults, **_dotted(tuning), **connection.client_config()}


def reader_config(connection: KafkaConnection, purpose: str = "reader", **tuning: Any) -> ClientConfig:
    """A consumer that only ``assign()``s and seeks: offsets are the caller's, never a group's.

    librdkafka requires a group id; a random one per client joins nothing and commits nothing.
    End-of-partition events are on (the end probe and catching up rely on them). It reads
    ``read_committed`` unless tuned otherwise: the jobs write their outputs in transactions, and
    records of an aborted one (a batch cut short by a crash, written again by its replay) are
    never seen; a partition then ends at its last stable offset."""
    defaults = {"isolation.level": "read_committed"}
    managed = {
        "group.id": f"streamstate-{purpose}-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
    }
    return {**defaults, **_dotted(tuning), **connection.client_config(), **managed}


def admin_config(connection: KafkaConnection, **tuning: Any) -> ClientConfig:
    """An admin client (metadata, topics) that stays quiet: failures come back as exceptions,
    not as librdkafka log lines on stderr."""
    defaults = {"socket.timeout.ms": 10_000, "log_level": 0}
    return {**defaults, **_dotted(tuning), **connection.client_config()}


def admin(connection: KafkaConnection, **tuning: Any) -> AdminClient:
    return AdminClient(admin_config(connection, **tuning))


def _dotted(tuning: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments as librdkafka names: ``linger__ms`` -> ``linger.ms``."""
    return {key.replace("__", "."): value for key, value in tuning.items()}


# --------------------------------------------------------------------------- Spark
def java_client_options(options: Mapping[str, str]) -> dict[str, str]:
    """librdkafka options as the Java client's properties.

    Shared names (``security.protocol``, ``sasl.mechanism``, ``client.id``, ...) pass as they
    are; ``sasl.username`` + ``sasl.password`` become a ``sasl.jaas.config`` for PLAIN and SCRAM;
    ``ssl.ca.location`` (a PEM file) becomes a PEM trust store; ``ssl.endpoint.identification.algorithm=none``
    becomes the Java client's empty value; other librdkafka-only names (:data:`LIBRDKAFKA_ONLY`)
    are left out. ``java.<name>`` options are set as ``<name>`` last, over any translation."""
    plain = librdkafka_options(options)
    java = {k: v for k, v in plain.items() if k not in LIBRDKAFKA_ONLY}
    mechanism = (plain.get("sasl.mechanism") or plain.get("sasl.mechanisms") or "").upper()
    if mechanism:
        java["sasl.mechanism"] = mechanism
    if "sasl.username" in plain and mechanism in JAAS_LOGIN_MODULES:
        java["sasl.jaas.config"] = (
            f'{JAAS_LOGIN_MODULES[mechanism]} required username="{_jaas_quoted(plain["sasl.username"])}" '
            f'password="{_jaas_quoted(plain.get("sasl.password", ""))}";'
        )
    if "ssl.ca.location" in plain:
        java["ssl.truststore.type"] = "PEM"
        java["ssl.truststore.location"] = plain["ssl.ca.location"]
    algorithm = plain.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None:
        java["ssl.endpoint.identification.algorithm"] = "" if algorithm.lower() == "none" else algorithm
    java.update({k[len(JAVA_PREFIX):]: v for k, v in options.items() if k.startswith(JAVA_PREFIX)})
    return java


def _jaas_quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


# --------------------------------------------------------------------------- errors
def reason(error: BaseException | KafkaError | None) -> str:
    """A Kafka error (or any exception) as one line: librdkafka's own text for a KafkaError."""
    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        error = error.args[0]
    if isinstance(error, KafkaError):
        return error.str()
    text = " ".join(str(error).split()) if error is not None else ""
    return text or type(error).__name__


# --------------------------------------------------------------------------- reachability
def broker_problem(connection: KafkaConnection, timeout_s: float = 5.0) -> str | None:
    """None when the broker answers a metadata request within ``timeout_s``, else why not."""
    try:
        admin(connection, **{"socket.timeout.ms": max(int(timeout_s * 1000), 10)}).list_topics(timeout=timeout_s)
    except KafkaException as exc:
        return reason(exc)
    return None


class BrokerUnreachable(UnavailableError):
    """The Kafka broker did not answer a metadata request (:func:`require_broker`)."""

    def __init__(self, bootstrap_servers: str, problem: str):
        super().__init__(f"Kafka broker at {bootstrap_servers} unreachable ({problem})")
        self.problem = problem


def require_broker(connection: KafkaConnection, timeout_s: float = 5.0) -> None:
    """Raise :class:`BrokerUnreachable` when the broker does not answer (:func:`broker_problem`):
    for a caller whose failed request says nothing else while the broker is down."""
    problem = broker_problem(connection, timeout_s)
    if problem is not None:
        raise BrokerUnreachable(connection.bootstrap_servers, problem)


def wait_for_broker(connection: KafkaConnection, timeout_s: float = 30.0) -> None:
    """Block until the broker answers a metadata request; TimeoutError with the last reason."""
    client = admin(connection)
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while True:
        try:
            client.list_topics(timeout=max(min(2.0, deadline - time.monotonic()), 0.1))
            return
        except KafkaException as exc:
            last = reason(exc)
        if time.monotonic() >= deadline:
            raise TimeoutError(f"Kafka broker at {connection.bootstrap_servers} did not answer within {timeout_s:g}s: {last}")
        time.sleep(0.1)


# librdkafka's local errors of a broker that did not answer (down, unreachable, unresolvable,
# or slower than the request's timeout): a wait for the broker may ask again.
UNANSWERED = frozenset({KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT, KafkaError._RESOLVE, KafkaError._TIMED_OUT})
# A coordinator's answers while its topic is made, loaded or moved: asked again.
COORDINATOR_NOT_READY = (KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE)
WARM_UP_ID = "streamstate.warm-up"


def warm_coordinators(connection: KafkaConnection, topic: str, timeout_s: float = 60.0) -> str | None:
    """Have a broker make and load its transaction log and its consumer offsets topic now, not
    when a job first needs a coordinator: on a new broker that took a job's start 1.5 s
    (its transactions check) and its first batch about 0.5 s more (docs/profile.md).

    A transactional producer's first ``init_transactions`` makes the log (the id
    :data:`WARM_UP_ID`, no transaction begun), and a reader's committed-offsets lookup for
    ``topic`` (any existing topic) makes the offsets topic without committing, so no group is
    created. Returns None when both answered, else why not: a warm-up only, nothing waits on
    it, and quiet as an admin client (no librdkafka log lines)."""
    deadline = time.monotonic() + timeout_s
    producer = Producer(producer_config(connection, **{"transactional.id": WARM_UP_ID, "log_level": 0}))
    try:
        producer.init_transactions(timeout_s)
    except KafkaException as exc:
        return f"transaction log: {reason(exc)}"
    consumer = Consumer(reader_config(connection, "warm-up", log_level=0))
    try:
        while True:
            try:
                consumer.committed([TopicPartition(topic, 0)], timeout=max(deadline - time.monotonic(), 0.1))
                return None
            except KafkaException as exc:
                if exc.args[0].code() not in COORDINATOR_NOT_READY or time.monotonic() >= deadline:
                    return f"consumer offsets: {reason(exc)}"
                time.sleep(0.1)
    finally:
        consumer.close()


# --------------------------------------------------------------------------- broker settings
def broker_settings(connection: KafkaConnection, name: str, timeout_s: float = METADATA_TIMEOUT_S) -> list[str]:
    """The value of the broker setting ``name`` on each broker of the cluster (DescribeConfigs);
    raises KafkaException when the cluster does not answer or refuses (an ACL on DescribeConfigs)."""
    client = admin(connection)
    values = []
    for broker_id in sorted(client.list_topics(timeout=timeout_s).brokers):
        resource = ConfigResource(ResourceType.BROKER, str(broker_id))
        entries = client.describe_configs([resource], request_timeout=timeout_s)[resource].result(timeout=timeout_s)
        entry = entries.get(name)
        if entry is not None and entry.value is not None:
            values.append(str(entry.value))
    return values


# --------------------------------------------------------------------------- end offsets
def watermarks(
    consumer: Consumer, tps: Iterable[TopicPartitionKey], timeout_s: float = METADATA_TIMEOUT_S
) -> dict[TopicPartitionKey, tuple[int, int]]:
    """(earliest, reported end) per partition, as ListOffsets answers."""
    return {
        (topic, partition): consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s, cached=False)
        for topic, partition in tps
    }


def end_offsets(
    client: AdminClient,
    tps: Iterable[TopicPartitionKey],
    timeout_s: float = METADATA_TIMEOUT_S,
    read_committed: bool = True,
    answer: Callable[[Future, float], Any] = Future.result,
) -> dict[TopicPartitionKey, int]:
    """Each partition's end offset as ListOffsets answers it (the last stable offset when
    ``read_committed``), every partition in one request per broker, on the admin client's own
    connections. A consumer that is fetching answers the same question only after its fetch in
    flight returns, which the broker holds up to ``fetch.wait.max.ms`` (500 ms) when nothing is
    new: half a second a partition (measured). ``answer(future, timeout_s)`` waits for each
    partition's answer (a caller that may be stopped meanwhile waits in its own way)."""
    isolation = IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED
    futures = client.list_offsets(
        {TopicPartition(topic, partition): OffsetSpec.latest() for topic, partition in tps},
        isolation_level=isolation, request_timeout=timeout_s,
    )
    return {(tp.topic, tp.partition): answer(future, timeout_s).offset for tp, future in futures.items()}
