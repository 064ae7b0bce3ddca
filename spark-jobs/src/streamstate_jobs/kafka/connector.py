"""The entry points the jobs call for Kafka: :func:`read_kafka` (with
:func:`kafka_source_options`), :func:`write_kafka` and :func:`kafka_sink_options`, all on
Spark's built-in ``kafka`` format.

The connector's jars (``make deps`` installs them; ``Settings.spark_jars`` puts them on
``spark.jars``, the Spark image ships them with Spark's own) must load in the driver's
JVM: a session without them fails at the first read or write with
:class:`KafkaConnectorUnavailable`, saying how to add them, instead of Spark's
"Failed to find data source: kafka".
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streamstate_jobs.kafka.partition_writer import records_per_batch
from streamstate_pipeline.settings import Settings
from streamstate_pipeline.errors import ConfigurationError

BUILTIN_PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider"


class KafkaConnectorUnavailable(ConfigurationError, RuntimeError):
    """Spark's Kafka connector is not on this session's classpath."""


def jvm_class_loads(spark: SparkSession, class_name: str) -> bool:
    """Whether ``class_name`` loads through Spark's class loader (False under Spark Connect)."""
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        return False
    try:
        spark.sparkContext._jvm.org.apache.spark.util.Utils.classForName(class_name, True, False)  # type: ignore[union-attr]  # PySpark types the JVM handle Optional; it is set while Spark runs
        return True
    except Exception:  # py4j wraps ClassNotFoundException; any failure means "not usable"
        return False


def require_connector(spark: SparkSession) -> None:
    """Raise :class:`KafkaConnectorUnavailable` unless the connector loads (a class lookup, about a millisecond)."""
    if not jvm_class_loads(spark, BUILTIN_PROVIDER):
        raise KafkaConnectorUnavailable(
            f"Spark's Kafka connector ({BUILTIN_PROVIDER}) is not on this session's classpath: run `make deps` and "
            "set STREAMSTATE_SPARK_JARS to the jars in .deps/spark-jars-*/ (the stack launcher does), or add "
            "org.apache.spark:spark-sql-kafka-0-10 through spark.jars.packages"
        )


# Spark's source reads each partition through the Java consumer, whose defaults hand it 500
# records a poll and fetch 1 MiB of a partition at a time: a task then waits on the broker
# between small fetches. With these, the sessions benchmark's source stage (1,000,000 events in
# two tasks: the read, validation and packing) took 2.7 s instead of 3.3 s, the read alone 1.5
# instead of 1.9 (docs/profile.md); a latency batch's few thousand records fit either way. A
# consumer may hold one prefetched fetch between batches, so each one Spark's pool keeps (a
# partition's; up to 64 an executor, ``spark.kafka.consumer.cache.capacity``) may hold 8 MiB
# instead of 1: an executor reading hundreds of partitions may want less.
# ``STREAMSTATE_KAFKA_CLIENT_OPTIONS`` (``max.partition.fetch.bytes``, ``java.max.poll.records``)
# and a call's own options win over them.
SOURCE_FETCH_OPTIONS = {"kafka.max.poll.records": "10000", "kafka.max.partition.fetch.bytes": str(8 << 20)}


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
    partition int, offset long, timestamp timestamp, timestampType int; read with
    :func:`kafka_source_options`."""
    require_connector(spark)
    options = kafka_source_options(settings, subscribe, startingOffsets, maxOffsetsPerTrigger, failOnDataLoss, **extra_options)
    return spark.readStream.format("kafka").options(**options).load()


def kafka_source_options(
    settings: Settings,
    subscribe: str,
    startingOffsets: str = "earliest",  # noqa: N803 - Spark's option names, on purpose
    maxOffsetsPerTrigger: int | None = None,  # noqa: N803
    failOnDataLoss: str = "true",  # noqa: N803
    **extra_options: str,
) -> dict[str, str]:
    """The options of :func:`read_kafka`'s ``readStream.format("kafka")``.

    ``subscribe`` is one topic or several, comma-separated. ``startingOffsets`` is
    earliest, latest or Spark's JSON (``{"t":{"0":23,"1":-2}}``). ``maxOffsetsPerTrigger``
    defaults to ``settings.max_offsets_per_trigger``, else to the bound the output transactions'
    timeout sets (:func:`~streamstate_jobs.kafka.partition_writer.records_per_batch`). ``extra_options`` pass through, e.g.
    ``**{"kafka.fetch.max.bytes": "1048576"}``; ``kafka.bootstrap.servers`` and the client
    options default to ``settings.bootstrap_servers`` and ``settings.kafka_client_options``
    (translated for the connector's Java client), over the fetch sizes of
    :data:`SOURCE_FETCH_OPTIONS`.
    """
    options: dict[str, str] = {
        **SOURCE_FETCH_OPTIONS,
        **settings.kafka.spark_options(),
        "subscribe": subscribe,
        "startingOffsets": startingOffsets,
        "failOnDataLoss": str(failOnDataLoss).lower(),
    }
    limit = maxOffsetsPerTrigger if maxOffsetsPerTrigger is not None else records_per_batch(settings)
    if limit is not None:
        options["maxOffsetsPerTrigger"] = str(limit)
    options.update({k: str(v) for k, v in extra_options.items()})
    return options


def kafka_sink_options(settings: Settings, topic: str | None, **extra_options: str) -> dict[str, str]:
    """Options for ``df.writeStream.format("kafka").options(**...)`` or a batch write: the
    connection of ``settings``. ``topic`` None: each row names its topic in a ``topic`` column."""
    options = {**settings.kafka.spark_options(), **extra_options}
    if topic is not None:
        options["topic"] = topic
    return options


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
    require_connector(frame.sparkSession)
    # Counted on a persisted copy: an Observation on a DataFrameWriter save of the kafka
    # format never completes (Observation.get blocked the batch forever, Spark 4.1.1).
    frame = frame.persist()
    try:
        records = frame.count()
        frame.write.format("kafka").options(**kafka_sink_options(settings, topic, **extra_options)).save()
    finally:
        frame.unpersist()
    return records
