"""The Python executable Spark starts its workers with (``PYSPARK_PYTHON``): the jobs' local
masters and the Spark image use it, and so do :mod:`streamstate.testing`'s SparkSession and the
examples. Any PySpark application can: ``PYSPARK_PYTHON`` set, before its session starts, to the
``streamstate-spark-python`` beside its interpreter (:func:`worker_python`).

Spark runs every Python process it starts as ``<python> -m <module>`` with
``$SPARK_HOME/python/lib/pyspark.zip``, the py4j zip and the spark-core jar first on
``PYTHONPATH``: the daemon that forks the task workers, and the one-off workers of the driver
(transformWithState's pre-init worker on every query's first batch, the Python data sources'
planners). Modules imported from a zip are compiled from source in every process (a zip holds
no ``.pyc`` cache): importing PySpark that way takes about four times as long as from the
installed package, and Spark gives a one-off worker 10 s to connect back before it fails the
query, which a loaded machine exceeded. Each task's ``importlib.invalidate_caches()`` also
makes every zip importer re-read its archive's directory, the jar's thousands of classes
included: together a third of the task workers' CPU in the jobs' profile (docs/profile.md).

The pip-installed ``pyspark`` and ``py4j`` are the same releases, byte-compiled, and a jar
holds no Python. The launcher (the ``streamstate-spark-python`` console script,
:mod:`streamstate.launcher`) drops those entries from the path with :func:`drop_archives`, then
runs the module Spark asked for with its arguments, as ``python -m`` would. With
``STREAMSTATE_FORK_SERVER=on`` the driver's one-off processes are forked from a preloaded
server instead (:mod:`streamstate.fork_server`), which prepares them with the same functions.

For PySpark's daemon it also makes the collection between tasks cheap (:class:`BetweenTasksCollector`),
and imports once, before it forks the task workers, what each of them would import after
(:func:`preload`): PySpark's worker, pyarrow, pandas and the state engine, and the modules
``STREAMSTATE_WORKER_PRELOAD`` names. Each worker took about a second of CPU importing them, and
a job starts four to six workers at once with everything else on two cores (docs/profile.md).
Its workers also keep the memory a task frees for the next task (:func:`keep_freed_memory`).
Every module runs through :func:`run_as_main`, which sends the progress lines
transformWithState's pre-init process prints to the log (:data:`PRINTING_MODULES`).

PySpark's daemon imports nothing before it forks, on purpose: pyarrow and NumPy start threads
when imported (jemalloc's background thread, OpenBLAS's pool), and a fork copies only the
thread that calls it. Both libraries prepare for a fork (jemalloc takes its locks around it and
resets its background threads in the child; OpenBLAS stops its pool before it), which is what
makes their import before a fork safe; nothing else preloaded here starts a thread.
"""

from __future__ import annotations

import gc
import importlib
import logging
import runpy
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

DAEMON = "pyspark.daemon"
LAUNCHER = "streamstate-spark-python"  # the console script running main()
# How often a worker's collection between tasks also scans what earlier tasks left alive.
FULL_COLLECTION_EVERY_S = 60.0
# What every task worker of a state API query imports (the worker, Arrow, the pandas frames of
# transformWithStateInPandas, the engine): the daemon imports it before it forks them.
PRELOADED = ("pyspark.worker", "pyarrow", "pandas", "streamstate.state")
PRELOAD_VARIABLE = "STREAMSTATE_WORKER_PRELOAD"  # more modules for the daemon, comma-separated
# glibc's mallopt parameters (malloc.h), and what keep_freed_memory sets them to: freed memory
# up to this much stays in a worker, and blocks up to this size come from its reused heap
# (a bucket's columns and a batch's Arrow tables are megabytes to a few hundred).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
KEPT_FREE_BYTES = 256 << 20
KEPT_BLOCK_BYTES = 256 << 20
# PySpark modules that print their progress to standard output, which Spark copies into the
# driver's log: transformWithState's pre-init process prints five lines at every query start,
# one of them the operator's whole output schema. Their print() goes to the log at DEBUG.
PRINTING_MODULES = frozenset({"pyspark.sql.streaming.transform_with_state_driver_worker"})


def is_redundant(entry: str) -> bool:
    """Spark's bundled zips (installed as packages too) and jars (no Python in them)."""
    return entry.endswith(".jar") or ("/pyspark/python/lib/" in entry and entry.endswith(".zip"))


def drop_archives() -> list[str]:
    """Remove the redundant archive entries from ``sys.path`` and their importers; returns them."""
    entries = [entry for entry in sys.path if is_redundant(entry)]
    for entry in entries:
        sys.path.remove(entry)
    for cached in [key for key in sys.path_importer_cache if any(key.startswith(entry) for entry in entries)]:
        del sys.path_importer_cache[cached]
    return entries


class BetweenTasksCollector:
    """``gc.collect`` for PySpark's task workers: what the last task allocated, not the whole heap.

    PySpark's daemon runs a full ``gc.collect()`` in a worker after every task it ran. A job's
    worker holds PySpark's worker, pandas, pyarrow, pydantic and the jobs' modules (about 100,000
    tracked objects), so each of those collections walked them all: 80-90 ms of CPU a task,
    several tasks a batch, in every job and every test (the largest item of a quiet job's
    workers in py-spy; docs/profile.md). Each call here collects, then freezes what survived
    (``gc.freeze``): the modules and anything else still alive move out of later collections, so
    the next call scans only what one task allocated. Cyclic garbage is collected as before when
    its objects were allocated since the last call; garbage that holds an object frozen earlier
    waits for the full collection, which this makes at most ``full_every_s`` apart (``gc.unfreeze``
    first).
    """

    def __init__(
        self,
        collect: Callable[[int], int] = gc.collect,  # the builtin, bound before the launcher replaces it
        full_every_s: float = FULL_COLLECTION_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._collect = collect
        self._full_every_s = full_every_s
        self._clock = clock
        self._next_full = clock() + full_every_s

    def __call__(self, generation: int = 2) -> int:
        now = self._clock()
        if now >= self._next_full:
            gc.unfreeze()
            self._next_full = now + self._full_every_s
        found = self._collect(generation)
        gc.freeze()
        return found


def preload(names: Iterable[str]) -> list[str]:
    """Import each module of ``names``; a line for each that could not be (the worker that needs
    it then imports it itself and reports the error where the task fails)."""
    failures = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - whatever a module raises, the daemon must start
            failures.append(f"{LAUNCHER}: not preloaded for PySpark's workers: {name} ({type(exc).__name__}: {exc})")
    return failures


def preloaded_modules(environ: Mapping[str, str]) -> list[str]:
    """:data:`PRELOADED` and the modules ``STREAMSTATE_WORKER_PRELOAD`` adds."""
    extra = [name.strip() for name in environ.get(PRELOAD_VARIABLE, "").split(",") if name.strip()]
    return [*PRELOADED, *(name for name in extra if name not in PRELOADED)]


def worker_python(python: str) -> str:
    """The executable Spark should start Python workers with: this launcher (installed beside the
    interpreter with the library) when ``python`` is this interpreter, else ``python`` as given."""
    launcher = Path(sys.executable).with_name(LAUNCHER)
    if Path(python).absolute() == Path(sys.executable).absolute() and launcher.exists():
        return str(launcher)
    return python


def as_python_m(arguments: list[str], cwd: str) -> None:
    """``sys.path`` and ``sys.argv`` as ``python -m <arguments>`` run in ``cwd`` leaves them:
    functions pickled by reference to a module there resolve, and the daemon gets its worker
    module (``runpy.run_module`` then sets ``argv[0]``)."""
    if not sys.flags.safe_path:
        sys.path.insert(0, cwd)
    sys.argv = list(arguments)


def run_as_main(module: str) -> None:
    """Run ``module`` as ``python -m`` does; one of :data:`PRINTING_MODULES` with its ``print()``
    sent to the log at DEBUG (its logger: the module's name)."""
    init_globals = {"print": _logged_print(logging.getLogger(module))} if module in PRINTING_MODULES else None
    runpy.run_module(module, run_name="__main__", alter_sys=True, init_globals=init_globals)


def _logged_print(log: logging.Logger) -> Callable[..., None]:
    def logged_print(*values: object, sep: str | None = " ", **_ignored: object) -> None:
        log.debug("%s", (" " if sep is None else sep).join(map(str, values)).strip())

    return logged_print


def keep_freed_memory() -> bool:
    """Keep the memory a task frees for the next one instead of giving it back to the system:
    Arrow's buffers from glibc's allocator (not mimalloc, which returns freed pages within
    milliseconds), and glibc told to serve blocks up to :data:`KEPT_BLOCK_BYTES` from its heap
    and to keep up to :data:`KEPT_FREE_BYTES` of it free. Every page a process gets back from
    the system is zeroed on its first touch, at 3-10 us a page on the machines measured: a
    sessions job's workers took about 200,000 fresh pages a run of a million events, once warm,
    and 40,000-95,000 with this (docs/profile.md). False where the C library has no ``mallopt`` (not glibc)."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    import pyarrow

    pyarrow.set_memory_pool(pyarrow.system_memory_pool())
    return bool(mallopt(_M_TRIM_THRESHOLD, KEPT_FREE_BYTES)) and bool(mallopt(_M_MMAP_THRESHOLD, KEPT_BLOCK_BYTES))


def prepare_daemon() -> None:
    """What PySpark's daemon gets before its module runs, its modules imported."""
    keep_freed_memory()  # before the workers fork: each inherits the allocator's settings
    # The daemon's module calls gc.collect() through the gc module: its forked workers get this one.
    gc.collect = BetweenTasksCollector()
    gc.freeze()  # the preloaded heap: out of every worker's collections, and its pages stay shared
    # Python 3.12+ warns at a fork with more than one thread; the module docstring says why these are safe.
    warnings.filterwarnings("ignore", message=r"This process .* is multi-threaded, use of fork\(\) may lead to deadlocks", category=DeprecationWarning)
