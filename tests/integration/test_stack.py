"""The embedded stack launcher: topics as defined, no process left behind, a broker's
coordinators loaded before a job asks for them, and a broker restarted after a crash on the
port it had."""

from __future__ import annotations

import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streamstate_pipeline.kafka_clients import admin
from streamstate_pipeline.settings import Settings
from streamstate_stack.launcher import EmbeddedStack, pid_alive
from streamstate_stack.up import broker_port
from tests.integration.api_harness import wait_until
from streamstate_pipeline.topics import existing_topics, load_topics


def test_topics_are_created_as_defined(stack, settings):
    defined = load_topics(settings.topics_file, settings.partitions)
    present = existing_topics(settings.kafka)
    assert {t.name: t.partitions for t in defined} == {t.name: present.get(t.name) for t in defined}
    assert {"user-events", "metrics", "alerts", "sessions", "session-state", "metric-state", "dead-letters"} <= {
        t.name for t in defined
    }
    compacted = [t.name for t in defined if t.config.get("cleanup.policy") == "compact"]
    assert compacted == ["session-state", "metric-state"]


def test_stop_ends_every_process_it_started(tmp_path):
    stack = EmbeddedStack(workdir=tmp_path, quiet=True)
    stack.start_broker()
    child = stack.spawn("sleeper", [sys.executable, "-c", "import time; time.sleep(600)"])
    pids = stack.pids()
    assert all(pid_alive(pid) for pid in pids)
    stack.stop()
    assert not any(pid_alive(pid) for pid in pids), f"left running: {[p for p in pids if pid_alive(p)]}"
    assert child.popen.returncode is not None


# A process that, on SIGTERM, says so, waits (8 s at most) for every name in argv[2:] to have
# said so too, and exits 0 if they all did (3 if not), writing <name>.exited just before.
TERMINATED_TOGETHER = """
import signal, sys, time
from pathlib import Path
folder, name, others = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
def on_term(*_):
    (folder / f"{name}.terminated").touch()
    deadline = time.monotonic() + 8
    while not all((folder / f"{o}.terminated").exists() for o in others) and time.monotonic() < deadline:
        time.sleep(0.05)
    (folder / f"{name}.exited").touch()
    sys.exit(0 if all((folder / f"{o}.terminated").exists() for o in others) else 3)
signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
time.sleep(600)
"""
# A server's stand-in: on SIGTERM it exits 0 only if every name in argv[2:] has exited already.
STOPPED_LAST = """
import signal, sys, time
from pathlib import Path
folder, others = Path(sys.argv[1]), sys.argv[2:]
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0 if all((folder / f"{o}.exited").exists() for o in others) else 5))
print("ready", flush=True)
time.sleep(600)
"""


def test_stop_signals_the_jobs_side_by_side_and_the_servers_after_them(tmp_path):
    """Each job may take its grace period to end the batch in flight: the launcher signals
    them all at once, not one after the other's exit, and the servers only once they ended."""
    stack = EmbeddedStack(workdir=tmp_path, quiet=True)
    jobs = ("sessions-job", "anomalies-job", "producers")
    procs = [stack.spawn(job, [sys.executable, "-c", TERMINATED_TOGETHER, str(tmp_path), job, *(j for j in jobs if j != job)])
             for job in jobs]
    server = stack.spawn("minio", [sys.executable, "-c", STOPPED_LAST, str(tmp_path), *jobs])
    # The server's stand-in too: a SIGTERM before its handler is set ends it with -15 (a loaded machine, CI).
    wait_until(lambda: all("ready" in p.log_path.read_text() for p in (*procs, server)), 60, "the stand-ins to set their SIGTERM handlers")
    stack.stop()
    assert {p.name: p.popen.returncode for p in procs} == dict.fromkeys(jobs, 0), "a job was signalled only after another ended"
    assert server.popen.returncode == 0, "the server was stopped before the jobs had ended"


def test_a_started_broker_has_its_coordinators_topics_before_any_client_asks(tmp_path):
    """The transaction log and the consumer offsets topic are made when a client first needs a
    coordinator, and a job's start waited on that (1.5 s, docs/profile.md): the launcher has
    the broker make them while the jobs start. One partition each on a single node."""
    stack = EmbeddedStack(workdir=tmp_path, quiet=True)
    try:
        stack.start_broker()
        client = admin(stack.settings.kafka)
        internal = {"__transaction_state", "__consumer_offsets"}
        deadline = time.monotonic() + 60
        while not internal <= set(topics := client.list_topics(timeout=10).topics) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert internal <= set(topics), f"no client asked, and the broker has only {sorted(topics)}"
        assert {name: len(topics[name].partitions) for name in internal} == dict.fromkeys(internal, 1)
    finally:
        stack.stop()


LAUNCHER = """
import sys, time
from pathlib import Path
from streamstate_stack.launcher import EmbeddedStack
stack = EmbeddedStack(workdir=Path(sys.argv[1]), quiet=True)
stack.start_broker()
print(stack.processes["broker"].pid, flush=True)
time.sleep(600)
"""


def test_a_killed_launcher_takes_its_children_with_it(tmp_path):
    """Even SIGKILL of the launcher (no atexit) leaves no broker behind: parent-death signal."""
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    broker_pid = int(launcher.stdout.readline())
    assert pid_alive(broker_pid)
    os.kill(launcher.pid, signal.SIGKILL)
    launcher.wait(10)
    deadline = time.monotonic() + 15
    while pid_alive(broker_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(broker_pid)


def _time_wait_on(port: int) -> bool:
    """Whether a connection on local port ``port`` is in TIME_WAIT (state 06 of /proc/net/tcp;
    tcp6 too: the JVM's sockets are IPv6 ones, 127.0.0.1 as ::ffff:127.0.0.1)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if int(local.rsplit(":", 1)[1], 16) == port and state == "06":
                return True
    return False


def _api_versions(client: socket.socket) -> None:
    """One Kafka request (ApiVersions v0) and its whole response."""
    body = struct.pack(">hhih", 18, 0, 1, 4) + b"test"
    client.sendall(struct.pack(">i", len(body)) + body)
    (size,) = struct.unpack(">i", client.recv(4, socket.MSG_WAITALL))
    assert len(client.recv(size, socket.MSG_WAITALL)) == size


def test_a_broker_restarted_after_a_sigkill_keeps_its_port(tmp_path):
    """A crash leaves the broker's port in TIME_WAIT; `streamstate up` keeps the port (as
    bootstrap_servers names it) and the broker, which binds with SO_REUSEADDR, starts on it."""
    first = EmbeddedStack(workdir=tmp_path, quiet=True)
    first.start_broker()
    port = first.kafka.port
    client = socket.create_connection(("127.0.0.1", port))
    _api_versions(client)  # accepted and answered: the kill then closes it with a FIN, not a reset
    first.kill_broker()
    assert client.recv(1) == b"", "the kernel closed the killed broker's side"
    client.close()  # the broker's side, which closed first, is now in TIME_WAIT
    assert _time_wait_on(port)
    with socket.socket() as plain, pytest.raises(OSError):
        plain.bind(("127.0.0.1", port))  # what the old probe saw: busy
    first.stop()

    settings = Settings(bootstrap_servers=f"127.0.0.1:{port}")
    assert broker_port(settings) == port
    again = EmbeddedStack(settings=settings, workdir=tmp_path, quiet=True)
    try:
        assert again.start_broker(broker_port(settings)) == f"127.0.0.1:{port}"
    finally:
        again.stop()
