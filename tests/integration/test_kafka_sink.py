"""Kafka sinks (write_kafka in foreachBatch, the streaming format) on Spark's built-in
connector, and the clear error of a session without it."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from streamstate_jobs.kafka import KafkaConnectorUnavailable, kafka_sink_options, read_kafka, write_kafka
from streamstate_jobs.kafka.connector import jvm_class_loads
from streamstate_stack.launcher import free_port
from tests.integration.kafka_testing import produce, read_topic

pytestmark = pytest.mark.spark


def test_write_kafka_writes_exactly_the_rows_given(spark, settings, bootstrap, new_topic):
    topic = new_topic(partitions=2)
    rows = [(f"k{i % 13}", f"value {i}") for i in range(500)] + [(None, "keyless"), ("gone", None)]
    batch = spark.createDataFrame(rows, "key string, value string").repartition(3)

    written = write_kafka(batch, settings, topic=topic)

    back = read_topic(bootstrap, topic)
    assert written == len(back) == len(rows)
    expected = [(k.encode() if k else None, v.encode() if v else None) for k, v in rows]
    assert sorted(((r.key, r.value) for r in back), key=repr) == sorted(expected, key=repr)


def test_write_kafka_sends_each_row_to_the_topic_its_column_names(spark, settings, bootstrap, new_topic):
    first, second = new_topic(partitions=1), new_topic(partitions=1)
    rows = [(f"k{i}", f"v{i}", first if i % 3 else second) for i in range(30)]
    batch = spark.createDataFrame(rows, "key string, value string, topic string").repartition(2)

    assert write_kafka(batch, settings, topic=None) == 30

    for topic in (first, second):
        expected = sorted((k.encode(), v.encode()) for k, v, t in rows if t == topic)
        assert sorted((r.key, r.value) for r in read_topic(bootstrap, topic)) == expected
    with pytest.raises(ValueError, match="a topic column"):
        write_kafka(batch.drop("topic"), settings, topic=None)


def test_write_kafka_takes_binary_columns_and_headers(spark, settings, bootstrap, new_topic):
    topic = new_topic(partitions=1)
    batch = spark.createDataFrame([(b"\x00k", b"\xffv")], "key binary, value binary").withColumn(
        "headers", F.array(F.struct(F.lit("source").alias("key"), F.lit(b"test").alias("value")))
    )
    assert write_kafka(batch, settings, topic=topic) == 1
    [record] = read_topic(bootstrap, topic)
    assert (record.key, record.value, record.headers) == (b"\x00k", b"\xffv", (("source", b"test"),))


def test_write_kafka_fails_the_batch_when_delivery_fails(spark, settings):
    dead_broker = settings.model_copy(update={"bootstrap_servers": f"127.0.0.1:{free_port()}"})
    batch = spark.createDataFrame([("k", "v")], "key string, value string")
    with pytest.raises(Exception, match="TimeoutException"):
        write_kafka(batch, dead_broker, topic="anything", **{"kafka.max.block.ms": "1500"})


def test_streaming_sink_copies_a_topic(spark, settings, bootstrap, new_topic, tmp_path):
    source, target = new_topic(partitions=2), new_topic(partitions=2)
    delivered = produce(bootstrap, source, [(f"k{i}".encode(), f"v{i}".encode(), i % 2) for i in range(300)])

    query = (
        read_kafka(spark, settings, subscribe=source)
        .select("key", F.upper(F.col("value").cast("string")).alias("value"))
        .writeStream.format("kafka")
        .options(**kafka_sink_options(settings, target))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert query.exception() is None

    back = read_topic(bootstrap, target)
    assert sorted((r.key, r.value) for r in back) == sorted((d.key, d.value.upper()) for d in delivered)


def test_a_session_without_the_connector_gets_a_clear_error(spark, settings, monkeypatch):
    from streamstate_jobs.kafka import connector

    # The lookup can say yes and no: classes on the classpath load, others do not.
    assert jvm_class_loads(spark, "org.apache.spark.sql.SparkSession")
    assert not jvm_class_loads(spark, "org.example.NotOnTheClasspath")
    assert jvm_class_loads(spark, connector.BUILTIN_PROVIDER)  # the session fixture's spark.jars
    # Without the connector, reading and writing say what is missing and how to add it.
    monkeypatch.setattr(connector, "jvm_class_loads", lambda session, name: False)
    with pytest.raises(KafkaConnectorUnavailable, match="make deps.*spark-sql-kafka-0-10"):
        read_kafka(spark, settings, subscribe="user-events")
    with pytest.raises(KafkaConnectorUnavailable, match="make deps"):
        write_kafka(spark.createDataFrame([("k", "v")], "key string, value string"), settings, topic="t")
