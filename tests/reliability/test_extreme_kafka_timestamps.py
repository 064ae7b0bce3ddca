"""Record metadata at the extremes through Spark's built-in Kafka source and both jobs:
timestamps, 2,000 headers, a key that fills a record.

Kafka lets a producer set any 64-bit timestamp. Spark's Kafka source fails its task on one
beyond +-2^63 microseconds (measured with Spark 4.2.0: "has timestamp value 9223372036854776
that overflows when converting to Spark's microsecond-precision TimestampType"), and re-reads
it after every restart: one record would stop a job for good. The input topics, as
``infra/kafka/topics.toml`` creates them, make the broker refuse such a record to its
producer (and one before 1582, which Spark would shift by the Julian calendar: measured, a
dead letter then carried a time 2,102 days off); every timestamp the broker accepts
(negative, 1, a century behind, ~285,000 years ahead) is processed or dead-lettered by the jobs exactly as the reference says, and the jobs
run on. A topic created with Kafka's defaults is named in a warning at job start; on such a
topic a record Spark cannot read is a dead letter and is skipped, and the jobs run on (issue 51).
"""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest
from confluent_kafka import KafkaError, Producer

from streamstate_jobs.kafka.timestamps import SPARK_LIMIT_MS, exposed_topics
from tests.reference_rules import SourceRecord
from tests.scenario import (
    build_scenario, differences, produce_scenario, read_outputs, read_topic, run_jobs_in_process, start_jobs_in_process,
)

pytestmark = pytest.mark.spark

NOW = int(time.time() * 1000)
CENTURY_MS = 3_155_760_000_000
ACCEPTED = [-5, 1, 2**31, NOW - CENTURY_MS + 86_400_000, NOW + 8_900_000_000_000_000, NOW]
# Beyond what Spark converts (it fails), or before 1582 (it shifts the time), or a century behind.
BEYOND = [SPARK_LIMIT_MS + 1, 2**62, 2**63 - 1, -(2**62), -(2**63) + 1, -8_900_000_000_000_000, NOW - CENTURY_MS - 86_400_000]


def _heavy_metadata(bootstrap: str, topic: str, template) -> list[SourceRecord]:
    """A valid event under 2,000 headers (~800 kB of them), and one whose key fills the record to
    the broker's 1 MB limit (a key that is not the user id: a contract dead letter, key cut to
    what a dead letter keeps). Headers are the connector's to skip, never the job's to fail on."""
    landed: list[SourceRecord] = []
    producer = Producer({"bootstrap.servers": bootstrap})
    headers = [(f"h{i:04d}", b"x" * 400) for i in range(2_000)]
    body = json.loads(template.value)
    records = [
        (template.key, json.dumps({**body, "event_id": "with-headers"}).encode(), headers),
        (b"k" * 990_000, json.dumps({**body, "event_id": "huge-key"}).encode(), None),
    ]
    for key, value, record_headers in records:
        producer.produce(
            topic, key=key, value=value, headers=record_headers, partition=0,
            on_delivery=lambda e, m: (
                landed.append(SourceRecord(m.topic(), m.partition(), m.offset(), m.key(), m.value(), m.timestamp()[1])) if e is None else pytest.fail(str(e))
            ),
        )
    producer.flush(30)
    assert len(landed) == 2
    return landed


def test_unreadable_timestamps_are_refused_by_the_broker_and_the_rest_processed(spark, bootstrap, pipeline_stack, new_topic):
    settings = pipeline_stack.settings
    inputs = [settings.topic_user_events, settings.topic_metrics]
    plain = new_topic(1, "plain")
    assert exposed_topics(settings.kafka, [*inputs, plain], NOW).keys() == {plain}, "only the topic made with Kafka's defaults"

    refusals = []
    producer = Producer({"bootstrap.servers": bootstrap})
    for stamp in BEYOND:
        producer.produce(settings.topic_user_events, b"k", b"{}", timestamp=stamp, on_delivery=lambda e, m: refusals.append(e))
    producer.flush(30)
    # Kafka 3.9 answers INVALID_RECORD ("Broker failed to validate record"), the reason in its log.
    refused = {KafkaError.INVALID_RECORD, KafkaError.INVALID_TIMESTAMP}
    assert len(refusals) == len(BEYOND) and all(e is not None and e.code() in refused for e in refusals), refusals

    scenario = build_scenario(seed=11, events=120, metrics=80, users=12)
    stamps = [ACCEPTED[i % len(ACCEPTED)] for i in range(len(scenario.records))]
    produced = produce_scenario(bootstrap, scenario, settings, stamps)
    produced += _heavy_metadata(bootstrap, settings.topic_user_events, scenario.records[0])
    expected = scenario.expected(settings)
    stages = Counter(letter.stage for letter in expected.dead_letters.values())
    assert stages["clock_skew"] > 0, f"records stamped 1 ms after the epoch are skewed: {stages}"

    outputs = run_jobs_in_process(spark, bootstrap, settings, scenario)  # asserts both queries still run
    problems = differences(expected, outputs)
    assert not problems, "outputs differ from the reference:\n" + "\n".join(problems)
    print(f"\nextreme Kafka timestamps: {len(BEYOND)} refused by the broker; {len(produced)} accepted, dead letters {dict(stages)}")


def test_an_unreadable_timestamp_on_a_topic_with_kafkas_defaults_is_a_dead_letter_and_the_jobs_run_on(
    spark, bootstrap, pipeline_stack, new_topic
):
    """The broker's bounds only guard topics created from ``topics.toml``: an existing topic, or one
    made with Kafka's defaults, takes any timestamp. A record stamped past what Spark converts must
    be a dead letter there too (reason and source coordinates), every other record processed."""
    plain = new_topic(4, "plain-events", {"retention.ms": "-1"})  # Kafka's defaults otherwise
    settings = pipeline_stack.settings.model_copy(update={"topic_user_events": plain})
    assert exposed_topics(settings.kafka, [plain], NOW).keys() == {plain}

    scenario = build_scenario(seed=13, events=120, metrics=80, users=12)
    produce_scenario(bootstrap, scenario, settings)
    expected = scenario.expected(settings)
    landed = []
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(
        plain, scenario.records[0].key, scenario.records[0].value, partition=0, timestamp=SPARK_LIMIT_MS + 1,
        on_delivery=lambda e, m: landed.append(m.offset()) if e is None else pytest.fail(str(e)),
    )
    producer.flush(30)
    del producer  # not kept polling the broker after the session stops it (a failure keeps this frame)
    unreadable = (plain, 0, landed[0])

    queries = start_jobs_in_process(spark, settings)
    try:
        deadline = time.monotonic() + 300
        while True:
            for query in queries:
                assert query.exception() is None and query.isActive, query.exception()
            got = read_outputs(bootstrap, settings)
            letter = got.dead_letters.pop(unreadable, None)
            if letter is not None and not differences(expected, got):
                break
            assert time.monotonic() < deadline, f"outputs after 300 s: {differences(expected, got)}; unreadable: {letter}"
            time.sleep(3)
    finally:
        for query in queries:
            query.stop()
    assert str(SPARK_LIMIT_MS + 1) in letter.reason and "timestamp" in letter.reason


def test_a_jobs_extra_query_skips_an_unreadable_timestamp_and_leaves_its_dead_letter_to_the_jobs_own_query(
    spark, bootstrap, pipeline_stack, new_topic
):
    """The sessions job's event-counts query reads the same input: it skips the record as well and
    reads on, and writes no dead letter (the job's own query writes the one)."""
    from streamstate_jobs.checkpoints import CheckpointFiles
    from streamstate_jobs.registry import JOBS
    from streamstate_jobs.runner import start_query

    plain = new_topic(1, "plain-counts", {"retention.ms": "-1"})
    settings = pipeline_stack.settings.model_copy(update={"topic_user_events": plain})
    producer = Producer({"bootstrap.servers": bootstrap})
    for i, stamp in enumerate([NOW, SPARK_LIMIT_MS + 1, NOW]):
        event = {"event_id": f"e{i}", "user_id": "u1", "type": "page_view", "ts": NOW - 1_000 + i}
        producer.produce(plain, b"u1", json.dumps(event).encode(), partition=0, timestamp=stamp)
        producer.flush(30)
    del producer

    job = JOBS["sessions"]
    (extra,) = job.extra_queries
    checkpoint = f"{settings.checkpoint(job.name)}-{extra.name}"
    query = start_query(spark, settings, job, checkpoint, extra, available_now=True)
    try:
        query.awaitTermination(240)
        assert query.exception() is None and not query.isActive
        assert [p["numInputRows"] for p in query.recentProgress] == [1], "the last run read the record after it"
    finally:
        query.stop()
    # Batch 0 was cut to [0, 1) and committed; batch 1 failed on offset 1, so batch 0's end moved past it.
    files = CheckpointFiles(spark, checkpoint)
    ends = [json.loads((files.read(f"offsets/{b}") or "").split("\n")[2])[plain]["0"] for b in (0, 1)]
    assert ends == [2, 3] and sorted(files.batches("commits")) == [0, 1]
    assert read_topic(bootstrap, settings.topic_dead_letters) == []
