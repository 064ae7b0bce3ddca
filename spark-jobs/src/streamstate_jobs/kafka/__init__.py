"""Kafka I/O for the Spark jobs, over Spark's built-in connector (spark-sql-kafka-0-10),
with the connection (and client options) of the project's settings.

    df = read_kafka(spark, settings, subscribe="user-events", startingOffsets="earliest")
    n = write_kafka(batch_df, settings, topic="alerts")          # inside foreachBatch
    df.writeStream.format("kafka").options(**kafka_sink_options(settings, "alerts"))
"""

from streamstate_jobs.kafka.connector import (
    BUILTIN_PROVIDER,
    KafkaConnectorUnavailable,
    kafka_sink_options,
    kafka_source_options,
    read_kafka,
    require_connector,
    write_kafka,
)

__all__ = [
    "BUILTIN_PROVIDER",
    "KafkaConnectorUnavailable",
    "kafka_sink_options",
    "kafka_source_options",
    "read_kafka",
    "require_connector",
    "write_kafka",
]
