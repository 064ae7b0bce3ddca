"""A real Spark standalone cluster from the PySpark installation, on this machine.

``spark-class org.apache.spark.deploy.master.Master`` and N
``org.apache.spark.deploy.worker.Worker`` processes, everything bound to 127.0.0.1 (by
default workers register on the machine's external interface). Used by the cluster tests
and the cluster benchmark; on real hosts the same classes are started by Spark's
``sbin/start-master.sh`` / ``start-worker.sh`` or the compose file.

Every process runs in its own process group. :meth:`StandaloneCluster.stop` ends the
groups and then waits until every process it ever saw (the daemons, and the executors and
Python workers they launched) is gone; :meth:`leftovers` reports any that is not.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

from streamstate_stack.launcher import ManagedProcess, free_port, pid_alive

SPARK_HOME = Path(pyspark.__file__).resolve().parent
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


def _children(pid: int) -> list[int]:
    try:
        tasks = Path(f"/proc/{pid}/task").iterdir()
        found: list[int] = []
        for task in tasks:
            found += [int(c) for c in (task / "children").read_text().split()]
        return found
    except OSError:
        return []


def _start_time(pid: int) -> str | None:
    """The process's start time (clock ticks after boot): tells a process from a later one with its PID."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def descendants(pid: int) -> set[int]:
    """``pid`` and every process below it, now."""
    seen, todo = set(), [pid]
    while todo:
        current = todo.pop()
        if current not in seen:
            seen.add(current)
            todo += _children(current)
    return seen


@dataclass
class StandaloneCluster:
    """Master and workers (``cores`` and ``memory`` each) bound to loopback; see the module docstring."""

    workdir: Path
    workers: int = 2
    cores: int = 1
    memory: str = "2g"
    host: str = "127.0.0.1"
    port: int = field(default_factory=free_port)
    ui_port: int = field(default_factory=free_port)
    processes: dict[str, ManagedProcess] = field(default_factory=dict)
    _seen: dict[int, str | None] = field(default_factory=dict)  # pid -> start time

    @property
    def master_url(self) -> str:
        return f"spark://{self.host}:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://{self.host}:{self.ui_port}"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(SPARK_HOME),
            SPARK_LOCAL_IP=self.host,
            SPARK_MASTER_HOST=self.host,
            # Executors start Python workers with the interpreter the driver names; this
            # default only matters for tools that do not name one.
            PYSPARK_PYTHON=env.get("PYSPARK_PYTHON", sys.executable),
            SPARK_LOG_DIR=str(self.workdir / "logs"),
        )
        return env

    def _spawn(self, name: str, argv: list[str]) -> ManagedProcess:
        log_path = self.workdir / "logs" / f"{name}.log"
        with open(log_path, "ab") as log:
            popen = subprocess.Popen(
                [str(SPARK_HOME / "bin" / "spark-class"), *argv],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env(),
                cwd=self.workdir,
                start_new_session=True,
            )
        process = ManagedProcess(name, popen, log_path)
        self._seen[popen.pid] = _start_time(popen.pid)
        self.processes[name] = process
        return process

    def start(self, timeout_s: float = 90) -> "StandaloneCluster":
        """Start the master and the workers; return once the master lists every worker ALIVE."""
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        self._spawn(
            "master", [MASTER_CLASS, "--host", self.host, "--port", str(self.port), "--webui-port", str(self.ui_port)]
        )
        for index in range(1, self.workers + 1):
            self.start_worker(index)
        self.wait_for_workers(self.workers, timeout_s)
        return self

    def start_worker(self, index: int) -> ManagedProcess:
        work = self.workdir / f"worker-{index}"
        work.mkdir(parents=True, exist_ok=True)
        argv = [WORKER_CLASS, "--host", self.host, "--cores", str(self.cores), "--memory", self.memory]
        argv += ["--webui-port", str(free_port()), "--work-dir", str(work), self.master_url]
        return self._spawn(f"worker-{index}", argv)

    def state(self) -> dict:
        """The master's JSON status (workers, applications)."""
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=5) as response:
            return json.loads(response.read())

    def alive_workers(self) -> list[dict]:
        try:
            return [w for w in self.state()["workers"] if w["state"] == "ALIVE"]
        except OSError:
            return []

    def wait_for_workers(self, count: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.alive_workers()) < count:
            dead = [p.name for p in self.processes.values() if not p.alive()]
            if dead or time.monotonic() > deadline:
                logs = "\n".join(f"--- {p.name}\n{p.tail(15)}" for p in self.processes.values())
                why = f"{', '.join(dead)} exited" if dead else f"not up after {timeout_s:.0f}s"
                raise RuntimeError(f"Spark standalone cluster: {why}; {len(self.alive_workers())} of {count} workers ALIVE\n{logs}")
            time.sleep(0.5)

    def remember_pids(self) -> set[int]:
        """Record every process now below the daemons (executors, Python workers) for the leftover check."""
        for process in self.processes.values():
            if process.alive():
                for pid in descendants(process.pid) - set(self._seen):
                    self._seen[pid] = _start_time(pid)
        return set(self._seen)

    def kill_worker(self, index: int) -> None:
        """SIGKILL a worker's process group, as a lost host: the worker and its executor die at once."""
        self.remember_pids()
        self.processes[f"worker-{index}"].kill()

    def stop(self, timeout_s: float = 30) -> None:
        self.remember_pids()
        for name in sorted(self.processes, key=lambda n: n == "master"):
            self.processes[name].stop()
        # Python daemons run in their own process group and leave when their executor's pipe closes.
        deadline = time.monotonic() + timeout_s
        while self.leftovers() and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in self.leftovers():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def leftovers(self) -> list[int]:
        """Processes this cluster started (directly or below) that are still running."""
        return sorted(pid for pid, started in self._seen.items() if pid_alive(pid) and _start_time(pid) == started)

    def __enter__(self) -> "StandaloneCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
