"""The state library as a user gets it: its wheel, in a fresh venv, with nothing of the application.

One venv for the module (building it is most of the module's time): the wheel built from
library/, installed beside ``pyspark==<spark-jobs' pin>``, every version held to
requirements.lock's (a constraints file made from it, so CI resolves what the suite proves;
pip may fetch from PyPI or its cache). Then, in that venv: none of the application's
packages is installed, the seed examples word count, sessions and windowed run as users run
them (``python -m examples.<name>`` against the session's broker) and print the right rows,
and a type checker resolves ``StateSpec`` and ``State`` in a user's file to their classes
(the wheel ships ``py.typed``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import tomllib
import zipfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import pytest

from streamstate.testing.spark import JARS_VARIABLE
from streamstate_pipeline import binaries
from streamstate_pipeline.settings import REPO_ROOT
from tests.state_queries import produce_json

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]

# The application's packages: a user of the library installs none of them.
APPLICATION_PACKAGES = ("fastapi", "uvicorn", "rocksdict", "boto3", "confluent-kafka", "prometheus-client")
# What the library itself requires (library/pyproject.toml), by distribution name.
LIBRARY_REQUIREMENTS = {"pyspark", "pandas", "pyarrow", "numpy", "protobuf", "pydantic", "typing-extensions", "xxhash"}


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def spark_pin() -> str:
    dependencies = tomllib.loads((REPO_ROOT / "spark-jobs" / "pyproject.toml").read_text())["project"]["dependencies"]
    return next(d for d in dependencies if d.startswith("pyspark=="))


def lock_constraints() -> list[str]:
    """requirements.lock's ``name==version[ ; marker]`` lines, without their hashes."""
    lines = (REPO_ROOT / "requirements.lock").read_text().splitlines()
    return [m.group(1).strip() for line in lines if (m := re.match(r"^([A-Za-z0-9][^\\]*==[^\\]*?)\s*\\?$", line))]


def locked_versions() -> dict[str, str]:
    return {normalized(c.split("==")[0]): c.split("==")[1].split(";")[0].strip() for c in lock_constraints()}


@dataclass
class UserVenv:
    root: Path
    wheel: Path
    packages: dict[str, str]  # pip list: normalized name -> version

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def env(self) -> dict[str, str]:
        """The venv's shell with the examples' folder on the path (as a user's own jobs would be)
        and the printed windows' times in UTC."""
        return activated(self.root) | {"PYTHONPATH": str(REPO_ROOT), "TZ": "UTC"}


def activated(root: Path) -> dict[str, str]:
    """A user's shell with the venv at ``root`` activated, nothing of this checkout's: no
    PYTHONPATH to library/src (pip would take its egg-info for an installed streamstate), no
    PYSPARK_PYTHON of the suite's venv."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "VIRTUAL_ENV", "MYPYPATH", "PYTEST_XDIST_WORKER")}
    return env | {"VIRTUAL_ENV": str(root), "PATH": f"{root / 'bin'}{os.pathsep}{os.environ['PATH']}"}


def run(command: list, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run([str(c) for c in command], capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{' '.join(map(str, command))} failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    return result


@pytest.fixture(scope="module")
def user_venv(tmp_path_factory) -> UserVenv:
    work = tmp_path_factory.mktemp("library-wheel")
    # Built from a copy: pip builds in the source tree (build/, *.egg-info), and the checkout stays as it is.
    source = work / "library"
    shutil.copytree(REPO_ROOT / "library", source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "tests"))
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet", source, "-w", work / "dist"], timeout=300)
    (wheel,) = (work / "dist").glob("streamstate-*.whl")
    root = work / "venv"
    run([sys.executable, "-m", "venv", root], env=activated(root), timeout=300)
    constraints = work / "constraints.txt"
    constraints.write_text("\n".join(lock_constraints()) + "\n")
    # --no-compile: the same files installed, their bytecode written at first import instead of
    # for every module up front (pyspark's, pandas', pyarrow's: 66 s of the install against 26 s, measured).
    run([root / "bin" / "pip", "install", "--quiet", "--no-compile", "--disable-pip-version-check", "-c", constraints, spark_pin(), wheel],
        env=activated(root), timeout=600)
    listed = run([root / "bin" / "pip", "list", "--format=json", "--disable-pip-version-check"], env=activated(root), timeout=120).stdout
    return UserVenv(root, wheel, {normalized(p["name"]): p["version"] for p in json.loads(listed)})


def test_the_wheel_ships_py_typed_and_requires_only_the_library_packages(user_venv):
    with zipfile.ZipFile(user_venv.wheel) as wheel:
        names = wheel.namelist()
        metadata = wheel.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "streamstate/py.typed" in names
    assert not [n for n in names if not n.startswith(("streamstate/", "streamstate-"))], names
    requirements = re.findall(r"^Requires-Dist: ([A-Za-z0-9_.-]+)(.*)$", metadata, re.M)
    assert {normalized(name) for name, rest in requirements if "extra ==" not in rest} == LIBRARY_REQUIREMENTS
    assert "Description-Content-Type: text/markdown" in metadata and "map_with_state" in metadata  # library/README.md


def test_the_venv_holds_none_of_the_applications_packages(user_venv):
    packages = user_venv.packages
    assert not [p for p in APPLICATION_PACKAGES if p in packages], sorted(packages)
    assert [p for p in packages if p.startswith("streamstate")] == ["streamstate"]
    assert packages["pyspark"] == spark_pin().split("==")[1]
    # Every package at requirements.lock's version (pip, setuptools: the venv's own, not the lock's).
    locked = locked_versions()
    drift = {p: (v, locked.get(p)) for p, v in packages.items() if p not in ("streamstate", "pip", "setuptools") and locked.get(p) != v}
    assert not drift, drift


def test_streamstate_comes_from_the_wheel(user_venv):
    where = run([user_venv.python, "-c", "import streamstate.state as s; print(s.__file__); print(s.StateSpec)"], env=user_venv.env(), timeout=120).stdout
    assert where.splitlines()[0].startswith(str(user_venv.root)), where
    assert "streamstate.state.spec.StateSpec" in where


def test_the_wheel_installs_the_worker_launcher_the_examples_start_spark_with(user_venv):
    launcher = user_venv.root / "bin" / "streamstate-spark-python"
    assert launcher.exists(), sorted(p.name for p in (user_venv.root / "bin").iterdir())
    chosen = run([user_venv.python, "-c", "import sys; from streamstate.spark_python import worker_python; print(worker_python(sys.executable))"],
                 env=user_venv.env(), timeout=120).stdout.strip()
    assert chosen == str(launcher), chosen


# ---------------------------------------------------------------------------------- the examples
def table_rows(stdout: str) -> dict[tuple[str, ...], list[tuple[str, ...]]]:
    """The rows of every table ``DataFrame.show(truncate=False)`` printed, by the table's header."""
    tables: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
    header = None
    for line in stdout.splitlines():
        if line.startswith("+"):
            continue
        if line.startswith("|"):
            cells = tuple(cell.strip() for cell in line.split("|")[1:-1])
            if header is None:
                header = cells
                tables.setdefault(header, [])
            else:
                tables[header].append(cells)
        else:
            header = None
    return tables


def run_example(venv: UserVenv, name: str, bootstrap: str, topic: str, done: Callable[[dict], bool], tmp_path: Path, timeout_s: float = 360) -> dict:
    """``python -m examples.<name>`` in the venv, until the tables it printed satisfy ``done``
    (then it is stopped: the examples run until interrupted); returns those tables."""
    jars = binaries.spark_jars_setting()
    command = [venv.python, "-m", f"examples.{name}", "--topic", topic, "--bootstrap-servers", bootstrap,
               "--checkpoint", tmp_path / f"{name}-checkpoint", "--trigger", "1 second", "--jars", jars]
    log = (tmp_path / f"{name}.stderr").open("w")
    # Two state partitions, not Spark's 200 (a task each per batch, on 2 cores): set as a user
    # sets a conf for a program that builds its own session.
    env = venv.env() | {JARS_VARIABLE: jars, "PYSPARK_SUBMIT_ARGS": "--conf spark.sql.shuffle.partitions=2 pyspark-shell"}
    process = subprocess.Popen([str(c) for c in command], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(process.stdout.readline, "")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline and process.poll() is None:
            text = "".join(lines)
            tables = table_rows(text)
            # Every batch begun printed to its end (the dead letters' table comes last).
            whole = len(re.findall(r"^--- batch", text, re.M)) == len(re.findall(r"^\|key\s*\|reason", text, re.M))
            if whole and done(tables):
                return tables
            time.sleep(0.5)
        (tmp_path / f"{name}.stdout").write_text("".join(lines))
        stderr = (tmp_path / f"{name}.stderr").read_text()
        pytest.fail(f"examples.{name} (exit {process.poll()}) did not print the expected rows:\n{''.join(lines)[-6000:]}\n{stderr[-4000:]}")
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


def no_dead_letters(tables: dict) -> bool:
    """The dead letters' table was printed (``key, reason, value``, then the source's columns) and is empty."""
    dead_letters = [rows for header, rows in tables.items() if header[:3] == ("key", "reason", "value")]
    return bool(dead_letters) and not any(dead_letters)


def test_word_count_runs_in_the_venv(user_venv, bootstrap, new_topic, tmp_path):
    topic = new_topic()
    produce_json(bootstrap, topic, [{"line": "dummy source a"}, {"line": "a b"}])
    # Counted from the initial state dummy=100, source=32 (word_count.INITIAL_STATE).
    expected = {("dummy", '["dummy",101]'), ("source", '["source",33]'), ("a", '["a",1]'), ("a", '["a",2]'), ("b", '["b",1]')}

    def done(tables: dict) -> bool:  # the batch's snapshots print after its outputs
        return expected <= set(tables.get(("key", "output"), [])) and ("a", "2") in tables.get(("key", "state"), [])

    tables = run_example(user_venv, "word_count", bootstrap, topic, done, tmp_path)
    assert len(tables[("key", "output")]) == len(expected), tables
    assert {("a", "2"), ("b", "1"), ("dummy", "101")} <= set(tables[("key", "state")])
    assert no_dead_letters(tables), tables


MINUTE = 60_000


def test_sessions_runs_in_the_venv(user_venv, bootstrap, new_topic, tmp_path):
    topic = new_topic()
    events = [
        {"user_id": "u1", "type": "login", "ts": 0},
        {"user_id": "u1", "type": "page_view", "ts": 1 * MINUTE},
        {"user_id": "u1", "type": "page_view", "ts": 2 * MINUTE},
        {"user_id": "u2", "type": "login", "ts": 0},
        {"user_id": "u2", "type": "logout", "ts": MINUTE // 2},
        # 40 minutes on: the watermark (a minute behind) passes u1's 30 idle minutes, and u1 expires
        # (in the no-data batch after the first, the snapshot NULL).
        {"user_id": "u3", "type": "login", "ts": 40 * MINUTE},
    ]
    produce_json(bootstrap, topic, events)

    def sessions(tables: dict) -> dict[str, dict]:
        # the outputs (each called key's new state) and the snapshots print under one header: (key, state)
        return {key: json.loads(state) for key, state in tables.get(("key", "state"), []) if state != "NULL"}

    def removed(tables: dict) -> set[str]:
        return {key for key, state in tables.get(("key", "state"), []) if state == "NULL"}

    def done(tables: dict) -> bool:
        return "u1" in removed(tables) and {"u1", "u3"} <= set(sessions(tables))

    tables = run_example(user_venv, "sessions", bootstrap, topic, done, tmp_path)
    states = sessions(tables)
    assert states["u1"] == {"login_time": 0, "last_activity": 2 * MINUTE, "page_views": 2}
    assert states["u3"] == {"login_time": 40 * MINUTE, "last_activity": 40 * MINUTE, "page_views": 0}
    # u2 logged in and out within the batch: no state, so no output and no snapshot; u3 is not idle yet.
    assert "u2" not in {key for key, _ in tables[("key", "state")]} and removed(tables) == {"u1"}
    assert no_dead_letters(tables), tables


SECOND = 1000
BASE = 1_800_000_000_000  # a whole minute: windows of 60 seconds sliding every 20 start on it


def shown_window(start_ms: int, end_ms: int) -> str:
    """A ``window`` struct as show() prints it (the session's time zone is the JVM's: TZ=UTC)."""

    def at(ms: int) -> str:
        return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")

    return f"{{{at(start_ms)}, {at(end_ms)}}}"


def test_windowed_runs_in_the_venv(user_venv, bootstrap, new_topic, tmp_path):
    topic = new_topic()
    lines = [
        {"line": "a b a", "ts": BASE + 1 * SECOND},
        {"line": "b", "ts": BASE + 25 * SECOND},
        # far on: the watermark (10 seconds behind) closes every window of the lines above
        {"line": "c", "ts": BASE + 200 * SECOND},
    ]
    produce_json(bootstrap, topic, lines)
    # reduce_by_key_and_window(add, subtract, 60 s, 20 s): each closed window holding a or b, its count.
    expected = set()
    for start_s in range(-40, 40, 20):
        start, end = BASE + start_s * SECOND, BASE + (start_s + 60) * SECOND
        for word, times in (("a", [1, 1]), ("b", [1, 25])):
            count = sum(1 for t in times if start <= BASE + t * SECOND < end)
            if count:
                expected.add((word, shown_window(start, end), str(count)))

    def rows(tables: dict) -> set:
        return {row for header, table in tables.items() if header[1:2] == ("window",) for row in table}

    def done(tables: dict) -> bool:
        return expected <= rows(tables)

    tables = run_example(user_venv, "windowed", bootstrap, topic, done, tmp_path)
    assert rows(tables) == expected, (sorted(rows(tables)), sorted(expected))
    assert no_dead_letters(tables), tables


# ---------------------------------------------------------------------------------- types
USER_FILE = '''
from streamstate.state import State, StateSpec, map_with_state


def track(word: str, one: int | None, state: State) -> tuple[str, int]:
    total = (one or 0) + state.get_option(0)
    state.update(total)
    return (word, total)


spec = StateSpec.function(track).timeout("60 seconds")
reveal_type(spec)
reveal_type(State)
reveal_type(map_with_state)
spec.no_such_method()
'''


def test_a_type_checker_resolves_state_spec_and_state_to_their_classes(user_venv, tmp_path):
    project = tmp_path / "users-project"
    project.mkdir()
    (project / "mypy.ini").write_text("[mypy]\n")
    (project / "user.py").write_text(USER_FILE)
    env = {k: v for k, v in user_venv.env().items() if k not in ("PYTHONPATH",)}
    result = subprocess.run(
        [str(Path(sys.executable).parent / "mypy"), "--python-executable", str(user_venv.python), "--cache-dir", str(tmp_path / "cache"), "user.py"],
        cwd=project, env=env, capture_output=True, text=True, timeout=600,
    )
    out = result.stdout
    assert 'Revealed type is "streamstate.state.spec.StateSpec"' in out, out
    assert 'Revealed type is "def (' in out and "-> streamstate.state.state.State" in out, out
    assert "-> streamstate.state.operators.StateResult" in out, out
    # Not Any: an attribute StateSpec lacks is an error, the only one.
    assert '"StateSpec" has no attribute "no_such_method"' in out, out
    assert out.count("error:") == 1 and "Cannot find implementation" not in out and "missing library stubs" not in out, out
