"""The scripted scenario through both jobs on real Spark and a real broker, on both
profiles: every alert, closed session, dead letter and final state snapshot equals the
plain-Python reference. Embedded: Tansu, the Python Kafka source, local checkpoints;
production: Apache Kafka, Spark's built-in connector, s3a:// checkpoints in MinIO."""

from __future__ import annotations

import pytest

from streamstate.jobs.kafka import kafka_format
from tests.checkpoints import CheckpointFiles
from tests.scenario import assert_outputs_match, build_scenario, pipeline_topics, produce_scenario, run_jobs_in_process

pytestmark = pytest.mark.spark


@pytest.fixture
def pipeline_settings(profile_settings, profile_topic):
    return profile_settings.model_copy(update={**pipeline_topics(profile_topic), "trigger_interval": "1 second"})


def test_scenario_through_both_jobs_equals_the_reference(profile_spark, profile_stack, pipeline_settings):
    # The run must really use the profile's parts: its Kafka format, its checkpoint store.
    assert kafka_format(profile_spark, pipeline_settings) == profile_stack.profile.kafka_source
    bootstrap = pipeline_settings.bootstrap_servers
    scenario = build_scenario(seed=11)
    produce_scenario(bootstrap, scenario, pipeline_settings)
    outputs = run_jobs_in_process(profile_spark, bootstrap, pipeline_settings, scenario)
    assert outputs.alert_copies >= len(outputs.alerts)
    assert_outputs_match(scenario, outputs, pipeline_settings)
    for job in ("sessions", "anomalies"):
        assert CheckpointFiles.of(profile_stack, pipeline_settings.checkpoint(job)).batches("commits"), job
