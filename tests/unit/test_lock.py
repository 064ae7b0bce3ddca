"""requirements.lock cannot drift from pyproject.toml, and every install takes a complete,
hash-checked part of it (infra/locked_requirements.py)."""

from __future__ import annotations

import importlib.metadata
import re
import shlex

import pytest
from packaging.requirements import Requirement

from infra import locked_requirements as locked
from streamstate_pipeline.settings import REPO_ROOT

LOCK = REPO_ROOT / "requirements.lock"
PYPROJECT = REPO_ROOT / "pyproject.toml"
DOCKERFILES = [REPO_ROOT / d / "Dockerfile" for d in ("spark-jobs", "services/api", "producers")]


def test_the_lock_holds_every_pin_of_pyproject_at_the_same_version():
    assert locked.drift(PYPROJECT, locked.read_lock(LOCK)) == []


def test_a_pin_changed_without_the_lock_is_reported(tmp_path):
    changed = tmp_path / "pyproject.toml"
    changed.write_text(PYPROJECT.read_text().replace('"fastapi==', '"fastapi==0.0.1+', 1).replace('"pytest==', '"pytest-nowhere==', 1))
    problems = locked.drift(changed, locked.read_lock(LOCK))
    assert any("fastapi" in p and "the lock has fastapi==" in p for p in problems), problems
    assert any("pytest-nowhere" in p and "not in the lock" in p for p in problems), problems


def test_every_locked_package_has_hashes():
    assert all(entry.hashes for entry in locked.read_lock(LOCK).values())


def _selection(argv: list[str], capsys) -> dict[str, str]:
    assert locked.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(line.startswith("    --hash=sha256:") or "==" in line for line in lines)
    return {m[1]: m[2] for m in (re.match(r"(\S+)==(\S+)", line) for line in lines) if m}


def _installer_args(path) -> list[str]:
    match = re.search(r"python (?:infra/)?locked_requirements\.py ([^>]*)>", path.read_text())
    assert match, f"{path} does not install from requirements.lock"
    return shlex.split(match[1])


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.parent.name)
def test_images_install_the_lock_with_hashes_then_the_project_alone(path):
    text = path.read_text()
    assert "pip install --no-cache-dir --require-hashes -r" in text
    assert re.search(r"pip install [^\n]*--no-deps[^\n]* \.", text)
    assert "requirements.lock" in text


def _dependencies_installed_here(name: str) -> set[str]:
    """What the installed distribution ``name`` requires on this machine (its metadata, not the lock)."""
    needed = set()
    for text in importlib.metadata.requires(name) or []:
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            needed.add(locked.normalise(requirement.name))
    return needed


@pytest.mark.parametrize(
    "argv",
    [
        _installer_args(REPO_ROOT / "services" / "api" / "Dockerfile"),
        _installer_args(REPO_ROOT / "producers" / "Dockerfile"),
        _installer_args(REPO_ROOT / "spark-jobs" / "Dockerfile"),
        ["--extra", "test"],
    ],
    ids=["services", "producers", "spark-jobs", "make-setup"],
)
def test_each_selection_is_complete_and_leaves_out_what_it_says(argv, capsys):
    chosen = _selection(argv, capsys)
    without = {locked.normalise(n) for n in argv[argv.index("--without") + 1:]} if "--without" in argv else set()
    assert not without & set(chosen), "a left-out package came back"
    for name, version in chosen.items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # a build tool or a package of another platform: not in this venv
        assert installed == version, f"{name}: the venv has {installed}, the lock {version}"
        missing = _dependencies_installed_here(name) - set(chosen)
        assert not missing, f"{name} needs {sorted(missing)}, which the selection {argv} leaves out"


def test_the_makefile_installs_from_the_lock_with_hashes():
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "locked_requirements.py --extra test" in makefile
    assert makefile.count("--require-hashes") >= 2
    assert "pip install --no-deps --no-build-isolation -e ." in makefile


def test_make_lock_runs_while_the_lock_lacks_a_new_pin(tmp_path, capsys):
    """`make lock` is how a new pin gets into the lock, so it cannot need an install from the
    lock first (`setup` fails on the missing pin): it installs only its own tool, uv."""
    makefile = (REPO_ROOT / "Makefile").read_text()
    prerequisites = re.search(r"^lock:([^#\n]*)", makefile, re.M)
    assert prerequisites is not None and prerequisites[1].split() == []
    added = tmp_path / "pyproject.toml"
    added.write_text(PYPROJECT.read_text().replace("dependencies = [", 'dependencies = [\n    "not-yet-locked==1.0",', 1))
    with pytest.raises(SystemExit):  # what setup runs: the lock lacks the new pin
        locked.main(["--pyproject", str(added), "--extra", "test"])
    capsys.readouterr()
    assert "locked_requirements.py --no-runtime --group lock >" in makefile
    assert set(_selection(["--no-runtime", "--group", "lock", "--pyproject", str(added)], capsys)) == {"uv"}
