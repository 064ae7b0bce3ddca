"""How the crash tests slice their input (``tests.scenario``): the first chunk holds each job's
first alert by the reference, so a crash point that needs a batch with alerts is reachable in
the first cycle; every record is fed once, in order."""

from __future__ import annotations

from streamstate_pipeline.settings import defaults
from tests.reference_rules import run_reference
from tests.scenario import Feeder, Scenario, build_scenario, records_to_first_alerts, unproduced_records

SETTINGS = defaults()


def alert_kinds(scenario: Scenario, count: int) -> set[str]:
    records = unproduced_records(scenario, SETTINGS)[:count]
    return {alert.kind for alert in run_reference(records, SETTINGS).alerts.values()}


def test_the_first_alerts_of_both_jobs_end_the_fewest_records_that_hold_them():
    scenario = build_scenario(7, events=800, metrics=500)
    count = records_to_first_alerts(scenario, SETTINGS)
    kinds, before = alert_kinds(scenario, count), alert_kinds(scenario, count - 1)
    assert "anomaly" in kinds and kinds - {"anomaly"}, kinds
    assert "anomaly" not in before or not before - {"anomaly"}, before


def test_a_scenario_without_both_jobs_alerts_is_fed_whole_first():
    scenario = Scenario(7, build_scenario(7, events=800, metrics=500).records[:100])
    assert alert_kinds(scenario, len(scenario.records)) == set()
    assert records_to_first_alerts(scenario, SETTINGS) == len(scenario.records)


def slices(feeder: Feeder) -> list[list]:
    return feeder._slices  # what feed(k) produces as chunk k


def test_the_first_chunk_holds_at_least_first_and_the_rest_is_split_evenly():
    scenario = build_scenario(7, events=800, metrics=500)
    chunks = slices(Feeder("unused:9092", SETTINGS, scenario, 7, first=821))
    assert [len(c) for c in chunks] == [821, 80, 80, 80, 80, 80, 79]
    assert [r for c in chunks for r in c] == scenario.records


def test_a_first_chunk_no_larger_than_an_even_split_changes_nothing():
    scenario = build_scenario(7, events=800, metrics=500)
    even = slices(Feeder("unused:9092", SETTINGS, scenario, 7))
    assert [len(c) for c in even] == [186] * 6 + [184]
    assert slices(Feeder("unused:9092", SETTINGS, scenario, 7, first=100)) == even
    whole = slices(Feeder("unused:9092", SETTINGS, scenario, 7, first=len(scenario.records)))
    assert [len(c) for c in whole] == [len(scenario.records)]
