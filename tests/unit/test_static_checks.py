"""The linter and the type checker, configured in pyproject.toml, are clean: make test runs them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from streamstate.settings import REPO_ROOT

BIN = Path(sys.executable).parent


def _run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / command[0]), *command[1:]], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing():
    result = _run("ruff", "check", "streamstate", "tests", "bench", "examples", "spark-jobs", "infra")
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]


def test_mypy_finds_nothing_in_the_product():
    result = _run("mypy")  # files and settings: [tool.mypy] in pyproject.toml
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
