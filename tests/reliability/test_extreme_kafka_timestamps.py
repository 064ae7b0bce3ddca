"""Record timestamps at the extremes through Spark's built-in Kafka source and both jobs.

Kafka lets a producer set any 64-bit timestamp. Spark's Kafka source fails its task on one
beyond +-2^63 microseconds (measured with Spark 4.2.0: "has timestamp value 9223372036854776
that overflows when converting to Spark's microsecond-precision TimestampType"), and re-reads
it after every restart: one record would stop a job for good. The input topics, as
``infra/kafka/topics.toml`` creates them, make the broker refuse such a record to its
producer (and one before 1582, which Spark would shift by the Julian calendar: measured, a
dead letter then carried a time 2,102 days off); every timestamp the broker accepts
(negative, 1, a century behind, ~285,000 years ahead) is processed or dead-lettered by the jobs exactly as the reference says, and the jobs
run on. A topic created with Kafka's defaults is named in a warning at job start.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest
from confluent_kafka import KafkaError, Producer

from streamstate.jobs.kafka.timestamps import SPARK_LIMIT_MS, exposed_topics
from tests.scenario import build_scenario, differences, produce_scenario, run_jobs_in_process

pytestmark = pytest.mark.spark

NOW = int(time.time() * 1000)
CENTURY_MS = 3_155_760_000_000
ACCEPTED = [-5, 1, 2**31, NOW - CENTURY_MS + 86_400_000, NOW + 8_900_000_000_000_000, NOW]
# Beyond what Spark converts (it fails), or before 1582 (it shifts the time), or a century behind.
BEYOND = [SPARK_LIMIT_MS + 1, 2**62, 2**63 - 1, -(2**62), -(2**63) + 1, -8_900_000_000_000_000, NOW - CENTURY_MS - 86_400_000]


def test_unreadable_timestamps_are_refused_by_the_broker_and_the_rest_processed(spark, bootstrap, pipeline_stack, new_topic):
    settings = pipeline_stack.settings
    inputs = [settings.topic_user_events, settings.topic_metrics]
    plain = new_topic(1, "plain")
    assert exposed_topics(settings, [*inputs, plain], NOW).keys() == {plain}, "only the topic made with Kafka's defaults"

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
    expected = scenario.expected(settings)
    stages = Counter(letter.stage for letter in expected.dead_letters.values())
    assert stages["clock_skew"] > 0, f"records stamped 1 ms after the epoch are skewed: {stages}"

    outputs = run_jobs_in_process(spark, bootstrap, settings, scenario)  # asserts both queries still run
    problems = differences(expected, outputs)
    assert not problems, "outputs differ from the reference:\n" + "\n".join(problems)
    print(f"\nextreme Kafka timestamps: {len(BEYOND)} refused by the broker; {len(produced)} accepted, dead letters {dict(stages)}")
