"""The scripted scenario through both jobs on real Spark and the real broker: every alert,
closed session, dead letter and final state snapshot equals the plain-Python reference."""

from __future__ import annotations

import pytest

from streamstate.jobs import anomalies_job, sessions_job
from streamstate.jobs.runner import start_query
from tests.scenario import assert_outputs_match, build_scenario, collect_outputs, pipeline_topics, produce_scenario

pytestmark = pytest.mark.spark


@pytest.fixture
def pipeline_settings(settings, new_topic, tmp_path):
    return settings.model_copy(
        update={**pipeline_topics(new_topic), "checkpoint_root": str(tmp_path), "trigger_interval": "1 second"}
    )


def test_scenario_through_both_jobs_equals_the_reference(spark, bootstrap, pipeline_settings):
    scenario = build_scenario(seed=11)
    produce_scenario(bootstrap, scenario, pipeline_settings)
    queries = [
        start_query(spark, pipeline_settings, job, module.build, pipeline_settings.checkpoint(job))
        for job, module in (("sessions", sessions_job), ("anomalies", anomalies_job))
    ]
    try:
        outputs = collect_outputs(bootstrap, pipeline_settings, scenario=scenario, timeout_s=300)
        for query in queries:
            assert query.exception() is None, query.exception()
    finally:
        for query in queries:
            query.stop()
    assert outputs.alert_copies >= len(outputs.alerts)
    assert_outputs_match(scenario, outputs, pipeline_settings)
