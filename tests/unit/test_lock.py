"""requirements.lock cannot drift from the workspace's pyproject.toml files, and every install
takes a complete, hash-checked part of it (infra/locked_requirements.py): each image its own
member's, and nothing its member does not use."""

from __future__ import annotations

import importlib.metadata
import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from infra import locked_requirements as locked
from streamstate_pipeline.settings import REPO_ROOT

LOCK = REPO_ROOT / "requirements.lock"
PYPROJECT = REPO_ROOT / "pyproject.toml"
MEMBERS = locked.workspace_members(REPO_ROOT)  # distribution name -> folder
# Each image's member folder, and what its member does not use: the image must not install it.
IMAGES = {
    "spark-jobs": {"fastapi", "uvicorn", "uvloop", "httptools", "rocksdict", "sortedcontainers", "starlette"},
    "services/api": {"pyspark", "py4j", "pandas", "pyarrow", "protobuf", "boto3", "botocore", "xxhash"},
    "producers": {"pyspark", "py4j", "pandas", "pyarrow", "numpy", "protobuf", "fastapi", "uvicorn", "starlette", "rocksdict"},
}
DOCKERFILES = {folder: REPO_ROOT / folder / "Dockerfile" for folder in IMAGES}


def _folder(name: str) -> str:
    return MEMBERS[locked.normalise(name)].relative_to(REPO_ROOT).as_posix()


def _members_required(folder: str) -> set[str]:
    """The member's folder and those of the workspace members it requires, recursively."""
    found, wanted = set(), [folder]
    while wanted:
        current = wanted.pop()
        if current in found:
            continue
        found.add(current)
        groups = locked.pyproject_roots(REPO_ROOT / current / "pyproject.toml")
        wanted += [_folder(locked.requirement_name(r)) for r in groups["runtime"] if locked.requirement_name(r) in MEMBERS]
    return found


def test_the_lock_holds_every_pin_of_the_workspace_at_the_same_version():
    assert locked.drift(REPO_ROOT, locked.read_lock(LOCK)) == []


def _copy_workspace(target: Path) -> Path:
    """The root pyproject.toml, the lock and every member's pyproject.toml, in ``target``."""
    for relative in ["pyproject.toml", "requirements.lock", *(f"{_folder(name)}/pyproject.toml" for name in MEMBERS)]:
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO_ROOT / relative, target / relative)
    return target


def test_a_pin_changed_without_the_lock_is_reported(tmp_path):
    root = _copy_workspace(tmp_path)
    api = root / "services" / "api" / "pyproject.toml"
    api.write_text(api.read_text().replace('"fastapi==', '"fastapi==0.0.1+', 1))
    (root / "pyproject.toml").write_text(PYPROJECT.read_text().replace('"pytest==', '"pytest-nowhere==', 1))
    problems = locked.drift(root, locked.read_lock(LOCK))
    assert any(p.startswith("services/api runtime: fastapi==0.0.1+") and "the lock has fastapi==" in p for p in problems), problems
    assert any("pytest-nowhere" in p and "not in the lock" in p for p in problems), problems


def test_every_locked_package_has_hashes():
    assert all(entry.hashes for entry in locked.read_lock(LOCK).values())


def _selection(argv: list[str], capsys) -> dict[str, str]:
    assert locked.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(line.startswith("    --hash=sha256:") or "==" in line for line in lines)
    return {locked.normalise(m[1]): m[2] for m in (re.match(r"(\S+)==(\S+)", line) for line in lines) if m}


def _installer_args(path: Path) -> list[str]:
    match = re.search(r"python (?:infra/)?locked_requirements\.py ([^>]*)>", path.read_text())
    assert match, f"{path} does not install from requirements.lock"
    return shlex.split(match[1])


def _instructions(path: Path) -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", path.read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def _member_install(path: Path) -> list[str]:
    """The folders of the Dockerfile's `pip install --no-deps` (the members, from their folders)."""
    match = re.search(r"pip install ([^&\n]*--no-deps[^&\n]*?)(?: &&|$)", "\n".join(rest for k, rest in _instructions(path) if k == "RUN"), re.M)
    assert match, f"{path} installs no member with --no-deps"
    words = shlex.split(match[1])
    assert "-e" not in words and "--editable" not in words, f"{path}: an image installs its members, not editable ones"
    return [word.removeprefix("./").rstrip("/") for word in words if not word.startswith("-")]


@pytest.mark.parametrize("folder", IMAGES)
def test_each_image_installs_the_lock_with_hashes_then_its_members_alone(folder):
    path = DOCKERFILES[folder]
    text = path.read_text()
    assert "pip install --no-cache-dir --require-hashes -r" in text
    assert "requirements.lock" in text
    argv = _installer_args(path)
    assert "--without" not in argv and "--all-members" not in argv
    assert [argv[i + 1] for i, word in enumerate(argv) if word == "--member"] == [folder]
    # Its member and the members that one requires, nothing more, each copied whole first.
    installed = _member_install(path)
    assert set(installed) == _members_required(folder), installed
    copied = {rest.split()[-1].rstrip("/") for keyword, rest in _instructions(path) if keyword == "COPY" and "--from=" not in rest}
    assert set(installed) <= copied, f"{path} installs folders it does not copy"


@pytest.mark.parametrize("folder", IMAGES)
def test_the_dependency_layer_has_all_the_selection_reads(folder, tmp_path, capsys):
    """The Dockerfile's COPY steps before its selection, replayed into an empty folder, give the
    same selection as the whole checkout: no member's pyproject.toml is missing from the layer."""
    path = DOCKERFILES[folder]
    for keyword, rest in _instructions(path):
        if keyword == "RUN" and "locked_requirements.py" in rest:
            break
        if keyword == "COPY" and "--from=" not in rest:
            *sources, destination = rest.split()
            if destination.startswith("/"):
                continue  # outside WORKDIR: not what the selection reads
            for source in sources:
                target = tmp_path / destination / (Path(source).name if destination.endswith("/") else "")
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(REPO_ROOT / source, target)
    else:
        pytest.fail(f"{path} runs no locked_requirements.py")
    argv = _installer_args(path)
    in_layer = _selection(["--root", str(tmp_path), *argv], capsys)
    assert in_layer == _selection(argv, capsys)
    members_in_layer = {p.relative_to(tmp_path).as_posix() for p in locked.workspace_members(tmp_path).values()}
    assert members_in_layer == _members_required(folder), "the layer copies the pyproject.toml of members the image does not install"


def _dependencies_installed_here(name: str) -> set[str]:
    """What the installed distribution ``name`` requires on this machine (its metadata, not the lock)."""
    needed = set()
    for text in importlib.metadata.requires(name) or []:
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
            needed.add(locked.normalise(requirement.name))
    return needed


def _distributions_imported(folder: str) -> set[str]:
    """The third-party distributions a member's code imports: every module of its package, and the
    console scripts of the members it installs with it (the pipeline's `streamstate` command).
    Run in a fresh interpreter on this checkout's sources."""
    packages = [p.name for p in (REPO_ROOT / folder / "src").iterdir() if (p / "__init__.py").is_file()]
    scripts = [
        target.split(":")[0]
        for member in _members_required(folder)
        for target in tomllib.loads((REPO_ROOT / member / "pyproject.toml").read_text())["project"].get("scripts", {}).values()
    ]
    paths = [str(REPO_ROOT / member / "src") for member in _members_required(folder)]
    probe = (
        "import importlib, importlib.metadata, json, pkgutil, sys\n"
        f"sys.path[:0] = {paths!r}\n"
        f"for name in {packages!r}:\n"
        "    package = importlib.import_module(name)\n"
        "    for info in pkgutil.walk_packages(package.__path__, name + '.'):\n"
        "        if not info.name.endswith('.__main__'):\n"
        "            importlib.import_module(info.name)\n"
        f"for name in {scripts!r}: importlib.import_module(name)\n"
        "owners = importlib.metadata.packages_distributions()\n"
        "print(json.dumps(sorted({d for m in {n.split('.')[0] for n in sys.modules} for d in owners.get(m, [])})))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT / folder)
    assert result.returncode == 0, result.stderr
    return {locked.normalise(name) for name in json.loads(result.stdout)} - set(MEMBERS)


def _assert_complete(chosen: dict[str, str], argv: list[str]) -> None:
    for name, version in chosen.items():
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue  # a build tool or a package of another platform: not in this venv
        assert installed == version, f"{name}: the venv has {installed}, the lock {version}"
        missing = _dependencies_installed_here(name) - set(chosen)
        assert not missing, f"{name} needs {sorted(missing)}, which the selection {argv} leaves out"


@pytest.mark.parametrize("folder", IMAGES)
def test_each_image_selection_is_complete_and_leaves_out_what_its_member_does_not_use(folder, capsys):
    argv = _installer_args(DOCKERFILES[folder])
    chosen = _selection(argv, capsys)
    _assert_complete(chosen, argv)
    # What the members' metadata requires, and what their code imports.
    for member in _members_required(folder):
        requires = {locked.requirement_name(r) for r in locked.pyproject_roots(REPO_ROOT / member / "pyproject.toml")["runtime"]}
        assert not (requires - set(MEMBERS)) - set(chosen), f"{member}'s requirements are not all in the {folder} image"
    imported = _distributions_imported(folder) - {"setuptools"}  # setuptools: its distutils hook, installed by the build group
    assert not imported - set(chosen), f"the {folder} image lacks {sorted(imported - set(chosen))}, which its code imports"
    unused = IMAGES[folder] & set(chosen)
    assert not unused, f"the {folder} image installs {sorted(unused)}, which its member does not use"
    assert not IMAGES[folder] & imported, f"the {folder} code imports {sorted(IMAGES[folder] & imported)}"


def test_make_setup_selection_is_complete(capsys):
    argv = ["--all-members", "--group", "test", "--group", "docs"]
    assert argv == shlex.split(re.search(r"locked_requirements\.py ([^>]*?) >", (REPO_ROOT / "Makefile").read_text().split("[2/3]")[1])[1])
    _assert_complete(_selection(argv, capsys), argv)


def test_the_makefile_installs_from_the_lock_with_hashes():
    makefile = (REPO_ROOT / "Makefile").read_text()
    assert "locked_requirements.py --all-members --group test --group docs >" in makefile
    assert makefile.count("--require-hashes") >= 2
    assert "pip install --no-deps --no-build-isolation $(addprefix -e ,$(MEMBERS))" in makefile
    members = re.search(r"^MEMBERS\s*:=(.*)$", makefile, re.M)
    assert members and members[1].split() == [_folder(name) for name in MEMBERS], "the Makefile's MEMBERS are the workspace's"


def test_make_lock_runs_while_the_lock_lacks_a_new_pin(tmp_path, capsys):
    """`make lock` is how a new pin gets into the lock, so it cannot need an install from the
    lock first (`setup` fails on the missing pin): it installs only its own tool, uv."""
    makefile = (REPO_ROOT / "Makefile").read_text()
    prerequisites = re.search(r"^lock:([^#\n]*)", makefile, re.M)
    assert prerequisites is not None and prerequisites[1].split() == []
    root = _copy_workspace(tmp_path)
    producers = root / "producers" / "pyproject.toml"
    producers.write_text(producers.read_text().replace("dependencies = [", 'dependencies = ["not-yet-locked==1.0", ', 1))
    with pytest.raises(SystemExit):  # what setup runs: the lock lacks the new pin
        locked.main(["--root", str(root), "--all-members", "--group", "test"])
    assert "not-yet-locked" in capsys.readouterr().err
    assert "locked_requirements.py --group lock >" in makefile
    assert set(_selection(["--root", str(root), "--group", "lock"], capsys)) == {"uv"}
