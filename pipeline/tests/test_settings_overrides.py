"""Run-time facts written back into Settings are validated as the environment's values are."""

from __future__ import annotations

import pytest

from streamstate_pipeline.errors import ConfigurationError
from streamstate_pipeline.settings import Settings


def test_an_override_is_applied_and_the_rest_kept():
    settings = Settings(api_port=9999, kafka_client_options={"client.rack": "r1"})
    changed = settings.with_overrides(bootstrap_servers="127.0.0.1:19092", partitions=3)
    assert (changed.bootstrap_servers, changed.partitions) == ("127.0.0.1:19092", 3)
    assert changed.api_port == 9999 and changed.kafka_client_options == {"client.rack": "r1"}
    assert settings.bootstrap_servers == "127.0.0.1:9092", "the original is left as it was"


def test_the_environment_is_not_read_again(monkeypatch):
    settings = Settings(api_port=9999)
    monkeypatch.setenv("STREAMSTATE_API_PORT", "1234")
    assert settings.with_overrides(partitions=2).api_port == 9999


def test_a_value_a_setting_refuses_is_refused_with_the_setting_named():
    with pytest.raises(ConfigurationError, match=r"refused setting override \(partitions\): partitions: .*greater than or equal to 1"):
        Settings().with_overrides(partitions=0)
    with pytest.raises(ConfigurationError, match=r"output_transactions: Input should be 'auto', 'on' or 'off'"):
        Settings().with_overrides(output_transactions="sometimes")


def test_the_rules_across_settings_hold_for_an_override():
    with pytest.raises(ConfigurationError, match="session_state_ttl_ms .* is below dedupe_retention_ms"):
        Settings().with_overrides(session_state_ttl_ms=1, dedupe_retention_ms=2)


def test_a_name_that_is_no_setting_is_refused():
    with pytest.raises(ConfigurationError, match="no such setting: bootstrap_server"):
        Settings().with_overrides(bootstrap_server="127.0.0.1:9092")


def test_a_secret_value_stays_out_of_the_error():
    with pytest.raises(ConfigurationError) as refused:
        Settings().with_overrides(kafka_client_options={"sasl.password": "hunter2", "bootstrap.servers": 5})
    assert "hunter2" not in str(refused.value)
