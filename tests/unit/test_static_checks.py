"""The linter and the type checker, configured in pyproject.toml, are clean: make test runs them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from infra.locked_requirements import workspace_members
from streamstate_pipeline.settings import REPO_ROOT

BIN = Path(sys.executable).parent
MEMBERS = [path.relative_to(REPO_ROOT).as_posix() for path in workspace_members().values()]


def _run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / command[0]), *command[1:]], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_finds_nothing():
    result = _run("ruff", "check", *MEMBERS, "tests", "bench", "examples", "infra")
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]


def test_mypy_finds_nothing_in_the_product():
    result = _run("mypy")  # files and settings: [tool.mypy] in pyproject.toml
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]


def test_the_layers_import_contracts_hold():
    result = _run("lint-imports", "--no-cache")  # contracts: [tool.importlinter] in pyproject.toml
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]


@pytest.mark.parametrize("module, imports, contract", [
    ("library/src/streamstate/state/_layer_break.py", "from streamstate_pipeline.settings import Settings", "knows no application"),
    ("pipeline/src/streamstate_pipeline/_layer_break.py", "import streamstate.state", "the API installs no Spark"),
    ("services/api/src/streamstate_api/_layer_break.py", "import streamstate_jobs.runner", "never import the jobs"),
    ("spark-jobs/src/streamstate_jobs/_layer_break.py", "from streamstate_stack.launcher import EmbeddedStack", "Only the command line starts"),
])
def test_a_layer_break_fails_the_contracts(tmp_path, module, imports, contract):
    """The contracts can fail: a copy of the members' code with one import across a layer breaks the
    one contract that forbids it (a copy, so that the checkout stays as it is)."""
    sources = []
    for member in MEMBERS:
        shutil.copytree(REPO_ROOT / member / "src", tmp_path / member / "src", ignore=shutil.ignore_patterns("__pycache__"))
        sources.append(str(tmp_path / member / "src"))
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / module).write_text(f"{imports}\n")
    result = subprocess.run([str(BIN / "lint-imports"), "--no-cache"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sources)})
    assert result.returncode != 0, result.stdout[-3000:]
    broken = [line for line in result.stdout.splitlines() if "BROKEN" in line]
    assert len(broken) == 1 and contract in " ".join(result.stdout.split("BROKEN")[0].rsplit("\n\n", 1)[-1].split()), result.stdout[-3000:]
