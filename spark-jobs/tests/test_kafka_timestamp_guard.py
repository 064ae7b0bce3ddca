"""Which topic configurations let in a timestamp Spark's Kafka source cannot convert (pure)."""

from __future__ import annotations

from streamstate_jobs.kafka.timestamps import GREGORIAN_START_MS, SPARK_LIMIT_MS, exposed_reason
from streamstate_pipeline.settings import defaults
from streamstate_pipeline.topics import load_topics

NOW = 1_795_000_000_000


def test_kafkas_defaults_are_exposed_and_the_topic_files_inputs_are_not():
    assert "cannot convert" in exposed_reason({}, NOW)
    inputs = {spec.name: spec.config for spec in load_topics(defaults().topics_file)}
    assert exposed_reason(inputs["user-events"], NOW) is None and exposed_reason(inputs["metrics"], NOW) is None


def test_either_bound_alone_is_not_enough_and_log_append_time_is():
    ahead, behind = str(SPARK_LIMIT_MS - NOW), str(NOW - GREGORIAN_START_MS)
    assert exposed_reason({"message.timestamp.after.max.ms": ahead}, NOW) is not None  # before is unbounded
    assert exposed_reason({"message.timestamp.before.max.ms": behind}, NOW) is not None  # after is unbounded
    assert exposed_reason({"message.timestamp.after.max.ms": ahead, "message.timestamp.before.max.ms": behind}, NOW) is None
    assert exposed_reason({"message.timestamp.after.max.ms": str(int(ahead) + 1), "message.timestamp.before.max.ms": behind}, NOW)
    assert exposed_reason({"message.timestamp.after.max.ms": ahead, "message.timestamp.before.max.ms": str(int(behind) + 1)}, NOW)
    assert exposed_reason({"message.timestamp.type": "LogAppendTime"}, NOW) is None
    assert exposed_reason({"message.timestamp.difference.max.ms": "3600000"}, NOW) is None  # the pre-3.6 setting
