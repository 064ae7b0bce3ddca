"""Shared fixtures: one broker, one object store and one SparkSession for the whole test session.

The broker (Apache Kafka, KRaft, from the jars ``make deps`` installs) starts with the first
test that needs one. MinIO starts only when a test of the S3 checkpoint path runs
(``production_stack``, on the same broker), once per session. The few tests whose subject
is where checkpoints live take ``profile_stack`` (parametrized ``embedded`` / ``production``)
and the ``profile_*`` fixtures built on it; the rest run once, on local checkpoints.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import sys
import uuid

import pytest

# gRPC's fork handlers (on by default in grpcio) make a forked child abort now and then while
# the Spark Connect client of tests/connect/ is alive in this process: 12 of 1,000
# Popen(preexec_fn=...) children died of SIGABRT, none with the handlers off. The children
# that fork here (PySpark's JVM gateway, the launcher's servers) exec at once and use no gRPC.
# Read once, when grpc is imported: so first thing, before anything imports it.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

from streamstate import fork_server
from streamstate_pipeline.kinesis import ensure_local_credentials
from streamstate_stack.profiles import EMBEDDED, PRODUCTION
from streamstate_pipeline.settings import Settings
from streamstate_stack.launcher import EmbeddedStack, free_port, pid_alive
from streamstate_pipeline.kafka_clients import KafkaConnection
from streamstate_pipeline.topics import TopicSpec, create_topics

_started_pids: list[int] = []
# Placeholder AWS credentials for the local Kinesis server, set before Spark's JVM starts so its
# Python workers inherit them (real ones, when configured, are left alone).
ensure_local_credentials()

PROFILE_NAMES = (EMBEDDED.name, PRODUCTION.name)
BUCKET = "streamstate"


def _session_settings(**overrides) -> Settings:
    # Two state partitions: one task per core here; more only adds per-task overhead to every batch.
    # Ports of the session's own: `make test` runs two sessions side by side (pytest-xdist).
    ports = {name: free_port() for name in ("api_port", "sessions_metrics_port", "anomalies_metrics_port", "prometheus_port")}
    return Settings(shuffle_partitions=2, **{**ports, **overrides})


@pytest.fixture(scope="session")
def stack(tmp_path_factory) -> EmbeddedStack:
    """The embedded stack with its broker running and the pipeline topics created."""
    workdir = tmp_path_factory.mktemp("stack")
    # The API's view store in the session's directory too: never the checkout's var/ (a running `make run` holds it).
    embedded = EmbeddedStack(
        settings=_session_settings(checkpoint_root=str(workdir / "checkpoints"), api_store_path=workdir / "api-store"),
        workdir=workdir,
        quiet=True,
        profile=EMBEDDED,
    )
    embedded.start_broker()
    yield embedded
    _started_pids.extend(embedded.pids())
    embedded.stop()


@pytest.fixture(scope="session")
def production_stack(stack, tmp_path_factory) -> EmbeddedStack:
    """The production profile for the whole session: the session's broker, and MinIO with the
    checkpoint bucket (s3a:// checkpoints). Started by the first test that asks."""
    workdir = tmp_path_factory.mktemp("production")
    production = EmbeddedStack(
        settings=stack.settings.model_copy(update={"checkpoint_root": f"s3a://{BUCKET}/tests", "api_store_path": workdir / "api-store"}),
        workdir=workdir,
        quiet=True,
        profile=PRODUCTION,
    )
    try:
        production.start_object_store(BUCKET)
    except BaseException:
        production.stop()
        raise
    yield production
    _started_pids.extend(production.pids())
    production.stop()


@pytest.fixture(params=PROFILE_NAMES)
def profile_stack(request) -> EmbeddedStack:
    """The session stack of each profile in turn (a test taking this runs once per profile)."""
    return request.getfixturevalue("stack" if request.param == EMBEDDED.name else "production_stack")


def checkpoint_root_for(stack: EmbeddedStack, tmp_path) -> str:
    """A checkpoint root of one test's own, where the stack's profile keeps checkpoints."""
    if stack.profile.s3_checkpoints:
        return f"s3a://{BUCKET}/tests/{tmp_path.name}-{uuid.uuid4().hex[:8]}"
    return str(tmp_path / "checkpoints")


@pytest.fixture
def profile_settings(profile_stack, tmp_path) -> Settings:
    """The profile's settings (S3 or not) with this test's own checkpoint root."""
    return profile_stack.settings.model_copy(update={"checkpoint_root": checkpoint_root_for(profile_stack, tmp_path)})


@pytest.fixture
def profile_topic(profile_stack):
    """new_topic on the profile's broker."""
    return _topic_factory(profile_stack.settings.bootstrap_servers)


def reaching_object_store(spark, stack: EmbeddedStack):
    """``spark``, able to reach ``stack``'s object store (S3A) when it has one."""
    from streamstate_jobs.spark import configure_s3a

    if stack.s3_credentials is not None:
        configure_s3a(spark, stack.settings, stack.s3_credentials.env())
    return spark


@pytest.fixture
def profile_spark(spark, profile_stack):
    """The shared SparkSession, able to reach the profile's object store (S3A) when it has one."""
    return reaching_object_store(spark, profile_stack)


@pytest.fixture(scope="session")
def bootstrap(stack) -> str:
    return stack.settings.bootstrap_servers


@pytest.fixture(scope="session")
def settings(stack) -> Settings:
    return stack.settings


_counter = itertools.count()


def _topic_factory(bootstrap: str):
    def make(partitions: int = 1, prefix: str = "t", config: dict[str, str] | None = None) -> str:
        name = f"{prefix}-{next(_counter)}-{uuid.uuid4().hex[:6]}"
        create_topics(KafkaConnection(bootstrap), [TopicSpec(name, partitions, config or {})])
        return name

    return make


@pytest.fixture
def new_topic(bootstrap):
    """Factory for a fresh, uniquely named topic: new_topic(partitions=4) -> name."""
    return _topic_factory(bootstrap)


@pytest.fixture(scope="session")
def kinesis_settings(stack) -> Settings:
    """The session's settings with the local Kinesis server started (once, on first use)."""
    if stack.settings.kinesis_endpoint_url is None:
        stack.start_kinesis()
    return stack.settings


@pytest.fixture
def new_stream(kinesis_settings):
    """Factory for a fresh, uniquely named Kinesis stream: new_stream(shards=2) -> name."""
    from streamstate_pipeline.kinesis import create_stream, kinesis_client

    client = kinesis_client(kinesis_settings.kinesis_endpoint_url, kinesis_settings.kinesis_region, max_attempts=5)

    def make(shards: int = 1, prefix: str = "s") -> str:
        name = f"{prefix}-{next(_counter)}-{uuid.uuid4().hex[:6]}"
        create_stream(client, name, shards)
        return name

    return make


@pytest.fixture(scope="session", autouse=True)
def spark_scratch_under_pytest(tmp_path_factory):
    """Spark's scratch directories (shuffle files, RocksDB's working copies of the state) under
    this session's temporary directory, for every Spark JVM the tests start, in-process or as
    a job process (they inherit the environment). A JVM removes its ``spark-*`` directory when
    it exits, but the crash tests kill theirs, and each full run left about 75 of them (up to
    40 MB each) in /tmp; here pytest's own retention of its last three runs removes them."""
    os.environ["SPARK_LOCAL_DIRS"] = str(tmp_path_factory.mktemp("spark-scratch"))


@pytest.fixture(scope="session")
def spark(stack, tmp_path_factory):
    """One SparkSession (local[2], RocksDB state store) for every Spark test, with Spark's
    Kafka connector and S3A jars (the stack's settings carry them) and the checkpoint classes
    of spark-jobs/jvm/ (installed here if `make test` has not)."""
    from streamstate_jobs.spark import build_spark
    from streamstate_pipeline import binaries

    with contextlib.suppress(binaries.DependencyMissing):  # then the tests of spark-jobs/jvm/'s classes fail, and only they
        binaries.checkpoint_io_jar()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    settings = stack.settings
    # The tests start many queries: transformWithState's pre-init processes forked (streamstate.fork_server).
    session = build_spark(settings, app_name="streamstate-tests", spark__ui__enabled="false",
                          **{f"spark.executorEnv.{fork_server.VARIABLE}": "on"})
    yield session
    session.stop()


def pytest_sessionfinish(session, exitstatus):
    """The launcher must leave no process behind: checked by PID after the session."""
    leftovers = [pid for pid in _started_pids if pid_alive(pid)]
    if leftovers:
        print(f"\nERROR: processes left running after the test session: {leftovers}", file=sys.stderr)
        session.exitstatus = 1


# The compose stack (nine containers) and the crash tests (a job JVM started again at every
# kill) are the heaviest tests. Side by side on 2 cores they starved the compose drivers'
# Python workers past Spark's fixed 10 s connect-back window, and the job ran no batch. The
# crash tests beside each other are fine (they were so in every run).
@contextlib.contextmanager
def _heavy_turn(tmp_path_factory, mode: int):
    path = tmp_path_factory.getbasetemp().parent / "heavy-stack.lock"  # shared by the xdist workers
    with open(path, "w") as turn:
        try:
            fcntl.flock(turn, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"\nwaiting for another session's heavy test to end ({path})", file=sys.stderr, flush=True)
            fcntl.flock(turn, mode)
        yield


@pytest.fixture(scope="module")
def heavy_stack_alone(tmp_path_factory):
    """The compose stack's turn: no crash test runs in any of the run's sessions meanwhile
    (held from the module's first set-up to its last teardown)."""
    with _heavy_turn(tmp_path_factory, fcntl.LOCK_EX):
        yield


@pytest.fixture(scope="module")
def heavy_beside_no_stack(tmp_path_factory):
    """A crash test's turn: never while the compose stack runs; beside another crash test, yes."""
    with _heavy_turn(tmp_path_factory, fcntl.LOCK_SH):
        yield


def pytest_collection_modifyitems(config, items):
    """The compose stack first and the crash tests last. pytest-xdist's work stealing hands out
    the collection in equal parts, one a session, and steals from the end of a session's queue:
    the stack runs at the start of the first session while the others run lighter tests, and the
    crash tests come at the end of the last one's queue (or a stealer's), normally after the
    stack is down."""
    items.sort(key=lambda item: 0 if "heavy_stack_alone" in item.fixturenames else 2 if "heavy_beside_no_stack" in item.fixturenames else 1)
