"""The production profile's servers, run natively: Apache Kafka as a KRaft broker and MinIO.

Compose runs the same releases as containers (``infra/versions.env``); here they run from
``.deps/`` (:mod:`streamstate_pipeline.binaries`), bound to 127.0.0.1, as processes of the stack
launcher (:class:`streamstate_stack.launcher.EmbeddedStack`), which stops them by process group
like every other process it starts. Both keep their data in a directory: a broker or
object store started again on the same directory has everything it had, which is what
distinguishes this profile from the in-memory embedded broker. :func:`cluster_nodes` makes three
KRaft nodes of one cluster instead (every partition replicated three ways), for the tests
that lose a broker, as ``infra/docker/compose.kafka-3.yml`` runs compose's Kafka.

This module only builds configurations and command lines; starting, waiting and
stopping is the launcher's.
"""

from __future__ import annotations

import base64
import secrets
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

from streamstate_pipeline.errors import StackError
from streamstate_stack.files import write_atomic
from streamstate_pipeline import binaries, class_archives

KAFKA_HEAP = "512m"
# G1 (the JVM's default collector) allocates an object of half a region or more outside the
# young generation, where only a concurrent marking cycle frees it, and a broker reads each
# request into one buffer. A heap of 512 MB has 1 MB regions, so every produce request over
# 512 KB (librdkafka's go up to 1 MB) was such an object: in a million-event run of the sessions
# benchmark they set off 16 concurrent cycles and kept the broker's collector 0.65-0.86 CPU-s
# busy; with 4 MB regions, none and 0.05-0.12 (docs/profile.md). Another collector ignores it.
G1_REGION_OPTION = "-XX:G1HeapRegionSize=4m"

# Kafka's own log4j 1.x layout (reload4j), to stdout, which the launcher sends to the log file.
_KAFKA_LOG4J = """\
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
# One line per partition created or loaded is noise with the tests' many small topics.
log4j.logger.kafka.log=WARN
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.cluster=WARN
log4j.logger.org.apache.kafka.storage=WARN
"""


def heap_options(heap: str) -> list[str]:
    """The broker JVM's heap options (compose's ``KAFKA_HEAP_OPTS`` the same, for ``KAFKA_HEAP``)."""
    return [f"-Xmx{heap}", G1_REGION_OPTION]


@dataclass(frozen=True)
class KafkaBroker:
    """A KRaft node (broker and controller in one process) in ``home``: by default a
    single-node cluster; with ``voters`` one of several nodes (:func:`cluster_nodes`)."""

    home: Path
    port: int
    controller_port: int
    node_id: int = 1
    voters: str | None = None  # controller.quorum.voters of a cluster of several nodes; None: this node alone
    heap: str = KAFKA_HEAP
    overrides: tuple[tuple[str, str], ...] = ()  # broker settings over BROKER_SETTINGS (a cluster's: CLUSTER_SETTINGS)
    # The JVM's own options; None maps the brokers' class archive when it was built (streamstate_stack.class_archive).
    java_options: tuple[str, ...] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def data(self) -> Path:
        return self.home / "data"

    def properties(self) -> str:
        # The compose service's settings (docker-compose.yml, kafka), on loopback ports;
        # tests/compose/test_compose_drift.py compares the two.
        settings = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.voters or f"{self.node_id}@127.0.0.1:{self.controller_port}",
            "controller.listener.names": "CONTROLLER",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.data),
            **BROKER_SETTINGS,
            **dict(self.overrides),
        }
        return "".join(f"{key}={value}\n" for key, value in settings.items())

    def write_config(self) -> tuple[Path, Path]:
        """server.properties and log4j.properties in ``home`` (rewritten each start: ports may change)."""
        self.home.mkdir(parents=True, exist_ok=True)
        config, log4j = self.home / "server.properties", self.home / "log4j.properties"
        # Atomically: a launcher killed here must not leave a cut config for the next start.
        write_atomic(config, self.properties())
        write_atomic(log4j, _KAFKA_LOG4J)
        return config, log4j

    def java(self, main: str, *args: str) -> list[str]:
        _, log4j = self.write_config()
        options = class_archives.use_options(broker_archive()) if self.java_options is None else self.java_options
        return [
            # The Java Kafka's own scripts (and PySpark) start, the one its class archive was built for.
            str(class_archives.java_executable()), *heap_options(self.heap), "-Djava.awt.headless=true", f"-Dlog4j.configuration=file:{log4j}", *options,
            "-cp", binaries.kafka_classpath(), main, *args,
        ]

    def formatted(self) -> bool:
        return (self.data / "meta.properties").is_file()

    def format_storage(self, cluster_id: str | None = None) -> str | None:
        """Format the storage once (KRaft needs a cluster id: the nodes of one cluster share
        theirs, a new one when None); None when it already was."""
        config, _ = self.write_config()
        if self.formatted():
            return None
        cluster_id = cluster_id or new_cluster_id()
        result = subprocess.run(
            self.java("kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "--config", str(config)),
            capture_output=True, text=True, timeout=120,
        )
        if result.returncode != 0:
            raise RuntimeError(f"formatting Kafka storage in {self.data} failed: {(result.stderr or result.stdout)[-800:]}")
        return cluster_id

    def argv(self) -> list[str]:
        config, _ = self.write_config()
        return self.java("kafka.Kafka", str(config))


def broker_archive() -> Path:
    """The class archive of a broker on this Kafka install (:mod:`streamstate_pipeline.class_archives`)."""
    return class_archives.archive_path("kafka-broker", class_archives.classpath_entries(binaries.kafka_classpath()))


def new_cluster_id() -> str:
    """A KRaft cluster id: a UUID's 16 bytes in URL-safe base64, unpadded (22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


# Broker settings shared with compose's Kafka service (KAFKA_* there).
BROKER_SETTINGS = {
    "auto.create.topics.enable": "false",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    # One partition each for the consumer offsets and the transaction log on a single node
    # (Kafka's 50 spread coordinators over brokers; here they cost 1.2 CPU-s of the broker's
    # first use and 0.5 s of the first transaction, docs/profile.md). A broker whose topics
    # exist keeps their counts: its coordinators read them from the metadata.
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
}
# A cluster of three nodes, as infra/docker/compose.kafka-3.yml runs compose's: every topic
# (the internal ones, the consumer offsets and the transaction log, included) on all three,
# and a write acknowledged (acks=all) once two have it, so one node may be lost at any time
# without losing an acknowledged record or stopping the writes.
CLUSTER_SETTINGS = {
    # Kafka's defaults: the coordinators spread over the nodes, as a production cluster's.
    "offsets.topic.num.partitions": "50",
    "transaction.state.log.num.partitions": "50",
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "default.replication.factor": "3",
    "min.insync.replicas": "2",
}
CLUSTER_NODES = 3


def cluster_nodes(home: Path, ports: list[tuple[int, int]], heap: str = KAFKA_HEAP) -> list[KafkaBroker]:
    """The nodes of one KRaft cluster, each a broker and a controller (every node a voter, so
    the quorum survives the loss of any one of three), node ``i`` in ``home/kafka-i`` on
    ``ports[i - 1]`` (client port, controller port), with :data:`CLUSTER_SETTINGS`."""
    if len(ports) != CLUSTER_NODES:
        raise ValueError(f"CLUSTER_SETTINGS replicate {CLUSTER_NODES} ways: {CLUSTER_NODES} nodes, not {len(ports)}")
    voters = ",".join(f"{node}@127.0.0.1:{controller}" for node, (_, controller) in enumerate(ports, 1))
    return [
        KafkaBroker(home / f"kafka-{node}", port, controller, node_id=node, voters=voters, heap=heap,
                    overrides=tuple(CLUSTER_SETTINGS.items()))
        for node, (port, controller) in enumerate(ports, 1)
    ]


# MinIO refuses a root user shorter than 3 characters and a root password shorter than 8; a
# generated password is 32 characters (secrets.token_urlsafe(24)).
_MIN_ACCESS_KEY, _MIN_SECRET_KEY = 3, 8


class CredentialsDamaged(StackError, ValueError):
    """The object store's credentials file does not hold what the launcher wrote there."""


@dataclass(frozen=True)
class S3Credentials:
    access_key: str
    secret_key: str

    @classmethod
    def for_home(cls, home: Path) -> "S3Credentials":
        """The object store's root credentials, made once per data directory (mode 0600), never a shared default.

        Made atomically and only if absent (:func:`streamstate_stack.files.write_atomic`), so a
        launcher killed while making them leaves no file or a whole one. A file that is not
        whole anyway (empty, cut, edited) is refused by name, never read as a short secret."""
        path = home / "credentials"
        if not path.is_file():
            home.mkdir(parents=True, exist_ok=True)
            write_atomic(path, f"streamstate\n{secrets.token_urlsafe(24)}\n", mode=0o600, exclusive=True)
        return cls.parse(path.read_text(errors="replace"), path)

    @classmethod
    def parse(cls, text: str, path: Path) -> "S3Credentials":
        """The two lines :meth:`for_home` writes (user, password, each ending in a newline), or
        :class:`CredentialsDamaged` naming ``path`` and the remedy. The secret is never shown."""
        lines = text.split("\n")
        if not text:
            why = "it is empty"
        elif len(lines) != 3 or lines[2] != "":
            why = f"it holds {len(lines) - 1} complete line(s) and {len(lines[-1])} character(s) after them, not 2 lines"
        elif len(lines[0].strip()) < _MIN_ACCESS_KEY or lines[0] != lines[0].strip():
            why = f"its user (line 1) is not a name of {_MIN_ACCESS_KEY} or more characters"
        elif len(lines[1].strip()) < _MIN_SECRET_KEY or lines[1] != lines[1].strip():
            why = f"its password (line 2) has {len(lines[1].strip())} characters; MinIO needs {_MIN_SECRET_KEY} or more"
        else:
            return cls(lines[0], lines[1])
        raise CredentialsDamaged(
            f"the object store's credentials file {path} is damaged ({why}): a write of it was cut "
            f"short or it was edited. Delete it and start again: a new one is made (MinIO's data "
            f"beside it is kept); or write the two lines yourself, the user then the password, each "
            f"ending in a newline (a last line without one reads as cut)."
        )

    def env(self) -> dict[str, str]:
        """As S3A reads them (and the AWS SDKs): the jobs get these variables."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key}


@dataclass(frozen=True)
class MinioServer:
    """MinIO serving ``home/data`` on a loopback port, without its web console."""

    home: Path
    port: int

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def credentials(self) -> S3Credentials:
        return S3Credentials.for_home(self.home)

    def argv(self) -> list[str]:
        (self.home / "data").mkdir(parents=True, exist_ok=True)
        return [str(binaries.minio_binary()), "server", str(self.home / "data"), "--address", f"127.0.0.1:{self.port}", "--quiet"]

    def env(self) -> dict[str, str]:
        credentials = self.credentials()
        return {
            "MINIO_ROOT_USER": credentials.access_key,
            "MINIO_ROOT_PASSWORD": credentials.secret_key,
            # Nothing but the S3 API natively: no console, no update checks.
            "MINIO_BROWSER": "off",
            "MINIO_UPDATE": "off",
        }

    def ready(self) -> bool:
        # Readiness, not liveness: a live MinIO still answers 503 XMinioServerNotInitialized
        # until its object layer is up (seen on a loaded machine).
        try:
            with urllib.request.urlopen(f"{self.endpoint}/minio/health/ready", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def wait_ready(self, timeout_s: float = 60.0, alive=lambda: True) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.ready():
            if not alive():
                raise RuntimeError("MinIO exited during start-up")
            if time.monotonic() > deadline:
                raise TimeoutError(f"MinIO at {self.endpoint} not ready within {timeout_s:.0f}s")
            time.sleep(0.2)
