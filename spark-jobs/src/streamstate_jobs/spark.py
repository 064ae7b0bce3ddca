"""Building the SparkSession the jobs and tests share: RocksDB state, loopback, quiet logs,
the extra jars and the S3A configuration of the production profile.

The master is the one Spark was given when it was given one (:func:`master_to_set`):
``spark-submit --master`` and the other ways Spark itself takes a master are honoured, so
the cluster recipe of docs/cluster.md runs where it says; the ``spark_master`` setting
(``STREAMSTATE_SPARK_MASTER``, the jobs' ``--master``, default ``local[2]``) applies when the
job starts Spark itself.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
from pathlib import Path
from typing import Mapping

from pyspark import SparkContext
from pyspark.find_spark_home import _find_spark_home
from pyspark.sql import SparkSession

from streamstate.spark_python import PRELOAD_VARIABLE, worker_python
from streamstate_jobs.code_shipping import is_local_master, ship_code
from streamstate_pipeline.settings import Settings
from streamstate_pipeline import binaries, class_archives

log = logging.getLogger(__name__)

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
# spark-jobs/jvm/: Hadoop's local file system without a chmod or readlink process per file.
LOCAL_FILE_SYSTEM = "io.streamstate.hadoop.NioLocalFileSystem"
LOCAL_ABSTRACT_FILE_SYSTEM = "io.streamstate.hadoop.NioLocalFs"
# spark-jobs/jvm/: one PUT per checkpoint file on S3A instead of a write, a copy and a delete.
CHECKPOINT_FILE_MANAGER = "io.streamstate.hadoop.SinglePutCheckpointFileManager"
CHECKPOINT_FILE_MANAGER_KEY = "spark.sql.streaming.checkpointFileManagerClass"
DRIVER_CLASSPATH = "spark.driver.extraClassPath"
CLASSPATH_KEYS = (DRIVER_CLASSPATH, "spark.executor.extraClassPath")
DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"
DRIVER_ARCHIVE_PROGRAM = "spark-driver"  # what a Spark driver's class archive is named after


def _quiet(spark: SparkSession, logger: str) -> None:
    """Raise one logger to ERROR: the state server WARNs once per new key and batch."""
    jvm = spark.sparkContext._jvm
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(logger, jvm.org.apache.logging.log4j.Level.ERROR)  # type: ignore[union-attr]  # PySpark types the JVM handle Optional; it is set while Spark runs


def _is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def _launch_options_name_master(submit_args: str) -> bool:
    try:
        words = shlex.split(submit_args)
    except ValueError:
        return False
    return any(w == "--master" or w.startswith(("--master=", "spark.master=")) for w in words)


def master_to_set(settings: Settings, environ: Mapping[str, str], conf: Mapping[str, str]) -> str | None:
    """The master :func:`build_spark` sets, or None to keep the one Spark was given.

    Spark was given one when this driver was started by ``spark-submit`` (its Python process
    then finds ``PYSPARK_GATEWAY_PORT``; spark-submit chose from its ``--master``, ``--conf
    spark.master``, ``spark-defaults.conf`` and ``MASTER``, as for any PySpark application),
    when ``conf`` has ``spark.master``, or when the options PySpark launches its JVM with
    (``PYSPARK_SUBMIT_ARGS``) name one. Spark's ``MASTER`` variable counts unless the setting
    was given explicitly (``STREAMSTATE_SPARK_MASTER`` or ``--master``).
    """
    if "spark.master" in conf or "PYSPARK_GATEWAY_PORT" in environ:
        return None
    if _launch_options_name_master(environ.get("PYSPARK_SUBMIT_ARGS", "")):
        return None
    if environ.get("MASTER") and "spark_master" not in settings.model_fields_set:
        return None
    return settings.spark_master


def _given_master(conf: Mapping[str, str]) -> str:
    """The master Spark was given (see :func:`master_to_set`), read from its launch configuration."""
    if "spark.master" in conf:
        return conf["spark.master"]
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # noqa: SLF001 - joins spark-submit's JVM, or starts one with the launch options
    return SparkConf().get("spark.master", "local[*]")


def build_spark(settings: Settings, app_name: str = "streamstate", **conf: str) -> SparkSession:
    # Python workers must run the same interpreter (the project venv) as the driver.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    conf = {key.replace("__", "."): value for key, value in conf.items()}
    master = master_to_set(settings, os.environ, conf)
    if master is None:
        master = _given_master(conf)
        if "spark_master" in settings.model_fields_set and settings.spark_master != master:
            log.warning("Spark was given the master %s (spark-submit, spark.master or MASTER); the spark_master "
                        "setting %s does not apply", master, settings.spark_master)
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master)
        .config("spark.driver.host", settings.spark_driver_host)
        # On a cluster the executors connect back to the driver: listen on every interface
        # unless the advertised host is loopback (the embedded stack and tests).
        .config("spark.driver.bindAddress", "127.0.0.1" if _is_loopback(settings.spark_driver_host) else "0.0.0.0")
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.ui.showConsoleProgress", "false")
        # The UI's kill links stop queries and jobs with one unauthenticated request.
        .config("spark.ui.killEnabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        # Spark keys its Python daemons by the workers' environment, and only the UDF runners set
        # SPARK_SIMPLIFIED_TRACEBACK (transformWithStateInPandas's does not): with it on, a job
        # started a second daemon for its state stage, importing everything again (1 CPU-s, its
        # own heap) in the first batch. Tracebacks from the source's UDFs then keep PySpark's frames.
        .config("spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled", "false")
        # The jobs' modules (the registry imports each declared job's), imported by PySpark's
        # daemon once instead of by every worker it forks (streamstate.spark_python).
        .config(f"spark.executorEnv.{PRELOAD_VARIABLE}", "streamstate_jobs.registry")
    )
    for key, value in s3a_conf(settings).items():
        builder = builder.config(key, value)
    if is_local_master(master):
        # Workers start on this machine, from the project venv where the launcher is installed;
        # a cluster's executors may run an image without it.
        os.environ["PYSPARK_PYTHON"] = worker_python(os.environ["PYSPARK_PYTHON"])
    if settings.shuffle_partitions is not None:
        builder = builder.config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
    for key, value in _executor_conf(settings).items():
        builder = builder.config(key, value)
    for key, value in {**shipped_checkpoint_io_conf(Path(_find_spark_home(), "jars"), conf), **conf}.items():
        builder = builder.config(key, value)
    starts_jvm = SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" not in os.environ  # noqa: SLF001 - PySpark keeps its JVM only here
    # The jars go on the JVM's own classpath where connector_classpath_conf puts them there, else through spark.jars.
    if settings.spark_jars and not (starts_jvm and connector_classpath_conf(settings.spark_jars, master, conf)):
        builder = builder.config("spark.jars", settings.spark_jars)
    if starts_jvm:
        launch = launch_conf(settings.spark_jars, master, conf)
        for key, value in {**launch, **driver_conf(launch)}.items():
            builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    _quiet(spark, "org.apache.spark.sql.execution.python.streaming.TransformWithStateInPySparkStateServer")
    ship_code(spark, settings.with_overrides(spark_master=spark.sparkContext.master))
    return spark


def launch_conf(spark_jars: str, master: str, conf: Mapping[str, str]) -> dict[str, str]:
    """What a JVM this process starts on ``master`` is launched with: ``conf``, the connector's
    jars on its classpath (:func:`connector_classpath_conf`) and the checkpoint classes
    (:func:`checkpoint_io_conf`); the driver's class archive is that classpath's."""
    launch = {**conf, **connector_classpath_conf(spark_jars, master, conf)}
    return {**launch, **checkpoint_io_conf(binaries.checkpoint_io_jar(install=False), master, launch)}


def driver_archive(conf: Mapping[str, str]) -> Path:
    """The class archive (:mod:`streamstate_pipeline.class_archives`) of a driver launched with
    ``conf``: its extra classpath first, then Spark's jars. ``python -m
    streamstate_jobs.class_archive`` writes the one of a local master's driver."""
    jars = Path(_find_spark_home(), "jars", "*")
    classpath = class_archives.classpath_entries(os.pathsep.join(filter(None, (conf.get(DRIVER_CLASSPATH), str(jars)))))
    return class_archives.archive_path(DRIVER_ARCHIVE_PROGRAM, classpath)


def driver_conf(conf: Mapping[str, str]) -> dict[str, str]:
    """``spark.driver.extraJavaOptions`` mapping the driver's archive, the caller's options
    kept; empty when no archive was built for this classpath, or when the driver writes one
    (a training run): the JVM refuses to do both."""
    if class_archives.WRITE_OPTION in conf.get(DRIVER_JAVA_OPTIONS, ""):
        return {}
    options = class_archives.use_options(driver_archive(conf))
    return {DRIVER_JAVA_OPTIONS: " ".join(filter(None, (conf.get(DRIVER_JAVA_OPTIONS), *options)))} if options else {}


def connector_classpath_conf(spark_jars: str, master: str, conf: Mapping[str, str]) -> dict[str, str]:
    """Spark's Kafka connector and S3A jars (``spark_jars``, comma-separated) on the JVM's own
    classpath, where this process starts the JVM on a local master; empty elsewhere, where
    they go through ``spark.jars``.

    Classes of ``spark.jars`` come through a class loader of Spark's, which no class archive
    serves: each driver parsed and verified Kafka's client and the connector again, and looked
    up every class it missed in each of Spark's jars (a sixth of a job driver's samples in its
    first 30 s, docs/profile.md). On the JVM's classpath they are in the driver's archive,
    and a local master's executors share the driver's JVM or this machine's paths.
    """
    jars = [jar for jar in spark_jars.split(",") if jar]
    if not jars or not is_local_master(master):
        return {}
    return {key: os.pathsep.join(filter(None, (conf.get(key), *jars))) for key in CLASSPATH_KEYS}


def checkpoint_io_conf(jar: Path | None, master: str, conf: Mapping[str, str]) -> dict[str, str]:
    """Checkpoints through ``spark-jobs/jvm/`` when its jar is installed and the master is local.

    Two classes of that jar take part (docs/profile.md says what each saved):

    - the local file system: Hadoop's, without its native library, forks ``chmod`` for every
      file it creates and ``readlink`` for every rename, several per batch, each costing a
      batch tens of milliseconds on 2 cores;
    - the checkpoint file manager: on S3A each checkpoint file is one PUT of its final name
      instead of a temporary object copied into place; elsewhere it is Spark's own.

    The classes must be on the JVM's own classpath (``spark.jars`` come too late for a
    ``file:`` file system), so this applies only where this process starts the JVM, and only
    on a local master, whose executors run on this machine; a caller's classpath is kept, and
    a caller's own classes for these keys win.
    """
    if jar is None or not is_local_master(master):
        return {}
    result = {key: os.pathsep.join(filter(None, (conf.get(key), str(jar)))) for key in CLASSPATH_KEYS}
    chosen = (
        ("spark.hadoop.fs.file.impl", LOCAL_FILE_SYSTEM),
        ("spark.hadoop.fs.AbstractFileSystem.file.impl", LOCAL_ABSTRACT_FILE_SYSTEM),
        (CHECKPOINT_FILE_MANAGER_KEY, CHECKPOINT_FILE_MANAGER),
    )
    for key, value in chosen:
        if key not in conf:
            result[key] = value
    return result


def shipped_checkpoint_io_conf(spark_jars: Path, conf: Mapping[str, str]) -> dict[str, str]:
    """The S3 checkpoint file manager of ``spark-jobs/jvm/`` on any master when this Spark
    ships its jar among its own (``spark_jars``), as the Spark image does for every JVM it
    runs; a caller's own class wins. The image keeps no ``spark-defaults.conf`` that could
    name it: Java refuses a class archive with a non-empty directory on the classpath, and
    Spark's launcher puts ``$SPARK_HOME/conf`` there."""
    if CHECKPOINT_FILE_MANAGER_KEY in conf or not (spark_jars / binaries.CHECKPOINT_IO_JAR).is_file():
        return {}
    return {CHECKPOINT_FILE_MANAGER_KEY: CHECKPOINT_FILE_MANAGER}


def s3a_conf(settings: Settings, environ: dict[str, str] | None = None) -> dict[str, str]:
    """S3A for ``settings.s3_endpoint`` (path-style, as MinIO serves it); empty when unset.

    The credentials are the standard AWS variables of the driver's environment, passed as
    Hadoop configuration so that executors on other hosts get them too (Spark redacts
    ``*secret*`` keys in its UI and logs).
    """
    if not settings.s3_endpoint:
        return {}
    env: Mapping[str, str] = os.environ if environ is None else environ
    conf = {
        "spark.hadoop.fs.s3a.endpoint": settings.s3_endpoint,
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": str(settings.s3_endpoint.startswith("https://")).lower(),
    }
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        conf["spark.hadoop.fs.s3a.access.key"] = env["AWS_ACCESS_KEY_ID"]
        conf["spark.hadoop.fs.s3a.secret.key"] = env["AWS_SECRET_ACCESS_KEY"]
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
