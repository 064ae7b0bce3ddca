"""PySpark's daemon collects garbage in a worker after every task; through the library's launcher
that collection walks only what the last task allocated (streamstate.spark_python): a
task run by a reused worker finds the heap that survived its earlier tasks frozen. The jobs'
sessions and streamstate.testing's start their workers that way."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys

import pytest
from pyspark.sql.streaming.stateful_processor import StatefulProcessor

from streamstate.testing.spark import JARS_VARIABLE
from streamstate_pipeline import binaries

pytestmark = pytest.mark.spark


def _worker_and_its_collector(batches):
    import gc
    import os

    import pyarrow as pa

    for _ in batches:
        pass
    yield pa.RecordBatch.from_pylist([{"pid": os.getpid(), "collector": type(gc.collect).__name__, "frozen": gc.get_freeze_count()}])


def _daemon_and_heavy_work(batches):
    import os
    import sys

    import numpy as np
    import pyarrow as pa

    for _ in batches:
        pass
    daemon_maps = open(f"/proc/{os.getppid()}/maps").read()
    product = np.ones((300, 300)) @ np.ones((300, 300))  # OpenBLAS's pool in a worker forked after NumPy's import
    allocated = pa.array(range(1_000_000)).sum().as_py()  # Arrow's allocator, likewise after pyarrow's import
    yield pa.RecordBatch.from_pylist([{
        "arrow_in_daemon": "libarrow" in daemon_maps,
        "arrow_pool": pa.default_memory_pool().backend_name,
        "jobs_imported": "streamstate_jobs.registry" in sys.modules,
        "work": float(product[0, 0]) + allocated,
    }])


def test_the_daemon_imports_what_its_workers_need_before_it_forks_them(spark):
    """The daemon's own memory holds pyarrow's library (it never imported it before), and its
    workers, forked after pyarrow's and NumPy's threads started, run Arrow and BLAS work, with
    Arrow's buffers from the allocator that keeps freed memory (spark_python.keep_freed_memory)."""
    schema = "arrow_in_daemon boolean, arrow_pool string, jobs_imported boolean, work double"
    rows = spark.range(4, numPartitions=4).mapInArrow(_daemon_and_heavy_work, schema).collect()
    assert [tuple(row) for row in rows] == [(True, "system", True, 300.0 + 499999500000)] * 4


def test_a_reused_worker_finds_what_its_earlier_tasks_left_frozen(spark):
    query = spark.range(1, numPartitions=1).mapInArrow(_worker_and_its_collector, "pid long, collector string, frozen long")
    # Spark hands out the session's idle workers in turn, and the tests before this one left some
    # (four different workers in four runs, seen): run until one comes back.
    runs: list[tuple] = []
    while len(runs) < 40 and len({pid for pid, _, _ in runs}) == len(runs):
        runs.append(tuple(query.collect()[0]))
    assert {collector for _, collector, _ in runs} == {"BetweenTasksCollector"}, runs
    seen: collections.Counter[int] = collections.Counter()
    reused = []
    for pid, _, frozen in runs:
        if seen[pid]:
            reused.append(frozen)
        seen[pid] += 1
    assert reused, f"Spark reuses an idle worker for a later task: {runs}"
    assert all(frozen > 10_000 for frozen in reused), f"the modules a worker imported are frozen after its first task: {runs}"


def _daemon_of_source_workers(batches):
    import os

    import pyarrow as pa

    for _ in batches:
        pass
    yield pa.RecordBatch.from_pylist([{"daemon": os.getppid()}])


class _DaemonOfStateWorkers(StatefulProcessor):
    def init(self, handle) -> None:
        pass

    def handleInputRows(self, key, rows, timerValues):
        import os

        import pandas as pd

        for _ in rows:
            pass
        yield pd.DataFrame({"daemon": [os.getppid()]})

    def close(self) -> None:
        pass


def test_the_source_and_the_state_stage_share_one_daemon(spark):
    """A job's first batch forks its source's workers (mapInArrow) and its state's
    (transformWithStateInPandas) from one daemon, which imported the jobs once: Spark starts a
    daemon per distinct worker environment, and its UDF runners' simplified tracebacks made two."""
    # A batch transformWithState needs the state store coordinator, which the session's
    # streaming query manager starts as it is made.
    _ = spark.streams
    source = {row.daemon for row in spark.range(2, numPartitions=2).mapInArrow(_daemon_of_source_workers, "daemon long").collect()}
    state = spark.range(4).groupBy("id").transformWithStateInPandas(_DaemonOfStateWorkers(), "daemon long", "Update", "None")
    assert {row.daemon for row in state.collect()} == source, "the state stage's workers came from a daemon of their own"


_USERS_TEST_SESSION = """
import gc
import pyarrow as pa
from streamstate.testing.spark import spark_session_for_tests

def collector(batches):
    for _ in batches:
        pass
    yield pa.RecordBatch.from_pylist([{"collector": type(gc.collect).__name__}])

spark = spark_session_for_tests()
print(spark.range(1, numPartitions=1).mapInArrow(collector, "collector string").collect()[0][0])
spark.stop()
"""


def test_the_testing_session_starts_its_workers_through_the_launcher(tmp_path):
    """A user's test session (streamstate.testing), in a process of its own with no PYSPARK_PYTHON
    set, as a user's pytest starts it."""
    env = {name: value for name, value in os.environ.items() if name != "PYSPARK_PYTHON"}
    env[JARS_VARIABLE] = binaries.spark_jars_setting()  # no Maven repository here
    done = subprocess.run([sys.executable, "-c", _USERS_TEST_SESSION], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["BetweenTasksCollector"], done.stdout[-2000:]


_JOB_DRIVER = """
import gc, json, os, sys
import pandas as pd
import pyarrow as pa
from pyspark.sql.streaming.stateful_processor import StatefulProcessor
from streamstate_jobs.runner import fork_python_processes
from streamstate_jobs.spark import build_spark
from streamstate_pipeline.settings import Settings

settings = Settings()
assert fork_python_processes(settings)
spark = build_spark(settings, "fork-server-probe")

def parent(pid):
    return int(open(f"/proc/{pid}/stat", "rb").read().rsplit(b")", 1)[1].split()[1])

def worker(batches):
    for _ in batches:
        pass
    daemon = os.getppid()
    yield pa.RecordBatch.from_pylist([{"server": parent(daemon), "driver": parent(parent(daemon)), "collector": type(gc.collect).__name__,
                                       "seeded": sys.flags.hash_randomization == 0, "jobs": "streamstate_jobs.registry" in sys.modules}])

class Inits(StatefulProcessor):
    def init(self, handle):
        with open(os.environ["INITS"], "a") as out:
            out.write(f"{os.getpid()} {os.getppid()}\\n")
    def handleInputRows(self, key, rows, timerValues):
        yield pd.DataFrame({"id": [key[0]]})
    def close(self):
        pass

schema = "server long, driver long, collector string, seeded boolean, jobs boolean"
print(json.dumps(spark.range(2, numPartitions=2).mapInArrow(worker, schema).collect()[0].asDict()))
source = os.environ["SOURCE"]
spark.range(3).write.parquet(source)
query = (spark.readStream.schema("id long").parquet(source).groupBy("id")
         .transformWithStateInPandas(Inits(), "id long", "Update", "None")
         .writeStream.format("noop").option("checkpointLocation", os.environ["CHECKPOINT"]).trigger(availableNow=True).start())
query.awaitTermination(240)
print(json.dumps({"pid": os.getpid()}))
spark.stop()
"""


def test_a_jobs_daemon_and_pre_init_process_are_forks_of_the_jobs_own_server(tmp_path):
    """A job's driver process forks its server before it starts Spark (streamstate_jobs.runner):
    its JVM's daemon is that server's child, with the launcher's collector and Spark's hashing,
    the jobs imported, and the streaming query's driver-side pre-init process is forked by it
    too (the processor's init runs there, as in the state stage's workers)."""
    inits = tmp_path / "inits.txt"
    env = {**os.environ, "PYTHONHASHSEED": "0", "INITS": str(inits), "SOURCE": str(tmp_path / "source"),
           "CHECKPOINT": str(tmp_path / "checkpoint"), "STREAMSTATE_SPARK_JARS": binaries.spark_jars_setting()}
    env.pop("STREAMSTATE_FORK_SERVER", None)
    done = subprocess.run([sys.executable, "-c", _JOB_DRIVER], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    seen, driver = (json.loads(line) for line in done.stdout.split("\n") if line.startswith("{"))
    assert seen["collector"] == "BetweenTasksCollector" and seen["seeded"] and seen["jobs"], seen
    server = seen["server"]
    assert seen["driver"] == driver["pid"] != server, "the daemon's parent is not a child of the driver process"
    parents = {int(line.split()[1]) for line in inits.read_text().splitlines()}
    assert server in parents, f"no init ran in a child of the server {server}: {parents}"
