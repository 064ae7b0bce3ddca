"""The Kafka source's options: the fetch sizes the jobs read with, and what overrides them."""

from __future__ import annotations

from streamstate_jobs.kafka import kafka_source_options
from streamstate_pipeline.settings import Settings


def test_the_source_fetches_in_large_polls_by_default():
    options = kafka_source_options(Settings(bootstrap_servers="broker:9092"), "user-events")
    assert options["kafka.max.poll.records"] == "10000"
    assert options["kafka.max.partition.fetch.bytes"] == str(8 * 1024 * 1024)
    assert options["kafka.bootstrap.servers"] == "broker:9092"
    assert options["subscribe"] == "user-events"


def test_client_options_and_a_calls_own_options_win_over_the_fetch_sizes():
    settings = Settings(kafka_client_options={"max.partition.fetch.bytes": "1048576", "java.max.poll.records": "500"})
    options = kafka_source_options(settings, "user-events")
    assert options["kafka.max.partition.fetch.bytes"] == "1048576"
    assert options["kafka.max.poll.records"] == "500"
    assert kafka_source_options(Settings(), "t", **{"kafka.max.poll.records": "42"})["kafka.max.poll.records"] == "42"
