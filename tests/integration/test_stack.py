"""The embedded stack launcher: topics as defined, and no process left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from streamstate.stack.launcher import EmbeddedStack, pid_alive
from streamstate.topics import existing_topics, load_topics


def test_topics_are_created_as_defined(stack, settings):
    defined = load_topics(settings.topics_file, settings.partitions)
    present = existing_topics(settings.bootstrap_servers)
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


LAUNCHER = """
import sys, time
from pathlib import Path
from streamstate.stack.launcher import EmbeddedStack
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
