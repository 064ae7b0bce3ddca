"""Shared fixtures: one embedded broker and one SparkSession for the whole test session."""

from __future__ import annotations

import itertools
import os
import sys
import uuid

import pytest

from streamstate.kinesis import ensure_local_credentials
from streamstate.settings import Settings
from streamstate.stack import EmbeddedStack, pid_alive
from streamstate.topics import TopicSpec, create_topics

_started_pids: list[int] = []
# Placeholder AWS credentials for the local Kinesis server, set before Spark's JVM starts so its
# Python workers inherit them (real ones, when configured, are left alone).
ensure_local_credentials()


@pytest.fixture(scope="session")
def stack(tmp_path_factory) -> EmbeddedStack:
    """The embedded stack with its broker running and the pipeline topics created."""
    workdir = tmp_path_factory.mktemp("stack")
    # Two state partitions: one task per core here; more only adds per-task overhead to every batch.
    # The API's view store in the session's directory too: never the checkout's var/ (a running `make run` holds it).
    settings = Settings(checkpoint_root=str(workdir / "checkpoints"), shuffle_partitions=2, api_store_path=workdir / "api-store")
    embedded = EmbeddedStack(settings=settings, workdir=workdir, quiet=True)
    embedded.start_broker()
    yield embedded
    _started_pids.extend(embedded.pids())
    embedded.stop()


@pytest.fixture(scope="session")
def bootstrap(stack) -> str:
    return stack.settings.bootstrap_servers


@pytest.fixture(scope="session")
def settings(stack) -> Settings:
    return stack.settings


_counter = itertools.count()


@pytest.fixture
def new_topic(bootstrap):
    """Factory for a fresh, uniquely named topic: new_topic(partitions=4) -> name."""

    def make(partitions: int = 1, prefix: str = "t", config: dict[str, str] | None = None) -> str:
        name = f"{prefix}-{next(_counter)}-{uuid.uuid4().hex[:6]}"
        create_topics(bootstrap, [TopicSpec(name, partitions, config or {})])
        return name

    return make


@pytest.fixture(scope="session")
def kinesis_settings(stack) -> Settings:
    """The session's settings with the local Kinesis server started (once, on first use)."""
    if stack.settings.kinesis_endpoint_url is None:
        stack.start_kinesis()
    return stack.settings


@pytest.fixture
def new_stream(kinesis_settings):
    """Factory for a fresh, uniquely named Kinesis stream: new_stream(shards=2) -> name."""
    from streamstate.kinesis import create_stream, kinesis_client

    client = kinesis_client(kinesis_settings.kinesis_endpoint_url, kinesis_settings.kinesis_region, max_attempts=5)

    def make(shards: int = 1, prefix: str = "s") -> str:
        name = f"{prefix}-{next(_counter)}-{uuid.uuid4().hex[:6]}"
        create_stream(client, name, shards)
        return name

    return make


@pytest.fixture(scope="session")
def spark(stack, tmp_path_factory):
    """One SparkSession (local[2], RocksDB state store) for every Spark test."""
    from streamstate.jobs.spark import build_spark

    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = build_spark(stack.settings, app_name="streamstate-tests", spark__ui__enabled="false")
    yield session
    session.stop()


def pytest_sessionfinish(session, exitstatus):
    """The launcher must leave no process behind: checked by PID after the session."""
    leftovers = [pid for pid in _started_pids if pid_alive(pid)]
    if leftovers:
        print(f"\nERROR: processes left running after the test session: {leftovers}", file=sys.stderr)
        session.exitstatus = 1
