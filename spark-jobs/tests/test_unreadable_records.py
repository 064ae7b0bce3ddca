"""Recognising the failure of a query on a Kafka timestamp Spark cannot convert (issue 51): the
record's coordinates from the text the failed query carries, and nothing from any other failure."""

from __future__ import annotations

import pytest

from streamstate_jobs.kafka.unreadable_records import UnreadableRecord, unreadable_record

# As Spark 4.2.0 words it: the failed query's error (PySpark's exception(), and as awaitTermination
# raises it), and inside the text of a Spark action that met it in a task (measured).
QUERY_TEXTS = (
    "Record at topic {topic} partition {partition} offset {offset} has timestamp value {ts} that overflows when converting "
    "to Spark's microsecond-precision TimestampType.\nKafka record timestamps must be in milliseconds since epoch",
    "[STREAM_FAILED] Query [id = fe580b76, runId = 655134d3] terminated with exception: Record at topic {topic} partition "
    "{partition} offset {offset} has timestamp value {ts} that overflows when converting to Spark's microsecond-precision "
    "TimestampType.\nKafka record timestamps must be in milliseconds since epoch",
)
SPARK_TEXT = (
    "An exception was raised by the Python Proxy. Return Message: Traceback (most recent call last):\n ...\n"
    "py4j.protocol.Py4JJavaError: An error occurred while calling o657.collectToPython.\n"
    ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 2.0 failed 1 times, most recent "
    "failure: Lost task 0.0 in stage 2.0 (TID 2) (localhost executor driver): org.apache.spark.sql.kafka010."
    "KafkaIllegalStateException: Record at topic {topic} partition {partition} offset {offset} has timestamp value "
    "{ts} that overflows when converting to Spark's microsecond-precision TimestampType.\n\tat org.apache.spark..."
)


@pytest.mark.parametrize("template", [*QUERY_TEXTS, SPARK_TEXT])
def test_the_record_is_read_from_the_failure_text(template):
    text = template.format(topic="plain-events-8.4c_78af", partition=3, offset=43, ts=9223372036854776)
    assert unreadable_record(text) == UnreadableRecord("plain-events-8.4c_78af", 3, 43, 9223372036854776)
    negative = template.format(topic="t", partition=0, offset=0, ts=-4611686018427387904)
    assert unreadable_record(negative) == UnreadableRecord("t", 0, 0, -4611686018427387904)


def test_other_failures_are_not_taken_for_it():
    assert unreadable_record("KAFKA_DATA_LOSS: Some data may have been lost") is None
    # Another exception's words, or the record named without the exception, are not it.
    assert unreadable_record("ValueError: Record at topic t partition 0 offset 1 has timestamp value 5 that overflows") is None
    assert unreadable_record(SPARK_TEXT.format(topic="t", partition="x", offset=1, ts=5)) is None
