"""The production profile's parts as installed and started here: Spark's jars, the Apache
Kafka broker and MinIO bound to loopback only, the object store's credentials, and the
session builder's safety settings."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from streamstate_pipeline import binaries
from streamstate_jobs.spark import s3a_conf
from streamstate_stack.s3 import S3, S3Error
from streamstate_pipeline.settings import Settings
from tests.integration.addresses import external_address

pytestmark = pytest.mark.spark


def _artifact(jar: str) -> str:
    # "netty-buffer-4.2.7.Final.jar" -> "netty-buffer", as the install script names them.
    import re

    return re.sub(r"-[0-9][^-]*(-[A-Za-z][^-]*)*$", "", jar.removesuffix(".jar"))


def test_the_session_has_the_connector_and_s3a_and_no_kill_links(spark):
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.ui.killEnabled") == "false"
    # On the local master build_spark puts them on the JVM's own classpath, elsewhere in spark.jars.
    given = conf.get("spark.jars", "").split(",") + conf.get("spark.driver.extraClassPath", "").split(os.pathsep)
    jars = {Path(path).name for path in given if path}
    versions = binaries.versions()
    assert f"spark-sql-kafka-0-10_{versions['SCALA_BINARY_VERSION']}-{versions['SPARK_VERSION']}.jar" in jars
    assert any(name.startswith("hadoop-aws-") for name in jars)
    assert not any(name.startswith("bundle-") for name in jars), "the 600 MB AWS SDK bundle is not needed"
    import pyspark

    shipped = {_artifact(p.name) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    duplicates = sorted(name for name in jars if _artifact(name) in shipped)
    assert not duplicates, f"jars that Spark already ships, in another version: {duplicates}"


def test_hadoop_aws_is_the_wheels_hadoop(spark):
    resolved = dict(line.split("=", 1) for line in (binaries.ensure("spark-jars") / "RESOLVED").read_text().split())
    classpath_hadoop = spark.sparkContext._jvm.org.apache.hadoop.util.VersionInfo.getVersion()
    assert resolved["HADOOP_VERSION"] == classpath_hadoop
    assert (binaries.ensure("spark-jars") / f"hadoop-aws-{classpath_hadoop}.jar").is_file()


def test_s3a_conf_passes_the_credentials_to_executors_and_is_empty_without_an_endpoint():
    settings = Settings(s3_endpoint="http://127.0.0.1:9000")
    conf = s3a_conf(settings, {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret"})
    assert conf["spark.hadoop.fs.s3a.access.key"] == "id" and conf["spark.hadoop.fs.s3a.secret.key"] == "secret"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert s3a_conf(Settings(), {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret"}) == {}


def test_kafka_and_minio_listen_on_loopback_only(stack, production_stack):
    ports = {  # the production profile runs on the session's broker
        "kafka": stack.kafka.port,
        "kafka controller": stack.kafka.controller_port,
        "minio": production_stack.minio.port,
    }
    for port in ports.values():
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    external = external_address()
    if external is None:
        pytest.skip("this machine has no address besides loopback to probe from")
    for name, port in ports.items():
        with pytest.raises(OSError):
            socket.create_connection((external, port), timeout=5).close()
            raise AssertionError(f"{name} answers on {external}:{port}")


def test_the_object_store_has_the_bucket_and_refuses_wrong_credentials(production_stack):
    credentials_file = production_stack.minio.home / "credentials"
    assert stat.S_IMODE(credentials_file.stat().st_mode) == 0o600
    assert isinstance(production_stack.s3().list("streamstate", "nothing-here/"), list)
    wrong = S3(production_stack.minio.endpoint, production_stack.s3_credentials.access_key, "not-the-password")
    with pytest.raises(S3Error, match="403"):
        wrong.list("streamstate")
