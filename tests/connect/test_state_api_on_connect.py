"""The state API on Spark Connect: the same tests as on the classic session, over the tests'
local Connect server (tests/connect/conftest.py), compared with the same plain-Python references.

* Spark's own DStream suites (library/tests/dstream_suites.py), through the driver the classic test
  runs (``run_cases_on_a_streaming_query``): mapWithState with initial state, removal and a
  processing-time timeout; updateStateByKey with initial state and removal.
* The seed examples: running word count (map_with_state with initial state, and
  update_state_by_key), sessions (update_state_by_key in event time with a timeout) and the
  five window operations (examples/windowed.py), each through the classic test's own body
  with the Connect session.
* The StateResult views routed in a foreachBatch function, which on Connect runs on the server.
* A session without the RocksDB state store refused with StateStoreUnsupported.
* Shipping the state functions: a client module's functions pickled by value work; a module
  shipped with ``addArtifacts(pyfile=True)`` does not reach the workers on Spark 4.2 (a strict xfail).

A foreachBatch function runs on the server there, so the tests' rows come back through files
(tests/state_queries.py's ``batch_sink``); the server and the state functions' modules share
this checkout (PYTHONPATH), as a library installed on the server would be.
"""

from __future__ import annotations

import importlib
import os
import pickle
import types
import uuid
import zipfile
from collections import Counter

import pytest
from pyspark import cloudpickle
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

from examples import robust, windowed
from streamstate.state import StateSpec, StateStoreUnsupported, map_with_state, update_state_by_key
from streamstate.state.operators import PROVIDER_SETTING
from streamstate.state.tester import run_map_with_state
from tests.connect.server import connect_session
from library.tests.dstream_suites import run_cases_on_a_streaming_query, running_sum
from tests.integration import test_state_seeds as state_seeds
from tests.integration import test_window_seeds as window_seeds
from tests.state_queries import RowCollector, is_connect

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"


def test_the_session_is_spark_connect(connect_spark):
    assert is_connect(connect_spark.range(1))
    assert connect_spark.conf.get(PROVIDER_SETTING) == "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def test_spark_suite_cases_on_connect(connect_spark, tmp_path):
    run_cases_on_a_streaming_query(connect_spark, tmp_path)


def test_running_word_count_with_initial_state_on_connect(connect_spark, settings, bootstrap, new_topic, tmp_path):
    state_seeds.test_running_word_count_with_initial_state(connect_spark, settings, bootstrap, new_topic, tmp_path)


def test_running_word_count_with_update_state_by_key_on_connect(connect_spark, settings, bootstrap, new_topic, tmp_path):
    state_seeds.test_running_word_count_with_update_state_by_key(connect_spark, settings, bootstrap, new_topic, tmp_path)


def test_session_tracking_on_connect(connect_spark, settings, bootstrap, new_topic, tmp_path):
    state_seeds.test_session_tracking_logout_and_inactivity(connect_spark, settings, bootstrap, new_topic, tmp_path)


def test_the_seed_window_examples_on_connect(connect_spark, settings, bootstrap, new_topic, tmp_path):
    window_seeds.test_the_seed_window_examples_on_a_streaming_query(connect_spark, settings, bootstrap, new_topic, tmp_path)


def test_state_result_views_route_each_batch_on_the_server(connect_spark, tmp_path):
    """The documented way to use a StateResult: ONE query on ``all``, each batch routed with
    ``outputs_of``, ``snapshots_of`` and ``dead_letters_of`` in foreachBatch. On Connect that
    function (and the StateResult it holds) is pickled to the server and runs there."""
    source, out = tmp_path / "in", tmp_path / "views"
    source.mkdir()
    out.mkdir()
    batch = [{"key": "a", "number": "1"}, {"key": "a", "number": "2"}, {"key": "b", "number": "10"}, {"key": "a", "number": "x"}]
    (source / "0.json").write_text("".join(f'{{"key": "{r["key"]}", "number": "{r["number"]}"}}\n' for r in batch))
    numbers = connect_spark.readStream.schema(robust.SCHEMA).json(str(source))
    # The initial state as a DataFrame of the Connect session, and the partition count checked
    # against the session's conf (both read over Connect).
    initial = connect_spark.createDataFrame([("b", 5)], "key STRING, state LONG")
    spec = StateSpec.function(robust.strict_sum).initial_state(initial).num_partitions(2)
    result = map_with_state(numbers, key="key", spec=spec, value="number")
    folder = str(out)

    def route(rows, batch_id: int) -> None:
        views = {
            "outputs": [tuple(r) for r in result.outputs_of(rows).collect()],
            "snapshots": [tuple(r) for r in result.snapshots_of(rows).collect()],
            "dead_letters": [tuple(r) for r in result.dead_letters_of(rows).collect()],
        }
        with open(os.path.join(folder, f"{batch_id}.pickle"), "wb") as file:
            pickle.dump(views, file)

    query = result.all.writeStream.foreachBatch(route).option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start()
    assert query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    views = pickle.loads((out / "0.pickle").read_bytes())

    expected = run_map_with_state(StateSpec.function(robust.strict_sum).initial_state([("b", 5)]), [[(r["key"], r["number"]) for r in batch]])
    assert Counter(views["outputs"]) == Counter((key, payload) for kind, key, payload, *_ in expected if kind == "output")
    assert Counter(views["snapshots"]) == Counter((key, payload) for kind, key, payload, *_ in expected if kind == "snapshot")
    assert views["dead_letters"] == [("a", "ValueError: invalid literal for int() with base 10: 'x'", '"x"')]
    assert sorted(views["snapshots"]) == [("a", "3"), ("b", "15")]


def test_a_partition_count_other_than_the_sessions_is_refused_on_connect(connect_spark, tmp_path):
    (tmp_path / "in").mkdir()
    words = connect_spark.readStream.schema("word STRING").json(str(tmp_path / "in"))
    with pytest.raises(ValueError, match=r"num_partitions\(3\) differs from spark.sql.shuffle.partitions=2"):
        map_with_state(words, key="word", spec=StateSpec.function(running_sum).num_partitions(3))


def test_a_session_without_rocksdb_is_refused_on_connect(connect_server, tmp_path):
    """StateStoreUnsupported, naming the setting, when each operator is defined on a Connect
    session whose store is not RocksDB (the session's conf is read over Connect)."""
    spark = connect_session(connect_server.url)  # a session of its own: the shared one keeps RocksDB
    try:
        spark.conf.set(PROVIDER_SETTING, HDFS_PROVIDER)
        (tmp_path / "in").mkdir()
        words = spark.readStream.schema("word STRING, ts LONG").json(str(tmp_path / "in")).select(
            "word", F.lit(1).alias("one"), F.timestamp_millis("ts").alias("event_time")
        )
        attempts = {
            "map_with_state": lambda: map_with_state(words, key="word", spec=StateSpec.function(running_sum), value="one"),
            "update_state_by_key": lambda: update_state_by_key(words, key="word", func=lambda values, state: sum(values), value="one"),
            "window": lambda: windowed.windowed_word_counts(words.withColumnRenamed("one", "count")),
        }
        for name, attempt in attempts.items():
            with pytest.raises(StateStoreUnsupported, match=f"{PROVIDER_SETTING}=.*RocksDBStateStoreProvider") as refused:
                attempt()
            assert HDFS_PROVIDER in str(refused.value), name
    finally:
        spark.stop()


SHIPPED_MODULE = '''
def running_total(key, value, state):
    total = (value or 0) + state.get_option(0)
    state.update(total)
    return (key, total, "shipped")
'''


def client_only_module(tmp_path, monkeypatch) -> types.ModuleType:
    """A module of state functions this process imports (from a zip) and the server's Python has not got."""
    name = f"shipped_{uuid.uuid4().hex[:10]}"
    archive = tmp_path / f"{name}.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr(f"{name}/__init__.py", SHIPPED_MODULE)
    monkeypatch.syspath_prepend(str(archive))
    return importlib.import_module(name)


def run_total(connect_spark, tmp_path, func) -> list[tuple]:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "0.json").write_text('{"word": "a"}\n{"word": "b"}\n{"word": "a"}\n')
    words = connect_spark.readStream.schema("word STRING").json(str(tmp_path / "in")).select("word", F.lit(1).alias("one"))
    result = map_with_state(words, key="word", spec=StateSpec.function(func), value="one")
    rows = RowCollector(result, str(tmp_path / "checkpoint"), available_now=True).await_done()
    return sorted((key, payload) for kind, key, payload, *_ in rows if kind == "output")


SHIPPED_OUTPUTS = [("a", '["a",1,"shipped"]'), ("a", '["a",2,"shipped"]'), ("b", '["b",1,"shipped"]')]


def test_a_state_function_of_a_client_module_pickled_by_value(connect_spark, tmp_path, monkeypatch):
    """A function of a module only the client has travels by value once its module is
    registered so (``cloudpickle.register_pickle_by_value``): README "On Spark Connect"."""
    module = client_only_module(tmp_path, monkeypatch)
    cloudpickle.register_pickle_by_value(module)
    try:
        assert run_total(connect_spark, tmp_path, module.running_total) == SHIPPED_OUTPUTS
    finally:
        cloudpickle.unregister_pickle_by_value(module)


@pytest.mark.xfail(strict=True, raises=StreamingQueryException, reason=(
    "Spark 4.2: a session's addArtifacts(pyfile=True) does not reach transformWithState's Python workers "
    "(ModuleNotFoundError; the same for a plain transformWithStateInPandas processor from a shipped module)"))
def test_a_state_function_shipped_with_add_artifacts(connect_spark, tmp_path, monkeypatch):
    """A function of a shipped module travels by reference, so the workers must import it:
    they do not (measured), so README "On Spark Connect" says to install the modules on the server."""
    module = client_only_module(tmp_path, monkeypatch)
    connect_spark.addArtifacts(str(tmp_path / f"{module.__name__}.zip"), pyfile=True)
    assert run_total(connect_spark, tmp_path, module.running_total) == SHIPPED_OUTPUTS
