"""The fork server of the launcher (streamstate.fork_server), with real processes: a stand-in for
the JVM starts launchers the way Spark starts its one-off workers, of a probe module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from streamstate import fork_server

PROBE = '''
import json, os, signal, sys, time
mode, code = sys.argv[1], int(sys.argv[2])
if mode == "wait":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
    # Whole or not at all: the stand-in JVM signals once the file exists, and a SIGKILL of the
    # launcher then ends this child, which could leave an empty file behind.
    with open(os.environ["PROBE_PID_FILE"] + ".part", "w") as part:
        part.write(str(os.getpid()))
    os.replace(os.environ["PROBE_PID_FILE"] + ".part", os.environ["PROBE_PID_FILE"])
    time.sleep(60)
print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "cwd": os.getcwd(), "env": os.environ.get("PROBE_VALUE"),
                  "argv": sys.argv[1:], "stdin": sys.stdin.read()}), flush=True)
print("to stderr", file=sys.stderr, flush=True)
sys.exit(code)
'''

# The launcher, with the probe as one more module its server serves.
LAUNCHER = (
    "import streamstate.fork_server as f; f.FORKED_MODULES = (*f.FORKED_MODULES, 'probe_module'); "
    "from streamstate.launcher import main; main()"
)

# The stand-in JVM: runs the launchers the test asks for, one after the other, as Spark starts
# workers (their standard streams piped), and prints what each did.
JVM = '''
import json, os, signal, socket, subprocess, sys, time
from streamstate import fork_server
launcher, steps = sys.argv[1], json.loads(sys.argv[2])
results = []
for step in steps:
    if step == "wait for the server":
        deadline = time.monotonic() + 60
        while True:
            probe = socket.socket(socket.AF_UNIX)
            try:
                probe.connect(fork_server.address(os.getpid(), os.environ))
                break
            except OSError:
                assert time.monotonic() < deadline, "no server within 60 s"
                time.sleep(0.1)
            finally:
                probe.close()
        continue
    mode, code, stop = step
    process = subprocess.Popen([sys.executable, "-c", launcher, "-m", "probe_module", mode, str(code)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, **json.loads(os.environ.get("LAUNCHER_ENV", "{}"))})
    if stop:
        deadline = time.monotonic() + 60
        while not os.path.exists(os.environ["PROBE_PID_FILE"]):
            assert time.monotonic() < deadline, "the probe never started"
            time.sleep(0.05)
        os.kill(process.pid, getattr(signal, stop))
    out, err = process.communicate("the input", timeout=60)
    results.append({"launcher": process.pid, "code": process.returncode, "out": out, "err": err})
print(json.dumps({"jvm": os.getpid(), "results": results}))
'''


def run_jvm(tmp_path: Path, steps: list, probe: str = PROBE, **env: str) -> dict:
    (tmp_path / "probe_module.py").write_text(probe)
    environ = {**os.environ, fork_server.VARIABLE: "on", "PROBE_VALUE": "from-the-jvm",
               "PROBE_PID_FILE": str(tmp_path / "probe.pid"), **env}
    result = subprocess.run([sys.executable, "-c", JVM, LAUNCHER, json.dumps(steps)], cwd=tmp_path, env=environ,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def fields(out: str) -> dict:
    return json.loads(out)


def gone(pid: int, within_s: float = 10) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="the fork server needs Linux's pidfds")
def test_a_jvms_second_process_is_a_fork_of_its_server_with_the_launchers_streams_and_exit(tmp_path):
    ran = run_jvm(tmp_path, [("exit", 0, None), "wait for the server", ("exit", 3, None), ("exit", 0, None)])
    first, second, third = ran["results"]
    # The first ran in the launcher itself (and started the server).
    assert fields(first["out"])["pid"] == first["launcher"] and first["code"] == 0
    for run, code in ((second, 3), (third, 0)):
        seen = fields(run["out"])
        assert seen["pid"] != run["launcher"] and seen["ppid"] not in (run["launcher"], ran["jvm"])
        assert seen["cwd"] == str(tmp_path) and seen["env"] == "from-the-jvm"
        assert seen["argv"] == ["exit", str(code)] and seen["stdin"] == "the input"
        assert "to stderr" in run["err"] and run["code"] == code
    server = fields(second["out"])["ppid"]
    assert fields(third["out"])["ppid"] == server
    assert gone(server), "the server outlived its JVM"


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="the fork server needs Linux's pidfds")
@pytest.mark.parametrize(("signal_name", "code"), [("SIGTERM", 7), ("SIGKILL", -9)])
def test_a_signal_to_the_launcher_reaches_its_child(tmp_path, signal_name, code):
    """SIGTERM is forwarded (the child's handler exits 7, which the launcher exits with);
    SIGKILL ends the launcher, and the server kills the child whose launcher went."""
    ran = run_jvm(tmp_path, [("exit", 0, None), "wait for the server", ("wait", 0, signal_name)])
    waited = ran["results"][1]
    assert waited["code"] == code
    child = int((tmp_path / "probe.pid").read_text())
    assert child != waited["launcher"] and gone(child)


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="the fork server needs Linux's pidfds")
def test_a_forked_printing_modules_progress_goes_to_the_log_as_in_the_launcher(tmp_path):
    """transformWithState's pre-init process is both forked and one of the modules whose print()
    goes to the log (streamstate.spark_python.PRINTING_MODULES): the probe, made one of them in
    every process (the server is a process of its own, started by the first launcher), logs its
    line at DEBUG and leaves standard output empty, run by the launcher and forked alike."""
    (tmp_path / "sitecustomize.py").write_text(
        "import streamstate.spark_python as p\np.PRINTING_MODULES = p.PRINTING_MODULES | {'probe_module'}\n")
    probe = (
        "import logging, os, sys\n"
        "logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format='%(name)s: %(message)s')\n"
        "print('Starting the worker', os.getpid())\n"
    )
    ran = run_jvm(tmp_path, [("exit", 0, None), "wait for the server", ("exit", 0, None)], probe,
                  PYTHONPATH=str(tmp_path))
    itself, forked = ran["results"]
    for run in (itself, forked):
        assert run["code"] == 0 and run["out"] == "", run
    assert f"probe_module: Starting the worker {itself['launcher']}" in itself["err"]
    (line,) = [line for line in forked["err"].splitlines() if line.startswith("probe_module: Starting the worker ")]
    assert int(line.rsplit(" ", 1)[1]) != forked["launcher"]


def test_only_spark_one_off_modules_with_the_switch_on_are_forked():
    on = {fork_server.VARIABLE: "on"}
    worker = "pyspark.sql.streaming.transform_with_state_driver_worker"
    assert fork_server.enabled(worker, on) == hasattr(os, "pidfd_open")
    assert not fork_server.enabled(worker, {})
    assert not fork_server.enabled(worker, {fork_server.VARIABLE: "off"})
    assert not fork_server.enabled("pyspark.daemon", on)


# A process that forks its own server (as a job does), then starts the stand-in JVM as its child.
FORKING_PROCESS = '''
import json, os, subprocess, sys
import streamstate.fork_server as f
f.FORKED_MODULES = (*f.FORKED_MODULES, "probe_module")
jvm, launcher, steps = sys.argv[1], sys.argv[2], sys.argv[3]
assert f.fork_for_children()
ran = subprocess.run([sys.executable, "-c", jvm, launcher, steps], capture_output=True, text=True, timeout=300)
assert ran.returncode == 0, ran.stderr
print(json.dumps({"process": os.getpid(), **json.loads(ran.stdout)}))
'''


def run_forking_process(tmp_path: Path, steps: list, probe: str = PROBE, launcher_env: dict | None = None, **env: str) -> dict:
    """The process's environment is ``env`` over the test's; its JVM starts launchers with ``launcher_env`` over its own."""
    (tmp_path / "probe_module.py").write_text(probe)
    environ = {**os.environ, "PROBE_VALUE": "from-the-jvm", "PROBE_PID_FILE": str(tmp_path / "probe.pid"),
               "LAUNCHER_ENV": json.dumps(launcher_env or {}), **env}
    environ.pop(fork_server.VARIABLE, None)
    environ = {key: value for key, value in environ.items() if value is not None}
    result = subprocess.run([sys.executable, "-c", FORKING_PROCESS, JVM, LAUNCHER, json.dumps(steps)], cwd=tmp_path,
                            env=environ, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="the fork server needs Linux's pidfds")
def test_a_process_forks_its_server_for_its_jvms_first_processes_and_the_server_ends_with_it(tmp_path):
    """Every process the JVM starts, the first one included, is a child of the server the
    process forked before it started the JVM; the JVM turned no switch on."""
    ran = run_forking_process(tmp_path, [("exit", 0, None), ("exit", 3, None)], PYTHONHASHSEED="0")
    servers = set()
    for run, code in zip(ran["results"], (0, 3)):
        seen = fields(run["out"])
        assert seen["pid"] != run["launcher"] and seen["ppid"] not in (run["launcher"], ran["jvm"])
        assert seen["cwd"] == str(tmp_path) and seen["env"] == "from-the-jvm"
        assert seen["argv"] == ["exit", str(code)] and seen["stdin"] == "the input"
        assert "to stderr" in run["err"] and run["code"] == code
        servers.add(seen["ppid"])
    (server,) = servers
    assert gone(server), "the server outlived the process that forked it"


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="the fork server needs Linux's pidfds")
def test_a_launcher_hashing_otherwise_than_the_forking_process_runs_its_module_itself(tmp_path):
    """The process hashes strings at random, its JVM's launchers as Spark's workers do (seed 0):
    a child of the server would hash as the process does, so each launcher runs its module."""
    ran = run_forking_process(tmp_path, [("exit", 0, None), ("exit", 3, None)], PYTHONHASHSEED=None,
                              launcher_env={"PYTHONHASHSEED": "0"})
    for run, code in zip(ran["results"], (0, 3)):
        assert fields(run["out"])["pid"] == run["launcher"] and run["code"] == code


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="the fork server needs Linux's pidfds")
def test_a_launcher_killed_takes_its_childs_process_group_along(tmp_path):
    """PySpark's daemon leads a process group of its workers: a launcher SIGKILLed (the JVM
    destroying it) leaves none of them behind."""
    probe = PROBE.replace('mode, code = sys.argv[1], int(sys.argv[2])\n',
                          'mode, code = sys.argv[1], int(sys.argv[2])\nos.setpgid(0, 0)\nworker = os.fork()\n'
                          'if worker == 0:\n    null = os.open(os.devnull, os.O_RDWR)\n'
                          '    [os.dup2(null, fd) for fd in (0, 1, 2)]\n    time.sleep(60)\n    os._exit(0)\n'
                          'open(os.environ["PROBE_PID_FILE"] + ".worker", "w").write(str(worker))\n')
    assert probe != PROBE
    ran = run_forking_process(tmp_path, [("wait", 0, "SIGKILL")], probe=probe, PYTHONHASHSEED="0")
    assert ran["results"][0]["code"] == -9
    child = int((tmp_path / "probe.pid").read_text())
    worker = int((tmp_path / "probe.pid.worker").read_text())
    assert gone(child) and gone(worker)
