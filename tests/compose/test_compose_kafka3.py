"""infra/docker/compose.kafka-3.yml, offline: compose's Kafka as three KRaft nodes.

``docker-compose config`` must accept the override on docker-compose.yml (with and without the
local images file); the merged nodes must be compose's kafka service but for their node id and
addresses, with the native cluster's replication settings (CLUSTER_SETTINGS, which
tests/reliability/test_broker_lost.py runs); and every client must bootstrap from all three.
"""

from __future__ import annotations

import pytest
import yaml

from streamstate_pipeline.settings import REPO_ROOT
from streamstate_stack.servers import CLUSTER_NODES, CLUSTER_SETTINGS
from streamstate_stack.version_pins import COMPOSE_KAFKA_3
from tests.compose.compose_files import COMPOSE_FILE, LOCAL_IMAGES_FILE, compose_config_without_dot_env

NODES = ("kafka", "kafka-2", "kafka-3")
CLIENTS = ("topics", "sessions-job", "anomalies-job", "api", "producers")
NODE_ADDRESSING = {"KAFKA_NODE_ID", "KAFKA_ADVERTISED_LISTENERS"}


def merged(*files) -> dict:
    result = compose_config_without_dot_env(COMPOSE_FILE, *files, COMPOSE_KAFKA_3)
    assert result.returncode == 0, result.stderr
    assert "variable is not set" not in result.stderr, result.stderr
    return yaml.safe_load(result.stdout)["services"]


@pytest.fixture(scope="module")
def services() -> dict:
    return merged()


def test_the_override_is_valid_with_the_local_images_too():
    assert merged(LOCAL_IMAGES_FILE)["kafka"]["image"].startswith("streamstate-local/kafka:")


def test_three_voters_each_a_broker_with_the_native_clusters_replication(services):
    assert len(NODES) == CLUSTER_NODES
    voters = {services[node]["environment"]["KAFKA_CONTROLLER_QUORUM_VOTERS"] for node in NODES}
    assert voters == {"1@kafka:9093,2@kafka-2:9093,3@kafka-3:9093"}
    assert [services[node]["environment"]["KAFKA_NODE_ID"] for node in NODES] == [1, 2, 3]
    for node in NODES:
        environment = services[node]["environment"]
        assert environment["KAFKA_PROCESS_ROLES"] == "broker,controller"
        as_properties = {key.removeprefix("KAFKA_").lower().replace("_", "."): str(value) for key, value in environment.items()}
        assert {key: as_properties.get(key) for key in CLUSTER_SETTINGS} == CLUSTER_SETTINGS, node


def test_the_new_nodes_are_compose_kafka_but_for_their_id_and_addresses(services):
    kafka = services["kafka"]
    for node in NODES[1:]:
        service = services[node]
        assert service["image"] == kafka["image"]  # KAFKA_IMAGE unset: the official image, as kafka's
        same = {key: value for key, value in service["environment"].items() if key not in NODE_ADDRESSING}
        assert same == {key: value for key, value in kafka["environment"].items() if key not in NODE_ADDRESSING}
        assert service["environment"]["KAFKA_ADVERTISED_LISTENERS"].startswith(f"PLAINTEXT://{node}:9092,")
        assert service["healthcheck"]["test"] == kafka["healthcheck"]["test"]
        assert service["mem_limit"] and all(str(port).startswith("127.0.0.1:") for port in service["ports"])
        assert service["volumes"] and service["volumes"] != kafka["volumes"]
    host_ports = [port for node in NODES for port in services[node]["ports"]]
    assert len({port.split(":")[1] for port in host_ports}) == len(NODES), host_ports


def test_every_client_bootstraps_from_all_three_and_topics_have_three_replicas(services):
    for client in CLIENTS:
        assert services[client]["environment"]["STREAMSTATE_BOOTSTRAP_SERVERS"] == "kafka:9092,kafka-2:9092,kafka-3:9092", client
    topics = services["topics"]
    assert topics["command"][-2:] == ["--replication-factor", "3"]
    assert set(topics["depends_on"]) >= set(NODES)


def test_the_readme_gives_the_command():
    assert f"-f {COMPOSE_KAFKA_3.relative_to(REPO_ROOT)}" in (REPO_ROOT / "README.md").read_text()
