"""The Spark driver's class archive (:mod:`streamstate_pipeline.class_archives`).

``make`` builds it (``python -m streamstate_jobs.class_archive``) from a short local run of
what a job's driver loads: a SparkSession as :func:`~streamstate_jobs.spark.build_spark`
builds it, a batch query through Arrow, and a streaming query of the state API that
checkpoints its state in RocksDB. :func:`~streamstate_jobs.spark.build_spark` then gives it to
every driver JVM it starts whose classpath it fits (``spark.driver.extraJavaOptions``).

The Spark image runs the same training once as it is built (``--output``): its drivers,
executors, master and workers all have Spark's jars for classpath, so they all map that one
archive (spark-jobs/Dockerfile).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from streamstate_pipeline import class_archives

if TYPE_CHECKING:  # pyspark is imported where a JVM is started: the up-to-date check needs none of it
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

TRAINING_BATCHES = 3
# The jobs' default, one state partition per core: with Spark's 200 each training batch opened
# 200 state stores (12 s a batch; the run took 141 s against 80 s), loading no other class.
TRAINING_PARTITIONS = 2
UNREACHABLE = "127.0.0.1:9"  # the discard port: no client finds anything listening there


def local_driver_archive() -> Path:
    """The archive of the driver :func:`~streamstate_jobs.spark.build_spark` starts on a local
    master (the connector's jars and the checkpoint classes on its classpath when installed):
    the one ``make`` builds."""
    from streamstate_jobs.spark import driver_archive, launch_conf
    from streamstate_pipeline import binaries

    return driver_archive(launch_conf(binaries.spark_jars_setting(install=False), "local[2]", {}))


def _load_client_classes(spark: SparkSession) -> None:
    """Where Spark's own jars hold Kafka's and S3A's (the Spark image), load the classes a
    job's first batch loads of them: Kafka's source, admin client and consumer, and S3A's
    client, each pointed at an address where nothing listens, so that each fails at once.
    The same where this process's JVM has them on its classpath (the stack's jars on a local
    master); through ``spark.jars`` (a class loader no archive serves) they are left out."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # noqa: S101 - set while the session runs
    try:
        jvm.java.lang.Class.forName("org.apache.kafka.clients.consumer.KafkaConsumer")
    except Exception:  # noqa: BLE001 - py4j wraps the ClassNotFoundException
        return
    kafka = {"bootstrap.servers": UNREACHABLE, "default.api.timeout.ms": "1000", "request.timeout.ms": "500"}
    source = spark.readStream.format("kafka").option("subscribe", "class-archive").option("fetchOffset.numRetries", "1")
    for key, value in kafka.items():
        source = source.option(f"kafka.{key}", value)
    query = source.load().writeStream.format("noop").trigger(availableNow=True).start()
    with contextlib.suppress(Exception):
        query.awaitTermination(30)
    query.stop()
    properties = jvm.java.util.Properties()
    deserializer = "org.apache.kafka.common.serialization.ByteArrayDeserializer"
    for key, value in {**kafka, "key.deserializer": deserializer, "value.deserializer": deserializer}.items():
        properties.setProperty(key, value)
    consumer = jvm.org.apache.kafka.clients.consumer.KafkaConsumer(properties)
    with contextlib.suppress(Exception):
        consumer.assign(jvm.java.util.List.of(jvm.org.apache.kafka.common.TopicPartition("class-archive", 0)))
        consumer.poll(jvm.java.time.Duration.ofMillis(500))
    consumer.close(jvm.java.time.Duration.ofMillis(100))
    hadoop = jvm.org.apache.hadoop.conf.Configuration(spark.sparkContext._jsc.hadoopConfiguration())
    s3a = {
        "fs.s3a.endpoint": f"http://{UNREACHABLE}", "fs.s3a.endpoint.region": "us-east-1", "fs.s3a.path.style.access": "true",
        "fs.s3a.access.key": "class-archive", "fs.s3a.secret.key": "class-archive", "fs.s3a.impl.disable.cache": "true",
        "fs.s3a.retry.limit": "0", "fs.s3a.attempts.maximum": "0",
    }
    for key, value in s3a.items():
        hadoop.set(key, value)
    path = jvm.org.apache.hadoop.fs.Path("s3a://class-archive/checkpoints/probe")
    with contextlib.suppress(Exception):
        files = path.getFileSystem(hadoop)
        with contextlib.suppress(Exception):
            files.exists(path)
        with contextlib.suppress(Exception):
            stream = files.create(path)
            stream.close()
        files.close()


def _exercise(spark: SparkSession) -> None:
    """Load what a job's driver loads: SQL and Arrow, then the state API's streaming query."""
    from pyspark.sql import functions as F

    from streamstate.state import State, StateSpec, map_with_state

    def identity(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from batches

    spark.range(1000).mapInArrow(identity, "id long").groupBy((F.col("id") % 7).alias("k")).count().collect()

    def count(key: str, value: int | None, state: State) -> tuple[str, int]:
        total = (value or 0) + state.get_option(0)
        state.update(total)
        return (key, total)

    with tempfile.TemporaryDirectory(prefix="streamstate-class-archive-") as scratch:
        inputs, checkpoint = Path(scratch, "inputs"), Path(scratch, "checkpoint")
        inputs.mkdir()
        for batch in range(TRAINING_BATCHES):
            Path(inputs, f"{batch}.json").write_text("".join(f'{{"key": "k{i % 50}", "count": 1}}\n' for i in range(200)))
        events = spark.readStream.schema("key string, count int").option("maxFilesPerTrigger", 1).json(str(inputs))
        result = map_with_state(events, key="key", spec=StateSpec.function(count), value="count")

        def route(batch: DataFrame, _: int) -> None:
            result.outputs_of(batch).count()

        # Ends by itself once every file was read: a query stopped mid-batch fails its batch.
        (
            result.all.writeStream.foreachBatch(route)
            .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
            .awaitTermination()
        )


def _train(options: list[str]) -> None:
    """One driver JVM started with ``options``, exercised, stopped, and waited for: it writes
    the archive as it exits."""
    from pyspark import SparkContext

    from streamstate_jobs.spark import DRIVER_JAVA_OPTIONS, build_spark
    from streamstate_pipeline import binaries
    from streamstate_pipeline.settings import Settings

    settings = Settings(spark_jars=binaries.spark_jars_setting(install=False), shuffle_partitions=TRAINING_PARTITIONS)
    spark = build_spark(settings, "streamstate-class-archive", **{DRIVER_JAVA_OPTIONS.replace(".", "__"): " ".join(options)})
    try:
        _exercise(spark)
        _load_client_classes(spark)
    finally:
        spark.stop()
        gateway = SparkContext._gateway  # noqa: SLF001 - the JVM PySpark started, which exits at its input's end
        if gateway is not None:
            process = gateway.proc  # PySpark sets it on the gateway it launches
            process.stdin.close()
            process.wait(timeout=600)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m streamstate_jobs.class_archive",
        description="Write the Spark driver's class archive, unless it exists.")
    parser.add_argument(
        "--output", type=Path, default=None,
        help="the archive to write (default: the one build_spark maps on a local master, under .deps/class-archives); "
        "the Spark image writes one that all its JVMs map, named in JDK_JAVA_OPTIONS")
    args = parser.parse_args(argv)
    class_archives.ensure(args.output or local_driver_archive(), "the Spark driver", _train)
    return 0


if __name__ == "__main__":
    sys.exit(main())
