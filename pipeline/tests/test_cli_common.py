"""Every command line takes the same --version, --bootstrap-servers and -X options
(pipeline/src/streamstate_pipeline/cli_common.py), and the values reach the settings."""

from __future__ import annotations

import argparse
import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from streamstate_pipeline.cli_common import add_common_options, client_option, settings_from_args
from streamstate.spark_python import LAUNCHER
from infra.locked_requirements import workspace_members

# The launcher is how Spark starts Python workers (library/tests/test_spark_python.py), not a user command.
SCRIPTS = {
    name: target
    for member in workspace_members().values()
    for name, target in tomllib.loads((member / "pyproject.toml").read_text())["project"].get("scripts", {}).items()
    if name != LAUNCHER
}
BIN = Path(sys.executable).parent
# Where each command takes its Kafka options (streamstate and streamstate-produce have sub-commands).
KAFKA_HELP = {
    "streamstate": ["topics", "create", "--help"],
    "streamstate-produce": ["events", "--help"],
}


def _run(script: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / script), *argv], capture_output=True, text=True, timeout=120)


def test_every_console_script_is_covered_here():
    assert set(SCRIPTS) == {"streamstate", "streamstate-produce", "streamstate-api",
                            "streamstate-sessions-job", "streamstate-anomalies-job"}


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_every_command_prints_the_package_version(script):
    result = _run(script, "--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{script} {importlib.metadata.version('streamstate')}"


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_every_command_takes_the_same_kafka_options(script):
    result = _run(script, *KAFKA_HELP.get(script, ["--help"]))
    assert result.returncode == 0, result.stderr
    assert "--bootstrap-servers HOST:PORT[,...]" in result.stdout
    assert "-X KEY=VALUE" in result.stdout


# The parsers differ (streamstate-produce's reports errors itself): one of each kind.
@pytest.mark.parametrize("script", ["streamstate-produce", "streamstate-api"])
def test_a_malformed_client_option_is_one_usage_error(script):
    argv = [*KAFKA_HELP.get(script, [])[:-1], "-X", "no-equals-sign"]
    result = _run(script, *argv)
    assert result.returncode == 2
    assert "expected KEY=VALUE" in result.stderr and "Traceback" not in result.stderr


def test_client_option_splits_at_the_first_equals_sign():
    assert client_option("sasl.password=a=b") == ("sasl.password", "a=b")
    assert client_option(" ssl.ca.location =") == ("ssl.ca.location", "")
    for bad in ("", "=value", "novalue"):
        with pytest.raises(argparse.ArgumentTypeError):
            client_option(bad)


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="test")
    add_common_options(parser)
    return parser.parse_args(argv)


def test_bootstrap_servers_flag_overrides_the_environment(monkeypatch):
    monkeypatch.setenv("STREAMSTATE_BOOTSTRAP_SERVERS", "from-env:9092")
    assert settings_from_args(_parse()).bootstrap_servers == "from-env:9092"
    assert settings_from_args(_parse("--bootstrap-servers", "flag:1")).bootstrap_servers == "flag:1"


def test_other_overrides_apply_and_none_means_not_given(monkeypatch):
    monkeypatch.setenv("STREAMSTATE_API_PORT", "8123")
    settings = settings_from_args(_parse(), api_port=None, api_host="0.0.0.0")
    assert (settings.api_port, settings.api_host) == (8123, "0.0.0.0")


def test_client_options_reach_the_settings_merged_over_the_configured_ones(monkeypatch):
    monkeypatch.setenv("STREAMSTATE_KAFKA_CLIENT_OPTIONS", '{"security.protocol": "SSL", "client.id": "env"}')
    args = _parse("-X", "client.id=cli", "-X", "sasl.mechanism=PLAIN", "-X", "sasl.mechanism=SCRAM-SHA-256")
    assert settings_from_args(args).kafka_client_options == {
        "security.protocol": "SSL", "client.id": "cli", "sasl.mechanism": "SCRAM-SHA-256",
    }
