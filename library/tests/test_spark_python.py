"""The launcher Spark starts its Python processes with (streamstate.spark_python): with Spark's
own PYTHONPATH (its zips and the spark-core jar first), the module runs as ``python -m`` would
and imports the installed, byte-compiled PySpark; PySpark's daemon gets the collector between
tasks, which collects what the last task left and freezes the rest."""

from __future__ import annotations

import gc
import importlib.util
import os
import subprocess
import sys
import weakref
from pathlib import Path

import pyspark
import pytest

from streamstate.spark_python import (
    LAUNCHER as LAUNCHER_NAME, PRELOADED, PRINTING_MODULES, BetweenTasksCollector, preload, preloaded_modules, worker_python,
)

LAUNCHER = Path(sys.executable).with_name(LAUNCHER_NAME)
SPARK_LIB = Path(pyspark.__file__).parent / "python" / "lib"


def _sparks_pythonpath() -> str:
    archives = sorted(SPARK_LIB.glob("*.zip")) + sorted((Path(pyspark.__file__).parent / "jars").glob("spark-core_*.jar"))
    assert archives, f"no Spark archives under {SPARK_LIB}"
    return os.pathsep.join(str(path) for path in archives)


def test_the_module_runs_as_main_from_the_installed_pyspark(tmp_path):
    (tmp_path / "probe.py").write_text(
        "import sys, pyspark, py4j\n"
        "print(__name__, pyspark.__file__, py4j.__file__, sys.argv, sep='|')\n"
    )
    env = {**os.environ, "PYTHONPATH": _sparks_pythonpath()}
    # The module is found in the working directory, as python -m finds it (Spark's workers
    # resolve functions pickled by reference to the driver's modules that way).
    done = subprocess.run([str(LAUNCHER), "-m", "probe", "pyspark.worker"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True)
    name, pyspark_file, py4j_file, argv = done.stdout.strip().split("|")
    assert name == "__main__"
    assert ".zip" not in pyspark_file and ".zip" not in py4j_file, done.stdout
    assert argv == repr([str(tmp_path / "probe.py"), "pyspark.worker"]), "the arguments after the module, as python -m passes them"


def test_anything_but_dash_m_is_refused_with_its_usage():
    done = subprocess.run([str(LAUNCHER), "probe.py"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "usage: streamstate-spark-python -m <module> [arg ...]" in done.stderr


def test_the_launcher_replaces_only_this_interpreter():
    assert worker_python(sys.executable) == str(LAUNCHER)
    assert worker_python("/usr/bin/python3") == "/usr/bin/python3"


class _Node:
    """A cycle's member whose end a weak reference can see."""

    def __init__(self) -> None:
        self.self = self


@pytest.fixture
def unfrozen():
    """The collector freezes this process's heap: give it back to later tests."""
    yield
    gc.unfreeze()


def _cycle() -> weakref.ref:
    return weakref.ref(_Node())


def test_the_collector_collects_a_cycle_the_last_task_left(unfrozen):
    collector = BetweenTasksCollector(clock=lambda: 0.0)
    collector()
    left = _cycle()
    assert left() is not None, "a cycle is not freed by reference counting"
    collector()
    assert left() is None


def test_the_collector_freezes_what_survived_so_the_next_collection_skips_it(unfrozen):
    collector = BetweenTasksCollector(clock=lambda: 0.0)
    kept = _Node()
    assert any(tracked is kept for tracked in gc.get_objects())
    collector()
    assert gc.get_freeze_count() > 0
    assert not any(tracked is kept for tracked in gc.get_objects()), "a frozen object is in no generation a collection walks"


def test_garbage_holding_a_frozen_object_waits_for_the_full_collection(unfrozen):
    now = [0.0]
    collector = BetweenTasksCollector(full_every_s=60.0, clock=lambda: now[0])
    node = _Node()
    left = weakref.ref(node)
    collector()  # node survives this task and is frozen
    del node  # now cyclic garbage, out of reach of the collections between tasks
    now[0] = 59.0
    collector()
    assert left() is not None
    now[0] = 60.0
    collector()  # the full collection: everything unfrozen, collected, frozen again
    assert left() is None


def run_as_daemon(tmp_path: Path, probe: str, **env: str) -> subprocess.CompletedProcess:
    """``probe`` run by the launcher as PySpark's daemon (:func:`run_stand_in`)."""
    return run_stand_in(tmp_path, "pyspark.daemon", probe, **env)


def run_stand_in(tmp_path: Path, module: str, probe: str, **env: str) -> subprocess.CompletedProcess:
    """``probe`` run by the launcher as ``module``, written under ``tmp_path`` and found first on
    the path: a stand-in named like one of PySpark's (its package shadows PySpark's) reports what
    that module would see."""
    *packages, name = module.split(".")
    folder = tmp_path
    for package in packages:
        folder = folder / package
        folder.mkdir(exist_ok=True)
        (folder / "__init__.py").write_text("")
    (folder / f"{name}.py").write_text(probe)
    return subprocess.run(
        [str(LAUNCHER), "-m", module], cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path), **env},
    )


def run_as_other_module(tmp_path: Path, probe: str) -> subprocess.CompletedProcess:
    """``probe`` run by the launcher as a module of its own (``-m probe``), not PySpark's daemon."""
    return run_stand_in(tmp_path, "probe", probe)


def test_the_pre_init_workers_progress_goes_to_the_log_not_to_standard_output(tmp_path):
    """transformWithState's pre-init process prints five lines at every query start, which Spark
    copies into the driver's log: run by the launcher, a stand-in of that module (its package
    found first on the path) prints into its logger at DEBUG, and the same code as any other
    module still prints."""
    probe = (
        "import logging, sys\n"
        "logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format='%(name)s: %(message)s')\n"
        "print('Starting the worker.\\n')\n"
    )
    module = "pyspark.sql.streaming.transform_with_state_driver_worker"
    quieted = run_stand_in(tmp_path, module, probe)
    assert quieted.stdout == ""
    assert f"{module}: Starting the worker." in quieted.stderr
    assert run_as_other_module(tmp_path, probe).stdout == "Starting the worker.\n\n"


def test_the_modules_whose_prints_go_to_the_log_still_print():
    """Each module in PRINTING_MODULES is PySpark's and still calls print(): one that stops can leave the list."""
    for module in PRINTING_MODULES:
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin is not None, module
        assert "print(" in Path(spec.origin).read_text(), module


def test_the_launcher_installs_the_collector_for_pysparks_daemon_only(tmp_path):
    probe = "import gc; print(type(gc.collect).__name__)\n"
    other = run_as_other_module(tmp_path, probe)
    assert other.stdout.strip() == "builtin_function_or_method"
    assert run_as_daemon(tmp_path, probe).stdout.strip() == "BetweenTasksCollector"


def test_the_preload_names_the_engines_modules_and_the_variables():
    assert preloaded_modules({}) == list(PRELOADED)
    extra = preloaded_modules({"STREAMSTATE_WORKER_PRELOAD": " jobs.a, ,pandas,jobs.b "})
    assert extra == [*PRELOADED, "jobs.a", "jobs.b"]


def test_a_module_that_fails_to_import_is_reported_and_the_rest_imported(tmp_path, monkeypatch):
    (tmp_path / "preload_probe_ok.py").write_text("")
    (tmp_path / "preload_probe_bad.py").write_text("raise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    failures = preload(["preload_probe_bad", "no_such_module_here", "preload_probe_ok"])
    assert [line.split(": ")[2] for line in failures] == ["preload_probe_bad (RuntimeError", "no_such_module_here (ModuleNotFoundError"]
    assert "preload_probe_ok" in sys.modules


def test_the_daemon_starts_with_the_preload_imported_and_frozen(tmp_path):
    probe = "import gc, sys; print(all(m in sys.modules for m in ('pyarrow', 'pandas', 'streamstate.state', 'extra_mod')), gc.get_freeze_count() > 0)\n"
    (tmp_path / "extra_mod.py").write_text("")
    # The stand-in's package shadows PySpark's, so pyspark.worker is reported, not imported.
    daemon = run_as_daemon(tmp_path, probe, STREAMSTATE_WORKER_PRELOAD="extra_mod")
    assert daemon.stdout.split() == ["True", "True"], daemon.stderr
    assert "not preloaded for PySpark's workers: pyspark.worker (ModuleNotFoundError" in daemon.stderr


def test_the_daemon_keeps_freed_memory_for_its_workers(tmp_path):
    """Arrow's buffers from glibc's allocator, set to keep what a task frees (keep_freed_memory)."""
    probe = "import pyarrow; print(pyarrow.default_memory_pool().backend_name)\n"
    daemon = run_as_daemon(tmp_path, probe)
    assert daemon.stdout.strip() == "system", daemon.stderr
    other = run_as_other_module(tmp_path, probe)
    assert other.stdout.strip() != "system"  # any other module keeps Arrow's default


def test_keep_freed_memory_reuses_freed_blocks_instead_of_new_pages():
    """Blocks of a size glibc would map afresh each time (over its 32 MB ceiling of a threshold)
    are served again from the heap: the page faults of a second round of the same allocations
    fall to a fraction. In a subprocess: the settings are the whole process's."""
    probe = """
import resource, sys
import numpy as np
if sys.argv[1] == "kept":
    from streamstate.spark_python import keep_freed_memory
    assert keep_freed_memory()
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
np.ones(64 << 17)  # 64 MB, once, so that the heap has grown to it
before = faults()
for _ in range(5):
    block = np.ones(64 << 17)
    del block
print(faults() - before)
"""
    runs = {mode: int(subprocess.run([sys.executable, "-c", probe, mode], capture_output=True, text=True, timeout=120, check=True).stdout)
            for mode in ("default", "kept")}
    assert runs["kept"] * 4 < runs["default"], runs
