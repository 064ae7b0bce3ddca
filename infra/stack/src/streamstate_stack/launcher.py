"""The no-Docker stack: broker, topics, object store, jobs, API, Prometheus, producers.

One launcher for both profiles (:mod:`streamstate_stack.profiles`), which share the broker (Apache
Kafka from :mod:`streamstate_stack.servers`, its data kept in ``workdir/kafka``) and differ in
where checkpoints go: the local disk (embedded) or MinIO (production, s3a://). Every
process it starts runs in its own process group with a parent-death signal, and
:meth:`EmbeddedStack.stop` (also called on exit, Ctrl-C and SIGTERM) ends each group, so
nothing is left behind. Tests use the same class as session fixtures.
"""

from __future__ import annotations

import atexit
import json
import ctypes
import itertools
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from streamstate_stack.servers import KAFKA_HEAP, CLUSTER_NODES, KafkaBroker, MinioServer, S3Credentials, cluster_nodes, new_cluster_id
from streamstate_stack.profiles import EMBEDDED, Profile
from streamstate_pipeline.settings import REPO_ROOT, Settings
from streamstate_pipeline.kafka_clients import wait_for_broker, warm_coordinators
from streamstate_pipeline.topics import ensure_topics


# Where free_port looks first: below Linux's default ephemeral range (32768-60999).
_PORTS_BELOW_EPHEMERAL = range(20000, 32000)
# Not the shared generator: a test that seeds it would make two test sessions pick alike.
_PORT_CHOICE = random.SystemRandom()


def ephemeral_port_range() -> range:
    """The ports the kernel hands out for outgoing connections and for binding to port 0."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return range(32768, 61000)
    return range(low, high + 1)


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server can bind ``port`` now: nothing listens on it.

    Probed as the servers bind, with SO_REUSEADDR (Kafka's JVM, uvicorn, Prometheus and MinIO
    all set it): a port whose only sockets are connections in TIME_WAIT counts as free. After
    a crash (SIGKILL) the kernel closes a server's connections from its side, which leaves
    them in TIME_WAIT on its port for about a minute; a plain bind is refused meanwhile, and
    `streamstate up` then moved the broker to another port, where a client configured with
    the old address no longer found it. A live listener still makes the port busy."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port free on 127.0.0.1 now, for a server about to start, outside the ephemeral range:
    a port from that range (what binding to port 0 gives) can be taken by any connection opened
    meanwhile, and a broker's JVM takes seconds to bind (one then failed with "Address already
    in use"). Port 0's answer only where the whole candidate range is ephemeral. A fresh choice
    is probed with a plain bind, stricter than :func:`port_free`: it skips ports in TIME_WAIT
    too, which costs nothing here and suits a server (or test) that binds without SO_REUSEADDR."""
    ephemeral = ephemeral_port_range()
    candidates = [port for port in _PORTS_BELOW_EPHEMERAL if port not in ephemeral]
    for port in _PORT_CHOICE.sample(candidates, min(len(candidates), 200)):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _libc_prctl() -> Callable[..., int] | None:
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except OSError:
        return None


# Loaded here, not in the child: between fork and exec a child must not dlopen, since another
# thread of the launcher (the coordinators' warm-up, librdkafka's) may hold the loader's lock.
_PRCTL = _libc_prctl()


def _die_with_parent() -> None:
    # PR_SET_PDEATHSIG: if the launcher is SIGKILLed, its children get SIGTERM instead of lingering.
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM)


@dataclass
class ManagedProcess:
    name: str
    popen: subprocess.Popen
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the process, then what is left of its group; SIGKILL after ``grace_s``.

        The leader goes first: a job then stops its queries and Spark itself (the batch in
        flight finishes or is re-run from the checkpoint) before its JVM, a member of the same
        group, is signalled; signalling the whole group at once killed the JVM under it."""
        if not self.alive():
            return
        try:
            os.kill(self.popen.pid, signal.SIGTERM)
            self.popen.wait(grace_s)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.popen.wait(2 if sig == signal.SIGTERM else 5)
            except subprocess.TimeoutExpired:
                continue

    def kill(self) -> None:
        """SIGKILL the whole process group (crash tests)."""
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.popen.wait(10)

    def tail(self, lines: int = 20) -> str:
        """The log's last ``lines`` lines, each run of JVM stack frames folded into one line so
        that they leave room for the messages that say what happened."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(fold_stack_frames(text.splitlines())[-lines:])


def _is_stack_frame(line: str) -> bool:
    return line.startswith("\tat ") or (line.startswith("\t... ") and line.endswith(" more"))


def fold_stack_frames(lines: list[str]) -> list[str]:
    """``\tat ...`` and ``\t... N more`` runs replaced by a count of the frames they held."""
    folded: list[str] = []
    for is_frame, run in itertools.groupby(lines, key=_is_stack_frame):
        if is_frame:
            folded.append(f"\t[{sum(1 for _ in run)} stack frames]")
        else:
            folded.extend(run)
    return folded


@dataclass
class EmbeddedStack:
    """Starts and owns the processes of the stack, in one of the profiles."""

    settings: Settings = field(default_factory=Settings)
    workdir: Path = field(default_factory=lambda: REPO_ROOT / "var")
    processes: dict[str, ManagedProcess] = field(default_factory=dict)
    quiet: bool = False
    extra_env: dict[str, str] = field(default_factory=dict)  # for every child, unless already set
    profile: Profile = EMBEDDED
    kafka: KafkaBroker | None = None
    kafka_nodes: list[KafkaBroker] = field(default_factory=list)  # a cluster's (start_kafka_cluster), processes broker-<node id>
    broker_storage_new: bool = False  # the broker's storage was formatted by this launcher: it holds no earlier data
    minio: MinioServer | None = None
    s3_credentials: S3Credentials | None = None

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "logs").mkdir(exist_ok=True)
        atexit.register(self.stop)

    def say(self, message: str) -> None:
        if not self.quiet:
            print(f"[streamstate] {message}", flush=True)

    def sibling(self, settings: Settings, workdir: Path) -> "EmbeddedStack":
        """A launcher for more processes on this stack's servers (it starts none itself):
        same profile, same object store credentials, its own settings, logs and processes."""
        return EmbeddedStack(
            settings=settings, workdir=workdir, quiet=self.quiet, profile=self.profile,
            minio=self.minio, s3_credentials=self.s3_credentials,
        )

    # -- process management ------------------------------------------------------
    def env(self) -> dict[str, str]:
        """Environment for children: the settings as STREAMSTATE_* variables."""
        env = dict(os.environ)
        for name, value in self.settings.model_dump(mode="json").items():
            if value is not None:
                env[f"STREAMSTATE_{name.upper()}"] = json.dumps(value) if isinstance(value, dict) else str(value)
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        for name, value in self.extra_env.items():
            env.setdefault(name, value)
        env["PYTHONUNBUFFERED"] = "1"
        if self.s3_credentials is not None:
            env.update(self.s3_credentials.env())
        return env

    def spawn(self, name: str, argv: list[str], extra_env: dict[str, str] | None = None) -> ManagedProcess:
        if name in self.processes and self.processes[name].alive():
            raise RuntimeError(f"{name} is already running (pid {self.processes[name].pid})")
        log_path = self.workdir / "logs" / f"{name}.log"
        log = open(log_path, "ab")
        popen = subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**self.env(), **(extra_env or {})},
            cwd=REPO_ROOT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        log.close()
        proc = ManagedProcess(name, popen, log_path)
        self.processes[name] = proc
        return proc

    def pids(self) -> list[int]:
        return [p.pid for p in self.processes.values()]

    # -- components ----------------------------------------------------------------
    def start_broker(self, port: int | None = None, meanwhile: Callable[[], object] | None = None) -> str:
        """Apache Kafka as a KRaft broker with the pipeline topics, its data in ``workdir/kafka``
        (storage formatted on first use); returns its bootstrap address. The jobs' settings get
        Spark's Kafka connector jars, and the local checkpoint file system is installed. Started
        again (after :meth:`kill_broker`) it keeps its ports and data; ``port`` None takes a free
        port, unless a broker was started before. ``meanwhile`` runs while the broker's JVM starts."""
        if self.kafka is None or port is not None:
            self.kafka = KafkaBroker(self.workdir / "kafka", port or free_port(), free_port())
        if self.kafka.format_storage() is not None:
            self.broker_storage_new = True
            self.say(f"Apache Kafka storage formatted in {self.kafka.data}")
        proc = self.spawn("broker", self.kafka.argv())
        if meanwhile is not None:
            meanwhile()
        bootstrap = self.kafka.bootstrap
        self._await_brokers(bootstrap, {self.kafka.port: proc})
        created = ensure_topics(self.settings)
        # While the jobs start: their first transaction and batch would wait for the broker to make these.
        threading.Thread(target=warm_coordinators, args=(self.settings.kafka, self.settings.topic_alerts),
                         name="coordinators-warm-up", daemon=True).start()
        self.say(
            f"Apache Kafka {_versions()['KAFKA_VERSION']} (KRaft) at {bootstrap}, data in {self.kafka.data}; "
            f"topics created: {', '.join(created) or 'none'}"
        )
        return bootstrap

    def start_kafka_cluster(self, heap: str = KAFKA_HEAP) -> str:
        """Apache Kafka as a cluster of three KRaft nodes (each a broker and a controller,
        :func:`streamstate_stack.servers.cluster_nodes`), with every partition on all three
        and writes acknowledged by two; the pipeline topics are created so. The processes are
        ``broker-1`` to ``broker-3`` (:meth:`kill_kafka_node`); the nodes' data in
        ``workdir/kafka-<node id>``. Returns the bootstrap address of all three."""
        from concurrent.futures import ThreadPoolExecutor

        self.kafka_nodes = cluster_nodes(self.workdir, [(free_port(), free_port()) for _ in range(CLUSTER_NODES)], heap)
        cluster_id = new_cluster_id()
        with ThreadPoolExecutor(len(self.kafka_nodes)) as pool:  # a JVM each: side by side
            formatted = list(pool.map(lambda node: node.format_storage(cluster_id), self.kafka_nodes))
        self.broker_storage_new = any(formatted)
        procs = {node.port: self.spawn(f"broker-{node.node_id}", node.argv()) for node in self.kafka_nodes}
        bootstrap = ",".join(node.bootstrap for node in self.kafka_nodes)
        self._await_brokers(bootstrap, procs)
        _wait_for_brokers(self.settings, len(self.kafka_nodes), timeout_s=120)  # before topics with a replica on each
        created = ensure_topics(self.settings, replication_factor=len(self.kafka_nodes))
        self.say(
            f"Apache Kafka {_versions()['KAFKA_VERSION']} (KRaft), {len(self.kafka_nodes)} nodes at {bootstrap}; "
            f"topics created: {', '.join(created) or 'none'}"
        )
        return bootstrap

    def kill_kafka_node(self, node_id: int) -> None:
        """SIGKILL one node of the cluster of :meth:`start_kafka_cluster` (failure tests)."""
        self.processes[f"broker-{node_id}"].kill()

    def _await_brokers(self, bootstrap: str, procs: dict[int, ManagedProcess]) -> None:
        """Point the settings at ``bootstrap`` (with Spark's Kafka connector jars for the jobs)
        and wait until every broker process listens on its port and the cluster answers."""
        from streamstate_pipeline import binaries

        jars = self.settings.spark_jars or binaries.spark_jars_setting()
        try:
            binaries.checkpoint_io_jar()  # the jobs' session builder finds it installed
        except binaries.DependencyMissing as exc:
            self.say(f"{exc}; local checkpoints keep Hadoop's file system (slower, the same files)")
        self.settings = self.settings.with_overrides(bootstrap_servers=bootstrap, spark_jars=jars)
        try:
            # The JVM takes seconds to listen: a Kafka client created earlier floods stderr with refusals.
            for port, proc in procs.items():
                _wait_for_port(port, timeout_s=120, alive=proc.alive)
            wait_for_broker(self.settings.kafka, timeout_s=120)
        except TimeoutError as exc:
            raise RuntimeError(f"{exc}\n" + "\n".join(proc.tail() for proc in procs.values())) from None

    def start_kinesis(self, port: int | None = None, streams: dict[str, int] | None = None) -> str:
        """The local Kinesis-API server (kinesis-mock); ``streams`` ({name: shards}) are created on it.
        Children get its URL as STREAMSTATE_KINESIS_ENDPOINT_URL and placeholder AWS credentials."""
        from streamstate_pipeline.kinesis import LocalServer, ensure_local_credentials, ensure_streams, wait_for_kinesis

        ensure_local_credentials()

        server = LocalServer(port or free_port(), free_port(), self.workdir / "kinesis")
        self.spawn("kinesis", server.argv(), server.env())
        self.settings = self.settings.with_overrides(kinesis_endpoint_url=server.endpoint_url)
        self.extra_env.update(server.env_for_clients())
        try:
            wait_for_kinesis(server.endpoint_url, self.settings.kinesis_region)
        except Exception as exc:
            raise RuntimeError(f"{exc}\n{self.processes['kinesis'].tail()}") from None
        created = ensure_streams(server.endpoint_url, self.settings.kinesis_region, streams or {})
        self.say(f"Kinesis-API server (kinesis-mock) at {server.endpoint_url}; streams created: {', '.join(created) or 'none'}")
        return server.endpoint_url

    def kill_broker(self) -> None:
        """SIGKILL the broker process (failure tests); :meth:`start_broker` starts it again."""
        self.processes["broker"].kill()

    def start_object_store(self, bucket: str = "streamstate") -> str:
        """MinIO with its data in ``workdir/minio`` and ``bucket`` created; points the
        settings at it (endpoint, s3a:// checkpoints unless set); the S3A jars came with the broker's."""
        from streamstate_stack.s3 import S3, S3Error

        self.minio = MinioServer(self.workdir / "minio", free_port())
        proc = self.spawn("minio", self.minio.argv(), extra_env=self.minio.env())
        try:
            self.minio.wait_ready(alive=proc.alive)
        except (TimeoutError, RuntimeError) as exc:
            raise RuntimeError(f"{exc}\n{proc.tail()}") from None
        self.s3_credentials = self.minio.credentials()
        store = S3(self.minio.endpoint, self.s3_credentials.access_key, self.s3_credentials.secret_key)
        deadline = time.monotonic() + 60
        while True:
            try:
                store.create_bucket(bucket)
                break
            except S3Error as exc:  # ready can precede a usable object layer by a moment
                if exc.status != 503 or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        self.settings = object_store_settings(self.settings, self.minio.endpoint, bucket)
        self.say(f"MinIO {_versions()['MINIO_RELEASE']} (S3 API) at {self.minio.endpoint}, bucket {bucket}, data in {self.minio.home / 'data'}")
        return self.minio.endpoint

    def s3(self):
        """An S3 client of the object store (production profile)."""
        from streamstate_stack.s3 import S3

        if self.minio is None or self.s3_credentials is None:
            raise RuntimeError("no object store: start_object_store() first")
        return S3(self.minio.endpoint, self.s3_credentials.access_key, self.s3_credentials.secret_key)

    def prepare_checkpoints(self) -> str:
        """Make the checkpoints fit the broker, and say how (one line for the start-up output).

        A broker that kept its data keeps the checkpoints: the jobs resume where they stopped.
        A broker whose storage is new (``var/kafka`` deleted, or a first run) holds none of the
        records earlier checkpoints point into, and resuming from them would skip the new
        records up to the old offsets: local checkpoints are then moved aside (only the latest
        earlier run is kept, as ``<root>.previous``) and the run starts over. Checkpoints in S3
        are left alone; the jobs refuse to resume from them on a recreated topic (its id changed).
        """
        root = self.settings.checkpoint_root
        local = None if root.startswith(("s3a://", "hdfs://")) else Path(root)
        if local is not None and (not local.exists() or not any(local.iterdir())):
            return f"checkpoints start empty in {root}: every record on the broker is processed from the start"
        if not self.broker_storage_new or local is None:
            return f"resuming: the broker kept its data in {self.workdir / 'kafka'}, so the jobs go on from their checkpoints in {root}"
        previous = local.with_name(local.name + ".previous")
        shutil.rmtree(previous, ignore_errors=True)
        local.rename(previous)
        return (
            f"starting over: the broker's storage in {self.workdir / 'kafka'} is new, so this run starts from fresh "
            f"checkpoints in {root}; the previous run's were moved to {previous}"
        )

    def start_infrastructure(self, broker_port: int | None = None, meanwhile: Callable[[], object] | None = None) -> None:
        """Everything the jobs need under this profile: the broker and topics, and the object store
        (``meanwhile``: as :meth:`start_broker`)."""
        self.start_broker(broker_port, meanwhile)
        if self.profile.s3_checkpoints:
            self.start_object_store()

    def start_job(self, job: str, *extra: str) -> ManagedProcess:
        """A job declared in :mod:`streamstate_jobs.registry`, by name; ``extra`` are its options."""
        from streamstate_jobs.registry import job_spec  # the jobs' modules import PySpark: only once a job starts

        spec = job_spec(job)
        # Hashing as Spark's Python workers do lets the job fork them (streamstate_jobs.runner.fork_python_processes).
        proc = self.spawn(spec.service, [sys.executable, "-m", "streamstate_jobs", spec.name, *extra], {"PYTHONHASHSEED": "0"})
        self.say(f"{spec.name} job started (pid {proc.pid}), log {proc.log_path}")
        return proc

    def start_api(self) -> ManagedProcess:
        proc = self.spawn("api", [sys.executable, "-m", "streamstate_api"])
        self.say(f"API at http://{self.settings.api_host}:{self.settings.api_port}/docs (pid {proc.pid})")
        return proc

    def start_prometheus(self) -> ManagedProcess | None:
        binary = shutil.which("prometheus")
        if binary is None:
            self.say("Prometheus not installed (apt-get install prometheus); skipping it")
            return None
        from streamstate_stack.observability import render_embedded_prometheus_config

        config = render_embedded_prometheus_config(self.settings, self.workdir / "prometheus.yml")
        data = self.workdir / "prometheus-data"
        proc = self.spawn(
            "prometheus",
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={data}",
                f"--web.listen-address=127.0.0.1:{self.settings.prometheus_port}",
            ],
        )
        self.say(f"Prometheus at http://127.0.0.1:{self.settings.prometheus_port} (pid {proc.pid})")
        return proc

    def start_producers(self, *extra: str) -> ManagedProcess:
        proc = self.spawn("producers", [sys.executable, "-m", "streamstate_producers", *extra])
        self.say(f"producers started (pid {proc.pid}), log {proc.log_path}")
        return proc

    def stop(self) -> None:
        # Producers, jobs and the API first, the servers last, so nothing writes to a dead server.
        # Each group side by side: a job's graceful stop (its batch in flight) takes a second or two.
        servers = {name for name in self.processes if name in ("broker", "kinesis", "minio") or name.startswith("broker-")}
        for group in ([p for n, p in self.processes.items() if n not in servers], [self.processes[n] for n in servers]):
            _stop_side_by_side(group)

    def __enter__(self) -> "EmbeddedStack":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _stop_side_by_side(processes: list[ManagedProcess]) -> None:
    """:meth:`ManagedProcess.stop` each, in threads of their own (one after the other where no
    thread can start, at an interpreter's shutdown); the first failure is raised after all ended."""
    failures: list[BaseException] = []

    def stop(process: ManagedProcess) -> None:
        try:
            process.stop()
        except BaseException as error:  # noqa: BLE001 - raised in the caller's thread below
            failures.append(error)

    started = []
    for process in processes:
        thread = threading.Thread(target=stop, args=(process,), name=f"stop {process.name}")
        try:
            thread.start()
            started.append(thread)
        except RuntimeError:
            stop(process)
    for thread in started:
        thread.join()
    if failures:
        raise failures[0]


def object_store_settings(settings: Settings, endpoint: str, bucket: str) -> Settings:
    """What the production profile changes for its jobs once the object store runs: the S3
    endpoint and s3a:// checkpoints (unless already there). This is what compose's jobs get
    as STREAMSTATE_* variables; tests/compose/test_compose_drift.py compares the two."""
    root = settings.checkpoint_root
    return settings.with_overrides(
        s3_endpoint=endpoint,
        checkpoint_root=root if root.startswith("s3a://") else f"s3a://{bucket}/checkpoints",
    )


def _wait_for_port(port: int, timeout_s: float, alive) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if not alive():
                raise TimeoutError(f"the process meant to listen on 127.0.0.1:{port} exited") from None
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout_s:.0f}s") from None
            time.sleep(0.2)


def _wait_for_brokers(settings: Settings, count: int, timeout_s: float) -> None:
    """Until the cluster's metadata names ``count`` brokers (each registered with the controllers)."""
    from streamstate_pipeline.kafka_clients import admin

    client = admin(settings.kafka)
    deadline = time.monotonic() + timeout_s
    while len(client.list_topics(timeout=10).brokers) < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"fewer than {count} Kafka brokers registered after {timeout_s:.0f}s")
        time.sleep(0.2)


def _versions() -> dict[str, str]:
    from streamstate_pipeline.binaries import versions

    return versions()


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is gone for our purposes.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False
