"""``tests.scenario.differences``, which ``collect_outputs`` polls until it is empty: with the
API's alert ids read, the API must show every expected alert, once, and no other, so a read
taken while the API still catches up on the alerts topic is read again, not compared; and
``unexpected_for_good``, which ends the polling early: a record the reference lacks on a topic
that only grows cannot go away."""

from __future__ import annotations

from tests.reference_rules import PipelineOutputs
from tests.scenario import Outputs, differences, unexpected_for_good

EXPECTED = PipelineOutputs(alerts={"a1": "alert one", "a2": "alert two"})


def read(api_alert_ids: list[str] | None) -> Outputs:
    return Outputs(alerts=dict(EXPECTED.alerts), alert_copies=2, sessions={}, dead_letters={}, session_state={}, metric_state={},
                   api_alert_ids=api_alert_ids)


def test_the_topics_alone_or_an_api_showing_each_alert_once_match():
    assert differences(EXPECTED, read(None)) == []
    assert differences(EXPECTED, read(["a2", "a1"])) == []


def test_an_api_behind_the_alerts_topic_does_not_match_yet():
    assert differences(EXPECTED, read(["a1"])) == ["the API's alerts: 1 missing ['a2'], 0 unexpected [], 0 shown twice"]


def test_an_alert_shown_twice_or_one_not_expected_does_not_match():
    assert differences(EXPECTED, read(["a1", "a2", "a1"])) == ["the API's alerts: 0 missing [], 0 unexpected [], 1 shown twice"]
    assert differences(EXPECTED, read(["a1", "a2", "zz"])) == ["the API's alerts: 0 missing [], 1 unexpected ['zz'], 0 shown twice"]


def outputs(**given: dict) -> Outputs:
    return Outputs(**{"alerts": {}, "alert_copies": 0, "sessions": {}, "dead_letters": {}, "session_state": {}, "metric_state": {}} | given)


def test_only_an_unexpected_alert_session_or_dead_letter_ends_the_wait():
    expected = PipelineOutputs(alerts={"a1": "alert"}, sessions={"s1": "session"}, dead_letters={("t", 0, 1): "letter"},
                               session_state={"u1": "snapshot"})
    # Missing records may still come, and a snapshot may still be replaced by a newer one.
    assert not unexpected_for_good(expected, outputs())
    assert not unexpected_for_good(expected, outputs(session_state={"u1": "older", "u2": "gone later"}))
    assert not unexpected_for_good(expected, outputs(alerts={"a1": "alert"}, sessions={"s1": "session"}))
    for given in ({"alerts": {"a9": "alert"}}, {"sessions": {"s9": "session"}}, {"dead_letters": {("t", 0, 2): "late"}}):
        assert unexpected_for_good(expected, outputs(**given)), given
