"""The Prometheus configs: one source for embedded and compose, valid for promtool."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from streamstate_stack.observability import (
    ALERT_RULES_PATH,
    COMPOSE_CONFIG_PATH,
    prometheus_config,
    render_compose_prometheus_config,
    render_embedded_prometheus_config,
)
from streamstate_pipeline.settings import Settings


def test_committed_compose_config_is_the_rendered_one():
    assert COMPOSE_CONFIG_PATH.read_text() == render_compose_prometheus_config(), (
        "infra/prometheus/prometheus.yml is stale: run `python -m streamstate_stack.observability`"
    )


def test_embedded_config_scrapes_the_stack_ports(tmp_path):
    settings = Settings(api_host="0.0.0.0", api_port=18000, sessions_metrics_port=19101,
                        anomalies_metrics_port=19102, prometheus_port=19090)
    text = render_embedded_prometheus_config(settings, tmp_path / "sub" / "prometheus.yml").read_text()
    for target in ("127.0.0.1:18000", "127.0.0.1:19101", "127.0.0.1:19102", "127.0.0.1:19090"):
        assert f"'{target}'" in text
    assert "scrape_interval: 2s" in text


def test_unknown_scrape_job_is_refused():
    with pytest.raises(ValueError, match="unknown scrape jobs"):
        prometheus_config({"nope": "x:1"}, "5s")


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (infra/install-test-deps.sh)")
def test_promtool_accepts_both_configs(tmp_path):
    embedded = render_embedded_prometheus_config(Settings(), tmp_path / "prometheus.yml")
    # The compose config names the rules file by its path inside the container.
    for path, options in ((COMPOSE_CONFIG_PATH, ["--syntax-only"]), (embedded, [])):
        result = subprocess.run(["promtool", "check", "config", *options, str(path)], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (infra/install-test-deps.sh)")
def test_alert_rules_fire_on_their_series_and_stay_quiet_on_a_healthy_stream():
    """infra/prometheus/alerts.test.yml: skewed clocks, late events, refused records, a job down."""
    rules = ALERT_RULES_PATH.parent
    for command in (["check", "rules", "alerts.yml"], ["test", "rules", "alerts.test.yml"]):
        result = subprocess.run(["promtool", *command], capture_output=True, text=True, cwd=rules)
        assert result.returncode == 0, result.stdout + result.stderr


def test_both_configs_load_the_alert_rules(tmp_path):
    assert "rule_files:\n  - /etc/prometheus/alerts.yml" in render_compose_prometheus_config()
    embedded = render_embedded_prometheus_config(Settings(), tmp_path / "prometheus.yml").read_text()
    assert f"rule_files:\n  - {ALERT_RULES_PATH}" in embedded
