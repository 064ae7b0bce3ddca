"""The linter and the type checker, configured in pyproject.toml, are clean: make test runs them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_the_layers_import_contracts_hold():
    result = _run("lint-imports", "--no-cache")  # contracts: [tool.importlinter] in pyproject.toml
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]


@pytest.mark.parametrize("module, imports, contract", [
    ("state/_layer_break.py", "from streamstate.settings import Settings", "knows no application"),
    ("api/_layer_break.py", "import streamstate.jobs.runner", "never import the jobs"),
    ("jobs/_layer_break.py", "from streamstate.stack.launcher import EmbeddedStack", "Only the command line starts"),
])
def test_a_layer_break_fails_the_contracts(tmp_path, module, imports, contract):
    """The contracts can fail: a copy of the package with one import across a layer breaks the one
    contract that forbids it (a copy, so that the checkout stays as it is)."""
    shutil.copytree(REPO_ROOT / "streamstate", tmp_path / "streamstate", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "streamstate" / module).write_text(f"{imports}\n")
    result = subprocess.run([str(BIN / "lint-imports"), "--no-cache"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert result.returncode != 0, result.stdout[-3000:]
    broken = [line for line in result.stdout.splitlines() if "BROKEN" in line]
    assert len(broken) == 1 and contract in result.stdout.split("BROKEN")[0].rsplit("\n\n", 1)[-1], result.stdout[-3000:]
