"""A real Spark standalone cluster (a master and two 1-core workers, all on 127.0.0.1)
started from the PySpark installation, for the tests in this folder only."""

from __future__ import annotations

import pytest

from infra.spark.standalone import StandaloneCluster
from streamstate_pipeline.settings import Settings
from tests.scenario import pipeline_topics


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The running cluster; afterwards every process it started (executors and Python workers too) is gone, checked by PID."""
    standalone = StandaloneCluster(workdir=tmp_path_factory.mktemp("spark-cluster"), workers=2, cores=1, memory="2g")
    standalone.start()
    yield standalone
    standalone.stop()
    assert standalone.leftovers() == [], f"cluster processes still running: {standalone.leftovers()}"


@pytest.fixture
def full_cluster(cluster):
    """The cluster with every worker running: a test before may have killed one."""
    for index in range(1, cluster.workers + 1):
        if not cluster.processes[f"worker-{index}"].alive():
            cluster.start_worker(index)
    cluster.wait_for_workers(cluster.workers, 120)
    return cluster


@pytest.fixture
def cluster_settings(settings: Settings, new_topic, cluster, tmp_path) -> Settings:
    """Fresh topics and checkpoints; jobs on the cluster with the project's wheel shipped to the executors."""
    return settings.model_copy(
        update={
            **pipeline_topics(new_topic),
            "checkpoint_root": str(tmp_path / "checkpoints"),
            "spark_master": cluster.master_url,
            "ship_code": "wheel",
            "trigger_interval": "1 second",
            "sessions_metrics_port": 0,
        }
    )
