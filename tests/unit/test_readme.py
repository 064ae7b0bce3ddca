"""The README documents the code as it is."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from streamstate_pipeline.cli import main

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_configuration_table_matches_the_settings():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["config", "--markdown"]) == 0
    assert out.getvalue().strip() in README, "README configuration table is stale: paste `streamstate config --markdown`"


def test_the_two_commands_are_named_and_ci_runs_the_test_command():
    assert "make run" in README and "make test" in README
    ci = (Path(__file__).resolve().parents[2] / ".ci" / "run").read_text()
    assert "make test" in ci
