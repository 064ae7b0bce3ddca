"""Building the SparkSession the jobs and tests share: RocksDB state, loopback, quiet logs,
the extra jars and the S3A configuration of the production profile."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from streamstate.jobs.cluster import ship_code
from streamstate.settings import Settings

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
HDFS_PROVIDER = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
KAFKA_PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider"


def _quiet(spark: SparkSession, logger: str) -> None:
    """Raise one logger to ERROR: the state server WARNs once per new key and batch."""
    jvm = spark.sparkContext._jvm
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(logger, jvm.org.apache.logging.log4j.Level.ERROR)


def _is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def build_spark(settings: Settings, app_name: str = "streamstate", **conf: str) -> SparkSession:
    # Python workers must run the same interpreter (the project venv) as the driver.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = (
        SparkSession.builder.appName(app_name)
        .master(settings.spark_master)
        .config("spark.driver.host", settings.spark_driver_host)
        # On a cluster the executors connect back to the driver: listen on every interface
        # unless the advertised host is loopback (the embedded stack and tests).
        .config("spark.driver.bindAddress", "127.0.0.1" if _is_loopback(settings.spark_driver_host) else "0.0.0.0")
        .config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
        .config(
            "spark.sql.streaming.stateStore.providerClass",
            ROCKSDB_PROVIDER if settings.state_store == "rocksdb" else HDFS_PROVIDER,
        )
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.ui.showConsoleProgress", "false")
        # The UI's kill links stop queries and jobs with one unauthenticated request.
        .config("spark.ui.killEnabled", "false")
        # Spark's built-in Kafka source as its V1 Source: the V2 stream's progress metrics throw a
        # NullPointerException (Some(null), SPARK-55271 / SPARK-57438) in 4.1.x whenever a
        # restarted query replays its last uncommitted batch, failing the query once more after
        # every crash or broker loss. 4.2.0's connector has the fix (Option(...)), but the crash
        # tests have not yet been run on the V2 source. The V1 source reads the same offsets and
        # checkpoints; it only lacks those metrics (the jobs' lag comes from the progress).
        .config("spark.sql.streaming.disabledV2MicroBatchReaders", KAFKA_PROVIDER)
        .config("spark.sql.session.timeZone", "UTC")
    )
    if settings.spark_jars:
        builder = builder.config("spark.jars", settings.spark_jars)
    for key, value in s3a_conf(settings).items():
        builder = builder.config(key, value)
    if settings.spark_master.startswith("local"):
        # Workers are forked on this machine from the project venv, where the daemon module is
        # installed; a cluster's executors may run an image without it.
        builder = builder.config("spark.python.daemon.module", "streamstate.spark_daemon")
    for key, value in _executor_conf(settings).items():
        builder = builder.config(key, value)
    for key, value in conf.items():
        builder = builder.config(key.replace("__", "."), value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    _quiet(spark, "org.apache.spark.sql.execution.python.streaming.TransformWithStateInPySparkStateServer")
    ship_code(spark, settings)
    return spark


def s3a_conf(settings: Settings, environ: dict[str, str] | None = None) -> dict[str, str]:
    """S3A for ``settings.s3_endpoint`` (path-style, as MinIO serves it); empty when unset.

    The credentials are the standard AWS variables of the driver's environment, passed as
    Hadoop configuration so that executors on other hosts get them too (Spark redacts
    ``*secret*`` keys in its UI and logs).
    """
    if not settings.s3_endpoint:
        return {}
    environ = os.environ if environ is None else environ
    conf = {
        "spark.hadoop.fs.s3a.endpoint": settings.s3_endpoint,
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": str(settings.s3_endpoint.startswith("https://")).lower(),
    }
    if environ.get("AWS_ACCESS_KEY_ID") and environ.get("AWS_SECRET_ACCESS_KEY"):
        conf["spark.hadoop.fs.s3a.access.key"] = environ["AWS_ACCESS_KEY_ID"]
        conf["spark.hadoop.fs.s3a.secret.key"] = environ["AWS_SECRET_ACCESS_KEY"]
    return conf


def configure_s3a(spark: SparkSession, settings: Settings, environ: dict[str, str] | None = None) -> None:
    """Apply :func:`s3a_conf` to a running session (a session built before the object store
    existed, as the tests' shared one). S3A file systems are cached per bucket once used,
    so this must come before the first s3a:// access with these settings."""
    hadoop_conf = spark.sparkContext._jsc.hadoopConfiguration()  # noqa: SLF001 - Hadoop's conf is only reachable here
    for key, value in s3a_conf(settings, environ).items():
        hadoop_conf.set(key.removeprefix("spark.hadoop."), value)


def _executor_conf(settings: Settings) -> dict[str, str]:
    """Executor sizing on a cluster; unset settings leave Spark's (or spark-defaults.conf's) values."""
    wanted = {
        "spark.executor.cores": settings.executor_cores,
        "spark.executor.memory": settings.executor_memory,
        "spark.cores.max": settings.cores_max,
    }
    return {key: str(value) for key, value in wanted.items() if value is not None}
