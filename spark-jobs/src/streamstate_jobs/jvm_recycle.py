"""A new Spark JVM before the sockets Spark 4.2.0 leaks use up the old one's descriptors.

Spark 4.2.0's Python ``transformWithState`` opens a state server per stateful task and never
closes the connection it accepts from the Python worker (SPARK-58932; fixed in 4.2.1, whose
Kafka connector is not on Maven Central, so the project pins 4.2.0). Where the tasks run in
the job's own JVM (a local master, as in ``make run`` and compose), the JVM holds one more
socket per stateful task: thousands an hour at a sub-second trigger. Left alone it reaches its
open-file limit, or the kernel's range of loopback ports, within hours or days, and then
every connection it opens fails, the Kafka clients' included.

The runner counts those sockets between batches (:class:`SocketWatch`). Past the budget it
stops the job's queries (a batch cut short is run again from the checkpoint, as after
SIGTERM), stops Spark, ends its JVM (:func:`end_jvm`) and builds a new session: the job goes
on from its checkpoints, losing and repeating nothing. A JVM the job did not start
(``spark-submit``) or whose tasks run elsewhere (a cluster's executors) is not watched.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from pathlib import Path

from pyspark import SparkContext
from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

CHECK_EVERY_S = 10.0
CLOSE_WAIT = "08"  # the state column of /proc/net/tcp: the peer closed, this side has not


def fd_targets(pid: int) -> list[str]:
    """What each open file descriptor of process ``pid`` points at (``socket:[inode]`` for a socket)."""
    try:
        entries = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return []
    targets = []
    for entry in entries:
        try:
            targets.append(os.readlink(f"/proc/{pid}/fd/{entry}"))
        except OSError:
            continue  # closed between the listing and the read
    return targets


def _socket_inodes(pid: int) -> set[str]:
    """The inodes of the sockets among the open file descriptors of process ``pid``."""
    return {target[len("socket:["):-1] for target in fd_targets(pid) if target.startswith("socket:[")}


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``: each thread has its own children (the JVM starts Python's
    daemon from one of its threads)."""
    found: list[int] = []
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        try:
            tasks = list(Path(f"/proc/{parent}/task").iterdir())
        except OSError:
            continue  # the process has gone
        children = []
        for task in tasks:
            try:
                children += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue  # a thread that ended meanwhile (the JVM's come and go) hides only its own children
        found += children
        frontier += children
    return found


def java_descendants(pid: int) -> list[int]:
    """The JVMs below process ``pid`` (a job's Spark JVM)."""
    found = []
    for child in descendants(pid):
        try:
            if Path(f"/proc/{child}/comm").read_text().strip() == "java":
                found.append(child)
        except OSError:
            continue  # it exited meanwhile
    return found


def abandoned_sockets(pid: int) -> int:
    """TCP connections of process ``pid`` that the other end closed and it still holds open:
    the state servers' connections Spark 4.2.0 never closes, once their Python worker is done."""
    held = _socket_inodes(pid)
    waiting = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == CLOSE_WAIT:
                waiting.add(fields[9])
    return len(held & waiting)


def open_files_limit(pid: int) -> int | None:
    """The soft limit on open files of process ``pid`` (None: unknown or unlimited)."""
    try:
        lines = Path(f"/proc/{pid}/limits").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        if line.startswith("Max open files"):
            soft = line[len("Max open files"):].split()[0]
            return int(soft) if soft.isdigit() else None
    return None


def socket_budget(configured: int, files_limit: int | None) -> int:
    """Sockets a JVM may hold before it is replaced: the setting, at most half its open-file
    limit (the other half is for its state store, jars and connections). 0: never replaced."""
    if configured <= 0:
        return 0
    return min(configured, files_limit // 2) if files_limit else configured


def own_jvm_pid(spark: SparkSession) -> int | None:
    """The pid of the JVM this process started for ``spark`` when its tasks run in it; else None."""
    gateway = SparkContext._gateway  # noqa: SLF001 - PySpark keeps the JVM it launched only here
    if gateway is None or getattr(gateway, "proc", None) is None:
        return None  # spark-submit started the JVM: it is not this process's to end
    master = spark.sparkContext.master or ""
    if not (master == "local" or master.startswith("local[")):
        return None  # the tasks, and their sockets, are in executors (a cluster's, or local-cluster's JVMs)
    jvm = spark.sparkContext._jvm  # noqa: SLF001
    return int(jvm.java.lang.ProcessHandle.current().pid())  # type: ignore[union-attr]  # set while Spark runs


class SocketWatch:
    """Whether the job's JVM holds more abandoned sockets (:func:`abandoned_sockets`) than its
    budget; checked at most every 10 s."""

    def __init__(self, pid: int, budget: int):
        self.pid = pid
        self.budget = budget
        self.sockets = 0
        self._next_check = 0.0

    @classmethod
    def of(cls, spark: SparkSession, configured: int) -> SocketWatch | None:
        """A watch over ``spark``'s JVM, or None when it is not watched (see the module)."""
        pid = own_jvm_pid(spark)
        if pid is None:
            return None
        budget = socket_budget(configured, open_files_limit(pid))
        if not budget:
            return None
        log.info("the Spark JVM (pid %d) is replaced once it holds more than %d abandoned connections", pid, budget)
        return cls(pid, budget)

    def over_budget(self) -> bool:
        now = time.monotonic()
        if now < self._next_check:
            return False
        self._next_check = now + CHECK_EVERY_S
        self.sockets = abandoned_sockets(self.pid)
        return self.sockets > self.budget


def end_jvm(spark: SparkSession, timeout_s: float = 60.0) -> None:
    """Stop ``spark`` and end the JVM this process started for it; the next session starts a new one."""
    gateway = SparkContext._gateway  # noqa: SLF001
    spark.stop()
    if gateway is None:
        return
    process: subprocess.Popen = gateway.proc
    gateway.shutdown()
    # PySpark's JVM exits when its standard input closes (it was started with a pipe for that).
    if process.stdin is not None:
        process.stdin.close()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        log.warning("the Spark JVM (pid %s) did not exit within %.0f s of its input closing; killing it", process.pid, timeout_s)
        process.kill()
        process.wait(timeout_s)
    SparkContext._gateway = None  # noqa: SLF001 - so that the next SparkContext launches a JVM
    SparkContext._jvm = None  # noqa: SLF001
