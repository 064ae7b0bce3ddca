"""Choosing between Spark's built-in ``kafka`` format and ``streamstate_kafka``, and the
entry points the jobs call: :func:`read_kafka`, :func:`write_kafka`, :func:`kafka_sink_options`.

``Settings.kafka_source`` decides: ``builtin`` and ``python`` force a format, ``auto``
takes the built-in connector when its provider class loads in the driver's JVM. Both
formats give the same columns (key, value, topic, partition, offset, timestamp,
timestampType) and accept the same option names.
"""

from __future__ import annotations

from typing import Literal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streamstate.jobs.kafka.datasource import SHORT_NAME, KafkaDataSource
from streamstate.jobs.kafka.options import client_settings
from streamstate.jobs.kafka.producer import produce_batches
from streamstate.kafka_clients import spark_kafka_options
from streamstate.settings import Settings

BUILTIN_PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
KafkaFormat = Literal["builtin", "python"]


class KafkaConnectorUnavailable(RuntimeError):
    """kafka_source=builtin was asked for but the connector is not on Spark's classpath."""


def builtin_kafka_available(spark: SparkSession) -> bool:
    """True when Spark's Kafka connector (spark-sql-kafka-0-10) loads in the driver's JVM."""
    return jvm_class_loads(spark, BUILTIN_PROVIDER)


def jvm_class_loads(spark: SparkSession, class_name: str) -> bool:
    """Whether ``class_name`` loads through Spark's class loader (False under Spark Connect)."""
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        return False
    try:
        spark.sparkContext._jvm.org.apache.spark.util.Utils.classForName(class_name, True, False)
        return True
    except Exception:  # py4j wraps ClassNotFoundException; any failure means "not usable"
        return False


def kafka_format(spark: SparkSession, settings: Settings) -> KafkaFormat:
    """The Kafka format to use under ``settings.kafka_source`` (auto|builtin|python)."""
    choice = settings.kafka_source
    if choice == "python":
        return "python"
    available = builtin_kafka_available(spark)
    if choice == "builtin" and not available:
        raise KafkaConnectorUnavailable(
            f"kafka_source=builtin, but {BUILTIN_PROVIDER} does not load: add the spark-sql-kafka-0-10 jars "
            "(spark.jars.packages) or set STREAMSTATE_KAFKA_SOURCE=python/auto"
        )
    return "builtin" if available else "python"


def _spark_format(spark: SparkSession, settings: Settings) -> str:
    if kafka_format(spark, settings) == "builtin":
        return "kafka"
    register_python_source(spark)
    return SHORT_NAME


def register_python_source(spark: SparkSession) -> None:
    """Register ``streamstate_kafka`` with this session; registering again replaces it, harmlessly."""
    spark.dataSource.register(KafkaDataSource)


def read_kafka(
    spark: SparkSession,
    settings: Settings,
    subscribe: str,
    startingOffsets: str = "earliest",  # noqa: N803 - Spark's option names, on purpose
    maxOffsetsPerTrigger: int | None = None,  # noqa: N803
    failOnDataLoss: str = "true",  # noqa: N803
    **extra_options: str,
) -> DataFrame:
    """A streaming DataFrame of Kafka records: key binary, value binary, topic string,
    partition int, offset long, timestamp timestamp, timestampType int.

    ``subscribe`` is one topic or several, comma-separated. ``startingOffsets`` is
    earliest, latest or Spark's JSON (``{"t":{"0":23,"1":-2}}``). ``maxOffsetsPerTrigger``
    defaults to ``settings.max_offsets_per_trigger``. ``extra_options`` pass through, e.g.
    ``**{"kafka.fetch.max.bytes": "1048576"}``; ``kafka.bootstrap.servers`` and the client
    options default to ``settings.bootstrap_servers`` and ``settings.kafka_client_options``
    (translated for the built-in format's Java client). On the Python source, ``Trigger.AvailableNow`` runs a
    single batch (one ``maxOffsetsPerTrigger``-sized batch if that is set).
    """
    spark_format = _spark_format(spark, settings)
    options: dict[str, str] = {
        **spark_kafka_options(settings, builtin=spark_format == "kafka"),
        "subscribe": subscribe,
        "startingOffsets": startingOffsets,
        "failOnDataLoss": str(failOnDataLoss).lower(),
    }
    limit = maxOffsetsPerTrigger if maxOffsetsPerTrigger is not None else settings.max_offsets_per_trigger
    if limit is not None:
        options["maxOffsetsPerTrigger"] = str(limit)
    options.update({k: str(v) for k, v in extra_options.items()})
    return spark.readStream.format(spark_format).options(**options).load()


def kafka_sink_options(spark: SparkSession, settings: Settings, topic: str | None, **extra_options: str) -> dict[str, str]:
    """Options for ``df.writeStream.format(kafka_sink_format(...)).options(**...)`` or a batch write:
    the connection of ``settings`` in the names of the format ``kafka_format`` chooses.
    ``topic`` None: each row names its topic in a ``topic`` column."""
    builtin = kafka_format(spark, settings) == "builtin"
    options = {**spark_kafka_options(settings, builtin=builtin), **extra_options}
    if topic is not None:
        options["topic"] = topic
    return options


def kafka_sink_format(spark: SparkSession, settings: Settings) -> str:
    """``kafka`` (built-in) or ``streamstate_kafka`` (registered on the way) for a sink."""
    return _spark_format(spark, settings)


def _sink_columns(df: DataFrame) -> DataFrame:
    columns = [F.col("key").cast("binary").alias("key")] if "key" in df.columns else [F.lit(None).cast("binary").alias("key")]
    columns.append(F.col("value").cast("binary").alias("value"))
    columns += [F.col(name) for name in ("headers", "topic") if name in df.columns]
    return df.select(*columns)


def write_kafka(batch_df: DataFrame, settings: Settings, topic: str | None, **extra_options: str) -> int:
    """Write a *batch* DataFrame of key (string/binary, nullable), value (string/binary;
    null = tombstone) and optional headers to ``topic``; for use inside ``foreachBatch``.
    With ``topic`` None each row goes to the topic its ``topic`` column names, so rows for
    several topics take one pass over the data (one Spark job) instead of one per topic.

    Blocks until every record is acknowledged and returns how many were written; any
    delivery error raises, failing the micro-batch so that Spark retries it.
    """
    if topic is None and "topic" not in batch_df.columns:
        raise ValueError("write_kafka needs a topic, or a topic column naming each row's topic")
    frame = _sink_columns(batch_df)
    spark = frame.sparkSession
    if kafka_format(spark, settings) == "builtin":
        # Counted on a persisted copy: an Observation on a DataFrameWriter save of the kafka
        # format never completes (Observation.get blocked the batch forever, Spark 4.1.1).
        frame = frame.persist()
        try:
            records = frame.count()
            frame.write.format("kafka").options(**kafka_sink_options(spark, settings, topic, **extra_options)).save()
        finally:
            frame.unpersist()
        return records
    client_conf = client_settings(kafka_sink_options(spark, settings, topic, **extra_options))

    def produce(batches):
        import pyarrow as pa

        yield pa.RecordBatch.from_pydict({"records": [produce_batches(batches, client_conf, topic)]})

    # One count per task, summed here: an aggregation would add a shuffle stage to every write.
    return sum(row["records"] for row in frame.mapInArrow(produce, "records long").collect())
