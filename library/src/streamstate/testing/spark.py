"""A SparkSession for tests of jobs built on the state API.

Local, two cores and two shuffle partitions (a test's data is small: more partitions only add
tasks), Python workers started by ``streamstate-spark-python`` (:mod:`streamstate.spark_python`), the
driver's one-off ones forked by its server (:mod:`streamstate.fork_server`),
the RocksDB state store the state API needs (Spark refuses transformWithState on its default
store), no UI, loopback only, and Spark's Kafka connector: the jars named by
``$STREAMSTATE_TEST_SPARK_JARS`` (comma-separated paths, for machines that reach no Maven
repository), else the connector's Maven coordinates for the installed pyspark, which Spark
resolves on first use.
"""

from __future__ import annotations

import os
import sys

import pyspark
from pyspark.sql import SparkSession

from streamstate import fork_server
from streamstate.spark_python import worker_python

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
JARS_VARIABLE = "STREAMSTATE_TEST_SPARK_JARS"


def kafka_connector_package() -> str:
    """Spark's Kafka connector at the installed pyspark's version (Scala 2.13, as Spark 4 is)."""
    return f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"


def spark_session_for_tests(app_name: str = "streamstate-tests", **conf: str) -> SparkSession:
    """The session; ``conf`` adds or overrides settings (``{"spark.sql.shuffle.partitions": "4"}``)."""
    # The Python workers must be this interpreter (a system python3 lacks the test's packages),
    # started through the library's launcher: PySpark's daemon collected each worker's whole heap
    # after every task (80-90 ms of CPU a task), and tests run many small batches.
    os.environ.setdefault("PYSPARK_PYTHON", worker_python(sys.executable))
    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        # A test starts many queries: transformWithState's pre-init processes forked, not started anew.
        .config(f"spark.executorEnv.{fork_server.VARIABLE}", "on")
    )
    jars = os.environ.get(JARS_VARIABLE)
    builder = builder.config("spark.jars", jars) if jars else builder.config("spark.jars.packages", kafka_connector_package())
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
