"""The scripted scenario through both jobs reading Kinesis (STREAMSTATE_SOURCE=kinesis) on real
Spark, the real local Kinesis server and the real broker (outputs stay on Kafka): every alert,
closed session, dead letter and final snapshot equals the plain-Python reference."""

from __future__ import annotations

import pytest

from tests.kinesis_testing import produce_scenario_to_kinesis
from tests.scenario import assert_outputs_match, build_scenario, pipeline_topics, run_jobs_in_process

pytestmark = pytest.mark.spark


def test_scenario_through_kinesis_equals_the_reference(spark, bootstrap, kinesis_settings, new_topic, new_stream, tmp_path):
    settings = kinesis_settings.model_copy(
        update={
            **pipeline_topics(new_topic),
            "source": "kinesis",
            "topic_user_events": new_stream(4, "events"),
            "topic_metrics": new_stream(4, "metrics"),
            "checkpoint_root": str(tmp_path),
            "trigger_interval": "1 second",
        }
    )
    scenario = build_scenario(seed=11)
    produce_scenario_to_kinesis(settings, scenario)
    outputs = run_jobs_in_process(spark, bootstrap, settings, scenario)
    assert outputs.alert_copies >= len(outputs.alerts)
    assert_outputs_match(scenario, outputs, settings)
    refused = [d for d in outputs.dead_letters.values() if d.stage == "contract"]
    assert refused and {d.source_topic for d in refused} == {settings.topic_user_events, settings.topic_metrics}
    assert all(d.source_sequence_number for d in refused), "contract dead letters of Kinesis records carry the exact sequence number"
