"""Kafka I/O for the Spark jobs: a streaming source and sinks with one schema and one set
of option names, over Spark's built-in connector when present, else the project's
Python data source ``streamstate_kafka`` built on confluent-kafka.

    df = read_kafka(spark, settings, subscribe="user-events", startingOffsets="earliest")
    n = write_kafka(batch_df, settings, topic="alerts")          # inside foreachBatch
    df.writeStream.format(kafka_sink_format(spark, settings)).options(**kafka_sink_options(spark, settings, "alerts"))
"""

from streamstate.jobs.kafka.broker import KafkaSourceError
from streamstate.jobs.kafka.connector import (
    BUILTIN_PROVIDER,
    KafkaConnectorUnavailable,
    builtin_kafka_available,
    kafka_format,
    kafka_sink_format,
    kafka_sink_options,
    read_kafka,
    register_python_source,
    write_kafka,
)
from streamstate.jobs.kafka.datasource import SHORT_NAME, KafkaDataSource
from streamstate.jobs.kafka.options import KafkaOptionError
from streamstate.jobs.kafka.producer import KafkaDeliveryError
from streamstate.jobs.kafka.records import KAFKA_SCHEMA

__all__ = [
    "BUILTIN_PROVIDER",
    "KAFKA_SCHEMA",
    "SHORT_NAME",
    "KafkaConnectorUnavailable",
    "KafkaDataSource",
    "KafkaDeliveryError",
    "KafkaOptionError",
    "KafkaSourceError",
    "builtin_kafka_available",
    "kafka_format",
    "kafka_sink_format",
    "kafka_sink_options",
    "read_kafka",
    "register_python_source",
    "write_kafka",
]
