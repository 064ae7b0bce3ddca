"""The scripted scenario through both jobs on real Spark and Apache Kafka, read and written
with Spark's built-in connector: every alert, closed session, dead letter and final state
snapshot equals the plain-Python reference. (The S3 checkpoint path has its own run in
tests/reliability/test_crash_recovery.py.)"""

from __future__ import annotations

import pytest

from tests.checkpoints import CheckpointFiles
from tests.scenario import assert_outputs_match, build_scenario, pipeline_topics, produce_scenario, run_jobs_in_process

pytestmark = pytest.mark.spark


@pytest.fixture
def pipeline_settings(settings, new_topic, tmp_path):
    return settings.model_copy(
        update={**pipeline_topics(new_topic), "trigger_interval": "1 second", "checkpoint_root": str(tmp_path / "checkpoints")}
    )


def test_scenario_through_both_jobs_equals_the_reference(spark, stack, pipeline_settings):
    bootstrap = pipeline_settings.bootstrap_servers
    scenario = build_scenario(seed=11)
    produce_scenario(bootstrap, scenario, pipeline_settings)
    outputs = run_jobs_in_process(spark, bootstrap, pipeline_settings, scenario)
    assert outputs.alert_copies >= len(outputs.alerts)
    assert_outputs_match(scenario, outputs, pipeline_settings)
    for job in ("sessions", "anomalies"):
        assert CheckpointFiles.of(stack, pipeline_settings.checkpoint(job)).batches("commits"), job
