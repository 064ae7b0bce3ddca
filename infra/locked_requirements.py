"""Print the part of requirements.lock an install needs, hashes included, for ``pip install
--require-hashes -r``.

``requirements.lock`` pins every package the workspace's members need (``make lock`` resolves
it with a pinned uv from every member's pyproject.toml, their extras and the root's dependency
groups) with the sha256 of each of its files. An install takes what its roots need: the
runtime dependencies of the ``--member`` folders it names (and of the workspace members those
require), their ``[extras]``, the root's ``--group`` roots, and everything the lock says those
pull in (its ``# via`` annotations). So the API image gets its member's dependencies and no
Spark, and ``make setup`` no benchmark tools. The members themselves are then installed with
``--no-deps``.

Standard library only: the images run it before anything is installed.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROOT_MARKER = "pyproject.toml)"  # how the lock names a requirement of a member itself


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    return normalise(re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0])


@dataclass
class Locked:
    name: str
    version: str
    lines: list[str]  # the requirement line and its hash lines, as in the lock
    parents: set[str] = field(default_factory=set)  # packages that pull it in ("# via")

    @property
    def hashes(self) -> list[str]:
        return re.findall(r"--hash=(\S+)", " ".join(self.lines))


def read_lock(path: Path) -> dict[str, Locked]:
    """The lock's entries by normalised name."""
    entries: dict[str, Locked] = {}
    current: Locked | None = None
    in_via = False
    for raw in path.read_text().splitlines():
        line = raw.rstrip()
        if not line or (line.startswith("#") and current is None):
            continue
        if line.startswith("# The following packages"):  # uv's list of members left out: no entry's "# via"
            current, in_via = None, False
            continue
        if line.startswith("-e "):  # a workspace member: installed from its folder, not the lock
            current, in_via = None, False
            continue
        if current is None and line[0].isspace():
            continue  # the annotations of a skipped member
        if not line[0].isspace() and not line.startswith("#"):
            match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)", line)
            if match is None:
                raise ValueError(f"{path}: not a pinned requirement: {line!r}")
            current = Locked(normalise(match[1]), match[2], [line])
            if current.name in entries:  # one more version of it, for other markers (python_full_version < ...)
                entries[current.name].lines.append(line)
                current = entries[current.name]
            else:
                entries[current.name] = current
            in_via = False
            continue
        text = line.strip()
        if text.startswith("--hash="):
            current.lines.append(line)
        elif text.startswith("# via"):
            in_via = True
            rest = text.removeprefix("# via").strip()
            if rest:
                current.parents.add(rest)
        elif in_via and text.startswith("#"):
            current.parents.add(text.lstrip("#").strip())
    for entry in entries.values():
        entry.parents = {p if ROOT_MARKER in p else normalise(p.split()[0]) for p in entry.parents}
    return entries


def pyproject_roots(pyproject: Path) -> dict[str, list[str]]:
    """A pyproject's requirements by group: ``runtime``, ``extra:<name>``, ``group:<name>``."""
    data = tomllib.loads(pyproject.read_text())
    project = data.get("project", {})
    groups = {"runtime": list(project.get("dependencies", []))}
    for name, requirements in project.get("optional-dependencies", {}).items():
        groups[f"extra:{name}"] = list(requirements)
    for name, requirements in data.get("dependency-groups", {}).items():
        groups[f"group:{name}"] = [r for r in requirements if isinstance(r, str)]
    return groups


def workspace_members(root: Path = ROOT) -> dict[str, Path]:
    """The workspace's member folders (``[tool.uv.workspace]``) by distribution name.

    A member whose pyproject.toml is absent is left out: an image's dependency layer copies only
    the pyproject.toml files of the members it installs (a member those require and the image
    lacks then shows as a package the lock lacks)."""
    data = tomllib.loads((root / "pyproject.toml").read_text())
    members = {}
    for folder in data["tool"]["uv"]["workspace"]["members"]:
        pyproject = root / folder / "pyproject.toml"
        if pyproject.is_file():
            members[normalise(tomllib.loads(pyproject.read_text())["project"]["name"])] = root / folder
    return members


def requirement_extras(requirement: str) -> list[str]:
    match = re.match(r"[^\[;<>=!~\s]+\[([^\]]*)\]", requirement)
    return [extra.strip() for extra in match[1].split(",")] if match else []


def member_roots(spec: str, members: dict[str, Path], root: Path = ROOT) -> set[str]:
    """The third-party requirements of a member named ``folder[extra,...]`` (its folder relative
    to the root, or its distribution name), of its extras, and of the members it requires."""
    folder, _, extras = spec.partition("[")
    by_folder = {path.resolve(): name for name, path in members.items()}
    name = by_folder.get((root / folder).resolve(), normalise(folder))
    if name not in members:
        raise ValueError(f"{folder} is not a workspace member (pyproject.toml [tool.uv.workspace]: {', '.join(sorted(members))})")
    wanted, roots, seen = [(name, [e.strip() for e in extras.rstrip("]").split(",") if e.strip()])], set(), set()
    while wanted:
        name, extras_of = wanted.pop()
        if (name, tuple(extras_of)) in seen:
            continue
        seen.add((name, tuple(extras_of)))
        groups = pyproject_roots(members[name] / "pyproject.toml")
        unknown = [e for e in extras_of if f"extra:{e}" not in groups]
        if unknown:
            raise ValueError(f"{members[name].relative_to(root)} has no extra {', '.join(unknown)}")
        for requirement in groups["runtime"] + [r for e in extras_of for r in groups[f"extra:{e}"]]:
            required = requirement_name(requirement)
            if required in members:
                wanted.append((required, requirement_extras(requirement)))
            else:
                roots.add(required)
    return roots


def select(lock: dict[str, Locked], roots: set[str]) -> list[Locked]:
    """The entries ``roots`` need: the roots and, transitively, whatever the lock says they pull in."""
    missing = roots - set(lock)
    if missing:
        raise ValueError(f"requirements.lock lacks {', '.join(sorted(missing))}: run `make lock` "
                         "(or, for a workspace member, put its pyproject.toml beside the others)")
    chosen = set(roots)
    grew = True
    while grew:
        grew = False
        for name, entry in lock.items():
            if name not in chosen and entry.parents & chosen:
                chosen.add(name)
                grew = True
    return [lock[name] for name in sorted(chosen)]


def drift(root: Path, lock: dict[str, Locked]) -> list[str]:
    """Every pin of the workspace's pyproject files the lock lacks or holds at another version (or
    without hashes); a range only needs its package in the lock."""
    problems = []
    members = workspace_members(root)
    for pyproject in [root / "pyproject.toml", *(path / "pyproject.toml" for path in members.values())]:
        where = pyproject.parent.relative_to(root).as_posix()
        for group, requirements in pyproject_roots(pyproject).items():
            for requirement in requirements:
                name = requirement_name(requirement)
                if name in members:
                    continue
                pinned = re.search(r"==\s*([^\s;,]+)", requirement)
                entry = lock.get(name)
                if entry is None:
                    problems.append(f"{where} {group}: {requirement} is not in the lock")
                elif pinned and entry.version != pinned[1]:
                    problems.append(f"{where} {group}: {requirement}, but the lock has {name}=={entry.version}")
                elif not entry.hashes:
                    problems.append(f"{where} {group}: {name} has no hashes in the lock")
    return problems


def all_members(members: dict[str, Path], root: Path = ROOT) -> list[str]:
    """Every member with every extra, as ``make setup`` installs them."""
    specs = []
    for path in members.values():
        extras = [g.removeprefix("extra:") for g in pyproject_roots(path / "pyproject.toml") if g.startswith("extra:")]
        specs.append(f"{path.relative_to(root).as_posix()}[{','.join(extras)}]" if extras else path.relative_to(root).as_posix())
    return specs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the workspace's root (default: this checkout's)")
    parser.add_argument("--lock", type=Path, help="default: requirements.lock in the root")
    parser.add_argument("--member", action="append", default=[], metavar="FOLDER[EXTRAS]",
                        help="a workspace member's folder (or name), with extras in brackets: library[connect]")
    parser.add_argument("--all-members", action="store_true", help="every member with every extra")
    parser.add_argument("--group", action="append", default=[], metavar="NAME", help="add a dependency group of the root pyproject.toml")
    parser.add_argument("--check", action="store_true", help="only check that the lock holds every pin of the pyproject files")
    parser.add_argument("--members", action="store_true", help="print the members' folders (`pip install -e` takes them)")
    args = parser.parse_args(argv)

    root = args.root.resolve()
    members = workspace_members(root)
    if args.members:
        print("\n".join(path.relative_to(root).as_posix() for path in members.values()))
        return 0
    lock = read_lock(args.lock or root / "requirements.lock")
    if args.check:
        problems = drift(root, lock)
        for problem in problems:
            print(f"stale lock: {problem} (run `make lock`)", file=sys.stderr)
        return 1 if problems else 0
    groups = pyproject_roots(root / "pyproject.toml")
    unknown = [g for g in args.group if f"group:{g}" not in groups]
    if unknown:
        parser.error(f"pyproject.toml has no dependency group {', '.join(unknown)}")
    roots = {requirement_name(r) for g in args.group for r in groups[f"group:{g}"]}
    try:
        for spec in (all_members(members, root) if args.all_members else []) + args.member:
            roots |= member_roots(spec, members, root)
        chosen = select(lock, roots)
    except ValueError as exc:
        parser.error(str(exc))
    sys.stdout.write("".join("\n".join(entry.lines) + "\n" for entry in chosen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
