"""docker-compose.yml against the native production profile, offline.

The production-profile tests (end-to-end, crash, cluster, dashboards, broker restart) run
Apache Kafka, MinIO and the jobs natively; compose runs the same parts as containers. Both
sides are derived from code here (the compose file as written, the launcher's own
configuration builders), so a change to either side fails until the other follows: the
services, the releases, the broker settings, the topics, the jobs' and the API's
environment, and the ports. Where the two differ by design (addresses inside a container
network, a standalone cluster instead of ``local[2]``), the difference is declared below
with its reason.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from streamstate_pipeline import binaries
from streamstate_stack.servers import BROKER_SETTINGS, KAFKA_HEAP, KafkaBroker, S3Credentials, heap_options
from streamstate_stack.profiles import PRODUCTION
from streamstate_pipeline.settings import REPO_ROOT, Settings
from streamstate_stack.launcher import EmbeddedStack, object_store_settings
from tests.compose.compose_files import DOCKERFILES, VARIABLE, Dockerfile, compose, compose_defaults, image_tag

SERVICES = compose()["services"]
VERSIONS = binaries.versions()

# Each compose service and the launcher method (EmbeddedStack, or the tests' StandaloneCluster)
# that runs its part natively; None: compose only, for the reason given.
NATIVE_COUNTERPART = {
    "secrets": None,  # natively the object store's credentials are made per data directory and the API has no token
    "kafka": "start_broker",
    "topics": "start_broker",  # creates the topics of infra/kafka/topics.toml once the broker answers
    "minio": "start_object_store",
    "minio-init": "start_object_store",  # creates the bucket
    "spark-master": "StandaloneCluster",  # tests/cluster: the jobs on a real standalone cluster
    "spark-worker-1": "StandaloneCluster",
    "spark-worker-2": "StandaloneCluster",
    "sessions-job": "start_job",
    "anomalies-job": "start_job",
    "api": "start_api",
    "producers": "start_producers",
    "prometheus": "start_prometheus",
    "grafana": None,  # no Grafana package for these machines; every panel's query is proven against Prometheus
}

# Job variables whose values differ by design, and why.
JOB_DIFFERENCES = {
    "STREAMSTATE_BOOTSTRAP_SERVERS": "the broker's address: kafka:9092 in the compose network, a loopback port natively",
    "STREAMSTATE_S3_ENDPOINT": "MinIO's address: minio:9000 in the compose network, a loopback port natively",
    "STREAMSTATE_SPARK_MASTER": "compose runs a standalone cluster; natively local[2] (tests/cluster runs a standalone one)",
    "STREAMSTATE_SPARK_DRIVER_HOST": "executors in other containers reach the driver by its container name",
    "STREAMSTATE_CORES_MAX": "sizing on the compose cluster, where two jobs share two workers",
    "STREAMSTATE_EXECUTOR_CORES": "sizing on the compose cluster",
    "JAVA_TOOL_OPTIONS": "compose's JVM_OPTIONS default; natively make run's RUN_JVM_OPTIONS, the same (test_compose_offline)",
    "STREAMSTATE_METRICS_HOST": "Prometheus scrapes the jobs across the compose network (ports not published); natively on loopback",
    "AWS_ACCESS_KEY_ID": "the object store's user: in compose the jobs' own, limited to the checkpoint bucket; natively the root user made per data directory",
    "AWS_SECRET_ACCESS_KEY_FILE": "its password: a generated secret's file in compose, made per data directory natively",
}
API_DIFFERENCES = {
    "STREAMSTATE_BOOTSTRAP_SERVERS": JOB_DIFFERENCES["STREAMSTATE_BOOTSTRAP_SERVERS"],
    "STREAMSTATE_API_HOST": "in a container the API listens on every interface; compose publishes it on 127.0.0.1 only",
    "STREAMSTATE_API_TOKEN_FILE": "a generated secret's file in compose; off natively, where every port is on loopback",
}
# Kafka settings that are addresses: the container network and the host listener differ by design.
KAFKA_ADDRESSING = {
    "KAFKA_LISTENERS", "KAFKA_ADVERTISED_LISTENERS", "KAFKA_CONTROLLER_QUORUM_VOTERS",
    "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", "KAFKA_LOG_DIRS",
}


def interpolate(value) -> str:
    """A compose value as compose sees it without a .env (every variable at its default)."""
    defaults = compose_defaults()
    return VARIABLE.sub(lambda m: defaults.get(m[1], ""), str(value))


def environment(service: str) -> dict[str, str]:
    return {key: interpolate(value) for key, value in (SERVICES[service].get("environment") or {}).items()}


def native_production_env(tmp_path: Path) -> dict[str, str]:
    """The environment the production profile gives its processes (jobs, API), without starting a server."""
    settings = object_store_settings(Settings(), "http://127.0.0.1:9000", "streamstate")
    stack = EmbeddedStack(settings=settings, workdir=tmp_path, quiet=True, profile=PRODUCTION)
    stack.s3_credentials = S3Credentials.for_home(tmp_path / "minio")
    return stack.env()


def test_every_compose_service_runs_natively_or_says_why_not():
    from infra.spark.standalone import StandaloneCluster

    assert set(SERVICES) == set(NATIVE_COUNTERPART), "a compose service was added or removed: declare its native counterpart"
    for service, counterpart in NATIVE_COUNTERPART.items():
        if counterpart == "StandaloneCluster":
            assert StandaloneCluster
        elif counterpart is not None:
            assert callable(getattr(EmbeddedStack, counterpart, None)), f"{service}: EmbeddedStack.{counterpart} is gone"


def test_compose_runs_the_releases_of_infra_versions_env():
    images = {name: service["image"] for name, service in SERVICES.items() if "image" in service}
    assert image_tag(images["kafka"]) == VERSIONS["KAFKA_VERSION"]
    assert images["minio"] == f"quay.io/minio/minio:{VERSIONS['MINIO_RELEASE']}"
    assert images["minio-init"] == f"quay.io/minio/mc:{VERSIONS['MC_RELEASE']}"
    assert image_tag(images["prometheus"]) == f"v{VERSIONS['PROMETHEUS_VERSION']}"
    assert image_tag(images["grafana"]) == VERSIONS["GRAFANA_VERSION"]
    for service in SERVICES.values():
        if "build" in service:
            assert interpolate(service["build"]["args"]["PYTHON_IMAGE"]) == VERSIONS["PYTHON_IMAGE"]
    for dockerfile in DOCKERFILES:
        assert Dockerfile.read(dockerfile).args["PYTHON_IMAGE"] == VERSIONS["PYTHON_IMAGE"], dockerfile


def test_the_native_install_is_those_releases():
    # make test installs these (make deps); ensure() only checks the stamp then.
    kafka_jars = binaries.ensure("kafka") / "libs"
    assert (kafka_jars / f"kafka_2.13-{VERSIONS['KAFKA_VERSION']}.jar").is_file(), sorted(p.name for p in kafka_jars.iterdir())[:5]
    minio = subprocess.run([str(binaries.minio_binary()), "--version"], capture_output=True, text=True, timeout=30)
    assert f"minio version {VERSIONS['MINIO_RELEASE']} " in minio.stdout, minio.stdout
    jars = {p.name for p in binaries.spark_jars()}
    assert f"spark-sql-kafka-0-10_{VERSIONS['SCALA_BINARY_VERSION']}-{VERSIONS['SPARK_VERSION']}.jar" in jars
    assert any(name.startswith("hadoop-aws-") for name in jars)


def test_the_native_prometheus_is_the_compose_release():
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is not installed: `make test` installs it (infra/install-test-binaries.sh)")
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30)
    version = re.search(r"prometheus, version (\d+\.\d+\.\d+)", out.stdout + out.stderr)
    assert version and version[1] == VERSIONS["PROMETHEUS_VERSION"], out.stdout + out.stderr


def test_the_broker_settings_are_the_same(tmp_path):
    compose_kafka = environment("kafka")
    native = dict(
        line.split("=", 1) for line in KafkaBroker(tmp_path, 9092, 9093).properties().splitlines() if line
    )
    compared = {key: value for key, value in compose_kafka.items() if key.startswith("KAFKA_") and key not in KAFKA_ADDRESSING}
    assert compared.pop("KAFKA_HEAP_OPTS") == " ".join(heap_options(KAFKA_HEAP))
    compared.pop("KAFKA_JVM_PERFORMANCE_OPTS")  # the JVM's options, not a broker setting: test_compose_offline
    as_properties = {key.removeprefix("KAFKA_").lower().replace("_", "."): value for key, value in compared.items()}
    for key, value in as_properties.items():
        assert native.get(key) == value, f"{key}: compose {value!r}, native {native.get(key)!r}"
    # And the other way: every setting the native broker adds beyond addresses is in compose.
    for key in BROKER_SETTINGS:
        assert key in as_properties, f"native broker setting {key} is not in compose's kafka environment"
    # The same listener names, the controller on its own listener.
    for name in ("PLAINTEXT", "CONTROLLER"):
        assert f"{name}:PLAINTEXT" in compose_kafka["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"]
        assert f"{name}:PLAINTEXT" in native["listener.security.protocol.map"]
    assert compose_kafka["KAFKA_CONTROLLER_QUORUM_VOTERS"].startswith("1@")


def test_the_topics_are_the_same_file():
    topics = SERVICES["topics"]
    assert topics["command"][:3] == ["streamstate", "topics", "create"]
    image_env = " ".join(rest for key, rest in Dockerfile.read(REPO_ROOT / "producers" / "Dockerfile").instructions if key == "ENV")
    assert "STREAMSTATE_TOPICS_FILE=/app/infra/kafka/topics.toml" in image_env
    assert Settings().topics_file == REPO_ROOT / "infra" / "kafka" / "topics.toml"
    # No service renames a topic or changes the partition counts: everyone uses the file's.
    for name in SERVICES:
        overrides = [key for key in environment(name) if key.startswith("STREAMSTATE_TOPIC") or key == "STREAMSTATE_PARTITIONS"]
        assert not overrides, f"{name} overrides {overrides}"


@pytest.mark.parametrize("job", ["sessions-job", "anomalies-job"])
def test_the_jobs_environment_is_the_production_profiles(job, tmp_path):
    native = native_production_env(tmp_path)
    compose_env = environment(job)
    for key, value in compose_env.items():
        if key in JOB_DIFFERENCES:
            # A *_FILE variable is read into its variable by the image's entry point (file-env.sh).
            assert key.removesuffix("_FILE") in native or key in ("STREAMSTATE_CORES_MAX", "STREAMSTATE_EXECUTOR_CORES", "JAVA_TOOL_OPTIONS"), key
            continue
        assert native.get(key) == value, f"{key}: compose {value!r}, native production profile {native.get(key)!r}"
    # What makes it the production path is set on both sides.
    assert compose_env["STREAMSTATE_CHECKPOINT_ROOT"].startswith("s3a://")
    assert compose_env["STREAMSTATE_S3_ENDPOINT"] and native["STREAMSTATE_S3_ENDPOINT"]
    assert compose_env["AWS_ACCESS_KEY_ID"] and native["AWS_ACCESS_KEY_ID"]


def test_the_api_environment_is_the_production_profiles(tmp_path):
    native = native_production_env(tmp_path)
    for key, value in environment("api").items():
        if key not in API_DIFFERENCES:
            assert native.get(key) == value, f"{key}: compose {value!r}, native {native.get(key)!r}"


def test_the_ports_are_the_native_defaults():
    defaults = Settings()
    container_port = {name: {str(p).rsplit(":", 1)[-1] for p in service.get("ports", [])} for name, service in SERVICES.items()}
    assert str(defaults.api_port) in container_port["api"]
    assert environment("api")["STREAMSTATE_API_PORT"] == str(defaults.api_port)
    assert str(defaults.prometheus_port) in container_port["prometheus"]
    assert environment("sessions-job")["STREAMSTATE_SESSIONS_METRICS_PORT"] == str(defaults.sessions_metrics_port)
    assert environment("anomalies-job")["STREAMSTATE_ANOMALIES_METRICS_PORT"] == str(defaults.anomalies_metrics_port)
    assert f":{defaults.bootstrap_servers.rsplit(':', 1)[1]}" in environment("kafka")["KAFKA_LISTENERS"]
    assert environment("sessions-job")["STREAMSTATE_S3_ENDPOINT"].endswith(":9000") and "9000" in container_port["minio"]
