"""When the session builder checkpoints through spark-jobs/jvm/'s classes, its local file system
and its checkpoint file manager (streamstate_jobs.spark.checkpoint_io_conf): only with its jar
and a local master, keeping a caller's classpath and a caller's own classes. A Spark that ships
the jar among its own jars (the Spark image) gets the manager on any master
(streamstate_jobs.spark.shipped_checkpoint_io_conf)."""

from __future__ import annotations

import os
from pathlib import Path

from streamstate_jobs.spark import (
    CHECKPOINT_FILE_MANAGER,
    CHECKPOINT_FILE_MANAGER_KEY,
    LOCAL_ABSTRACT_FILE_SYSTEM,
    LOCAL_FILE_SYSTEM,
    checkpoint_io_conf,
    shipped_checkpoint_io_conf,
)
from streamstate_pipeline.binaries import CHECKPOINT_IO_JAR

JAR = Path("/deps/checkpoint-io/streamstate-checkpoint-io.jar")


def test_a_local_master_with_the_jar_gets_the_classpath_and_all_three_classes():
    for master in ("local", "local[2]", "local[*]", "local-cluster[2,1,1024]"):
        assert checkpoint_io_conf(JAR, master, {}) == {
            "spark.driver.extraClassPath": str(JAR),
            "spark.executor.extraClassPath": str(JAR),
            "spark.hadoop.fs.file.impl": LOCAL_FILE_SYSTEM,
            "spark.hadoop.fs.AbstractFileSystem.file.impl": LOCAL_ABSTRACT_FILE_SYSTEM,
            CHECKPOINT_FILE_MANAGER_KEY: CHECKPOINT_FILE_MANAGER,
        }, master


def test_without_the_jar_or_on_a_cluster_nothing_changes():
    assert checkpoint_io_conf(None, "local[2]", {}) == {}
    for master in ("spark://cluster:7077", "yarn", "k8s://https://api:6443"):
        assert checkpoint_io_conf(JAR, master, {}) == {}, master


def test_a_callers_classpath_is_kept_and_its_own_classes_win():
    conf = {
        "spark.driver.extraClassPath": "/opt/mine.jar",
        "spark.hadoop.fs.file.impl": "com.example.MyLocalFileSystem",
        CHECKPOINT_FILE_MANAGER_KEY: "com.example.MyCheckpointFileManager",
    }
    result = checkpoint_io_conf(JAR, "local[2]", conf)
    assert result["spark.driver.extraClassPath"] == f"/opt/mine.jar{os.pathsep}{JAR}"
    assert result["spark.executor.extraClassPath"] == str(JAR)
    assert "spark.hadoop.fs.file.impl" not in result
    assert CHECKPOINT_FILE_MANAGER_KEY not in result
    assert result["spark.hadoop.fs.AbstractFileSystem.file.impl"] == LOCAL_ABSTRACT_FILE_SYSTEM


def test_outside_a_source_checkout_no_jar_is_looked_for(tmp_path, monkeypatch):
    """The images install the package without infra/: a job there must start, with Hadoop's class."""
    from streamstate_pipeline import binaries

    monkeypatch.setattr(binaries, "VERSIONS_FILE", tmp_path / "missing" / "versions.env")
    binaries.versions.cache_clear()
    try:
        assert binaries.checkpoint_io_jar(install=False) is None
        # The image's class archive is trained there (spark-jobs/Dockerfile): on Spark's own jars alone.
        assert binaries.spark_jars_setting(install=False) == ""
    finally:
        binaries.versions.cache_clear()


def test_a_spark_shipping_the_jar_checkpoints_through_its_manager(tmp_path):
    """The image's every JVM (drivers, master, workers, executors) has Spark's jars on its
    classpath, and no spark-defaults.conf (docs/profile.md: a class archive needs no file there)."""
    assert shipped_checkpoint_io_conf(tmp_path, {}) == {}
    (tmp_path / CHECKPOINT_IO_JAR).write_bytes(b"")
    assert shipped_checkpoint_io_conf(tmp_path, {}) == {CHECKPOINT_FILE_MANAGER_KEY: CHECKPOINT_FILE_MANAGER}
    assert shipped_checkpoint_io_conf(tmp_path, {CHECKPOINT_FILE_MANAGER_KEY: "com.example.Mine"}) == {}


def test_the_connector_jars_go_on_a_local_drivers_own_classpath_after_the_callers():
    from streamstate_jobs.spark import connector_classpath_conf

    jars = "/deps/spark-jars/spark-sql-kafka.jar,/deps/spark-jars/kafka-clients.jar"
    on_path = f"/deps/spark-jars/spark-sql-kafka.jar{os.pathsep}/deps/spark-jars/kafka-clients.jar"
    for master in ("local", "local[2]", "local-cluster[2,1,1024]"):
        assert connector_classpath_conf(jars, master, {}) == {
            "spark.driver.extraClassPath": on_path, "spark.executor.extraClassPath": on_path}, master
    mine = connector_classpath_conf(jars, "local[2]", {"spark.driver.extraClassPath": "/opt/mine.jar"})
    assert mine["spark.driver.extraClassPath"] == f"/opt/mine.jar{os.pathsep}{on_path}"


def test_the_connector_jars_stay_spark_jars_on_a_cluster_or_when_none_are_set():
    from streamstate_jobs.spark import connector_classpath_conf

    assert connector_classpath_conf("", "local[2]", {}) == {}
    for master in ("spark://cluster:7077", "yarn", "k8s://https://api:6443"):
        assert connector_classpath_conf("/deps/a.jar", master, {}) == {}, master
