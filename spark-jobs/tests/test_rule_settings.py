"""Every default of the rules and of ``StateSpec`` comes from ``Settings``, and ``from_settings``
carries every setting a rule has into it."""

from __future__ import annotations

import dataclasses

import pytest

from streamstate_jobs.anomalies.rules import AnomalyRule
from streamstate_jobs.sessions.rules import SessionRule
from streamstate.state import StateSpec
from streamstate_pipeline.cli_common import setting_error
from streamstate_jobs.anomalies import job as anomalies_job
from streamstate_jobs.sessions import job as sessions_job
from streamstate_pipeline.settings import NEW_CHECKPOINT_BUCKETS, UNRECORDED_BUCKETS, Settings, defaults


def test_the_rules_defaults_are_the_settings_defaults():
    assert SessionRule() == SessionRule.from_settings(Settings.model_construct())
    assert AnomalyRule() == AnomalyRule.from_settings(Settings.model_construct())
    spec = StateSpec.function(lambda key, value, state: None)
    # A user's query records no bucket count in its checkpoint, so StateSpec's default never changes.
    assert (spec.bucket_count, spec.hot_key_capacity) == (UNRECORDED_BUCKETS, defaults().state_hot_keys)
    for job in (sessions_job, anomalies_job):
        job_spec = job.state_spec(defaults())
        assert (job_spec.bucket_count, job_spec.hot_key_capacity) == (NEW_CHECKPOINT_BUCKETS, defaults().state_hot_keys)
        assert job.state_spec(defaults().model_copy(update={"state_buckets": 64})).bucket_count == 64


def test_the_defaults_ignore_the_environment(monkeypatch):
    monkeypatch.setenv("STREAMSTATE_SESSION_GAP_MS", "7")
    assert Settings().session_gap_ms == 7
    assert defaults().session_gap_ms == Settings.model_fields["session_gap_ms"].default != 7


def test_from_settings_takes_every_field_of_a_rule_from_the_settings():
    settings = Settings(
        session_gap_ms=1_001,
        burst_page_views=1_002,
        burst_window_ms=1_003,
        long_session_ms=1_004,
        dedupe_retention_ms=1_005,
        session_state_ttl_ms=1_006,
        anomaly_window=1_007,
        anomaly_threshold=1_008.5,
        anomaly_min_count=1_009,
    )
    for rule, default in ((SessionRule.from_settings(settings), SessionRule()), (AnomalyRule.from_settings(settings), AnomalyRule())):
        for field in dataclasses.fields(rule):
            assert getattr(rule, field.name) != getattr(default, field.name), f"{type(rule).__name__}.{field.name} kept its default"
    assert SessionRule.from_settings(settings).idle_ttl_ms == 1_006
    assert AnomalyRule.from_settings(settings).threshold == 1_008.5


def test_a_state_ttl_below_the_dedupe_retention_is_refused_at_start(monkeypatch):
    """A user removed before its event ids expire would count a re-sent copy twice, silently."""
    monkeypatch.setenv("STREAMSTATE_SESSION_STATE_TTL_MS", "1000")
    monkeypatch.setenv("STREAMSTATE_DEDUPE_RETENTION_MS", "1001")
    with pytest.raises(ValueError) as refused:
        Settings()
    message = setting_error(refused.value)
    assert message.startswith("invalid setting: ") and "STREAMSTATE_SESSION_STATE_TTL_MS" in message, message
    monkeypatch.setenv("STREAMSTATE_DEDUPE_RETENTION_MS", "1000")
    assert Settings().session_state_ttl_ms == 1000


def test_a_state_store_that_transform_with_state_refuses_is_refused_at_start(monkeypatch):
    """Spark's transformWithState runs every stateful query here and refuses the HDFS-backed
    store in the first batch; the setting says so before anything starts."""
    monkeypatch.setenv("STREAMSTATE_STATE_STORE", "hdfs")
    with pytest.raises(ValueError) as refused:
        Settings()
    message = setting_error(refused.value)
    assert "state_store" in message and "transformWithState" in message and "RocksDB" in message, message
