"""The Spark Connect session of the tests/connect/ tests: ONE local Connect server (a JVM
started from the pyspark wheel in a subprocess, tests/connect/server.py) for the whole test
session, started by the first test that asks and stopped by its PID at the end."""

from __future__ import annotations

import os

import pytest

from streamstate_pipeline import binaries
from streamstate_stack.launcher import free_port, pid_alive
from tests.connect.server import ConnectServer, connect_session

CONNECT_MODE = "SPARK_CONNECT_MODE_ENABLED"


@pytest.fixture(scope="session")
def connect_server(spark_scratch_under_pytest, tmp_path_factory) -> ConnectServer:
    """The local Connect server (local[2], RocksDB state store, Spark's Kafka connector)."""
    from tests.conftest import _started_pids

    log = tmp_path_factory.mktemp("connect-server") / "server.log"
    server = ConnectServer(free_port(), binaries.spark_jars(install=False), log)
    try:
        server.start()
    except BaseException:
        server.stop()
        raise
    yield server
    if server.pid is not None:
        _started_pids.append(server.pid)  # checked gone after the session (pytest_sessionfinish)
    server.stop()
    assert server.pid is None or not pid_alive(server.pid), f"the Connect server (PID {server.pid}) is still running"


@pytest.fixture(scope="session")
def connect_spark(connect_server):
    """A Spark Connect client session of the tests' server."""
    session = connect_session(connect_server.url)
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def connect_mode():
    """Connect mode for this process while a test of this folder runs, as
    ``SparkSession.builder.remote(...).getOrCreate()`` sets it in a client's process: PySpark's
    ``pyspark.sql.functions`` (the library's ``F.col``, ``F.lit``...) build Connect columns
    only then. Per test, not for the session: the other tests' classic session needs classic ones."""
    before = os.environ.get(CONNECT_MODE)
    os.environ[CONNECT_MODE] = "1"
    yield
    if before is None:
        os.environ.pop(CONNECT_MODE, None)
    else:
        os.environ[CONNECT_MODE] = before
