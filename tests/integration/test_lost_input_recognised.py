"""Lost input is recognised by Spark's error class, not by its message: records deleted from
under a checkpoint fail the query with KAFKA_DATA_LOSS, which the runner reads along the causes."""

from __future__ import annotations

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from streamstate_jobs.lost_input import KAFKA_DATA_LOSS, error_conditions, is_source_reset, query_failure
from streamstate_jobs.runner import start_query
from tests.integration.dead_letter_job import dead_letter_job
from tests.state_queries import produce_json

pytestmark = pytest.mark.spark


def test_records_deleted_under_the_checkpoint_are_lost_input(spark, settings, new_topic, bootstrap, tmp_path):
    run = settings.model_copy(update={"topic_metrics": new_topic(1, "lost-in"), "topic_dead_letters": new_topic(1, "lost-out")})
    job = dead_letter_job("lost-input")
    checkpoint = str(tmp_path / "checkpoint")
    produce_json(bootstrap, run.topic_metrics, [{"n": i} for i in range(5)])
    first = start_query(spark, run, job, checkpoint, available_now=True)
    first.awaitTermination(120)
    assert first.exception() is None, first.exception()

    produce_json(bootstrap, run.topic_metrics, [{"n": i} for i in range(5, 10)])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(run.topic_metrics, 0, 8)]).values():
        future.result(timeout=30)  # offsets 5-7, which the next batch would read, are gone

    again = start_query(spark, run, job, checkpoint, available_now=True)
    with pytest.raises(Exception):  # noqa: B017, PT011 - the failure is read from the query below
        again.awaitTermination(120)
    error = query_failure(again)  # as the runner reads it
    assert error is not None, "the query read on past deleted records"
    assert is_source_reset(error), str(error)[:3000]
    assert any(c.startswith(f"{KAFKA_DATA_LOSS}.") for c in error_conditions(error))  # recognised by its error class


def test_the_error_class_is_read_along_the_causes_of_a_failed_spark_call(spark, settings, new_topic, bootstrap):
    """The same loss met by a plain batch read: Spark's KafkaIllegalStateException carries the class."""
    topic = new_topic(1, "lost-batch")
    produce_json(bootstrap, topic, [{"n": i} for i in range(5)])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 3)]).values():
        future.result(timeout=30)
    frame = (
        spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
        .option("startingOffsets", f'{{"{topic}": {{"0": 0}}}}').option("failOnDataLoss", "true").load()
    )
    with pytest.raises(Exception) as failure:  # noqa: PT011 - the error class is what is asserted
        frame.collect()
    assert any(c.startswith(KAFKA_DATA_LOSS) for c in error_conditions(failure.value)), failure.value
