"""Bad input fuzzing through both jobs: hypothesis-generated contract-breaking records
(invalid UTF-8, wrong types, huge strings, nested junk, event times out of range, missing
fields, null keys and values, values near Kafka's 1 MB limit) interleaved with the
scripted scenario on both input topics. The jobs keep running, every bad record is on the
dead-letter topic exactly once with a reason, and everything else equals the reference,
which is the same as the reference over the good records alone."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from streamstate_pipeline.contracts import DeadLetter, Metric, UserEvent
from tests.reference_rules import run_reference
from streamstate_producers.produced_record import ProducedRecord, expected_reason
from tests.reliability.bad_records import bad_record, huge_string, near_limit_value
from tests.reliability.conftest import LARGE
from tests.scenario import assert_outputs_match, build_scenario, produce_scenario, read_topic, run_jobs_in_process

pytestmark = pytest.mark.spark

SMALL_PER_TOPIC, BIG_PER_TOPIC = (400, 10) if LARGE else (40, 2)
EVENTS, METRICS = (2_500, 1_500) if LARGE else (800, 500)
TOPICS = {"events": ("user-events", UserEvent), "metrics": ("metrics", Metric)}


def bad_records(data: st.DataObject) -> list[ProducedRecord]:
    records = []
    for name, (topic, model) in TOPICS.items():
        drawn = data.draw(st.lists(bad_record(name), min_size=SMALL_PER_TOPIC, max_size=SMALL_PER_TOPIC))
        for big in (near_limit_value(name), huge_string(name)):
            drawn += data.draw(st.lists(big, min_size=BIG_PER_TOPIC, max_size=BIG_PER_TOPIC))
        records += [ProducedRecord(topic, k, v, expected_reason(model, k, v), "malformed") for k, v in drawn]
    return records


@pytest.fixture
def fuzz_settings(pipeline_stack):
    return pipeline_stack.settings


@settings(
    max_examples=1,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.generate],  # one Spark run per example: no shrinking
    suppress_health_check=list(HealthCheck),
)
@given(data=st.data())
def test_bad_records_become_dead_letters_and_change_nothing_else(spark, bootstrap, fuzz_settings, data):
    scenario = build_scenario(seed=7, events=EVENTS, metrics=METRICS)
    bad = bad_records(data)
    for record in bad:  # interleaved at drawn positions, each input topic keeps its own order
        scenario.records.insert(data.draw(st.integers(0, len(scenario.records)), label="position"), record)
    produced = produce_scenario(bootstrap, scenario, fuzz_settings)
    bad_values = {(r.key, r.value) for r in bad}
    bad_at = {(r.topic, r.partition, r.offset) for r in produced if (r.key, r.value) in bad_values}
    assert len(bad_at) >= len(bad_values)

    good_only = run_reference([r for r in produced if (r.topic, r.partition, r.offset) not in bad_at], fuzz_settings)
    everything = scenario.expected(fuzz_settings)
    for output in ("alerts", "sessions", "session_state", "metric_state"):
        assert getattr(everything, output) == getattr(good_only, output), f"bad records change the reference {output}"

    outputs = run_jobs_in_process(spark, bootstrap, fuzz_settings, scenario)

    letters = [DeadLetter.model_validate_json(m.value()) for m in read_topic(bootstrap, fuzz_settings.topic_dead_letters)]
    copies = Counter((d.source_topic, d.source_partition, d.source_offset) for d in letters)
    assert {at: copies[at] for at in bad_at} == dict.fromkeys(bad_at, 1), "a bad record is not in dead-letters exactly once"
    assert all(d.reason.strip() for d in letters)
    print(
        f"\nfuzzing: {len(bad)} bad records ({2 * BIG_PER_TOPIC} near 1 MB, {2 * BIG_PER_TOPIC} with 200,000-character "
        f"strings) among {len(produced)}; {len(letters)} dead letters"
    )
    assert_outputs_match(scenario, outputs, fuzz_settings)
