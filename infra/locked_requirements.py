"""Print the part of requirements.lock an install needs, hashes included, for ``pip install
--require-hashes -r``.

``requirements.lock`` pins every package of every group (``make lock`` resolves it from
pyproject.toml with a pinned uv: runtime dependencies, the ``test`` and ``bench`` extras, the
``build`` and ``lock`` dependency groups) with the sha256 of each of its files. An install
takes what its roots need: the runtime dependencies (less ``--without``), plus ``--extra``
and ``--group`` roots, and everything the lock says those pull in (its ``# via``
annotations), so the API image gets no Spark and ``make setup`` no benchmark tools. The
project itself is then installed with ``--no-deps``.

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
ROOT_MARKER = "(pyproject.toml"  # how the lock names a requirement of the project itself


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
        if not line[0].isspace() and not line.startswith("#"):
            match = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)", line)
            if match is None:
                raise ValueError(f"{path}: not a pinned requirement: {line!r}")
            current = Locked(normalise(match[1]), match[2], [line])
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
    """The project's requirements by group: ``runtime``, ``extra:<name>``, ``group:<name>``."""
    data = tomllib.loads(pyproject.read_text())
    project = data["project"]
    groups = {"runtime": list(project.get("dependencies", []))}
    for name, requirements in project.get("optional-dependencies", {}).items():
        groups[f"extra:{name}"] = list(requirements)
    for name, requirements in data.get("dependency-groups", {}).items():
        groups[f"group:{name}"] = [r for r in requirements if isinstance(r, str)]
    return groups


def select(lock: dict[str, Locked], roots: set[str]) -> list[Locked]:
    """The entries ``roots`` need: the roots and, transitively, whatever the lock says they pull in."""
    missing = roots - set(lock)
    if missing:
        raise ValueError(f"requirements.lock lacks {', '.join(sorted(missing))}: run `make lock`")
    chosen = set(roots)
    grew = True
    while grew:
        grew = False
        for name, entry in lock.items():
            if name not in chosen and entry.parents & chosen:
                chosen.add(name)
                grew = True
    return [lock[name] for name in sorted(chosen)]


def drift(pyproject: Path, lock: dict[str, Locked]) -> list[str]:
    """Every pin of pyproject.toml the lock lacks or holds at another version (or without hashes)."""
    problems = []
    for group, requirements in pyproject_roots(pyproject).items():
        for requirement in requirements:
            name = requirement_name(requirement)
            pinned = re.search(r"==\s*([^\s;,]+)", requirement)
            entry = lock.get(name)
            if entry is None:
                problems.append(f"{group}: {requirement} is not in the lock")
            elif pinned and entry.version != pinned[1]:
                problems.append(f"{group}: {requirement}, but the lock has {name}=={entry.version}")
            elif not entry.hashes:
                problems.append(f"{group}: {name} has no hashes in the lock")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lock", type=Path, default=ROOT / "requirements.lock")
    parser.add_argument("--pyproject", type=Path, default=ROOT / "pyproject.toml")
    parser.add_argument("--extra", action="append", default=[], metavar="NAME", help="add an optional-dependency group")
    parser.add_argument("--group", action="append", default=[], metavar="NAME", help="add a dependency group")
    parser.add_argument("--no-runtime", action="store_true", help="leave out the runtime dependencies (only --extra/--group)")
    parser.add_argument("--without", nargs="*", default=[], metavar="NAME", help="runtime dependencies to leave out")
    parser.add_argument("--check", action="store_true", help="only check that the lock holds every pin of pyproject.toml")
    args = parser.parse_args(argv)

    lock = read_lock(args.lock)
    if args.check:
        problems = drift(args.pyproject, lock)
        for problem in problems:
            print(f"stale lock: {problem} (run `make lock`)", file=sys.stderr)
        return 1 if problems else 0
    groups = pyproject_roots(args.pyproject)
    wanted = [] if args.no_runtime else ["runtime"]
    wanted += [f"extra:{name}" for name in args.extra] + [f"group:{name}" for name in args.group]
    unknown = [g for g in wanted if g not in groups]
    if unknown:
        parser.error(f"pyproject.toml has no {', '.join(unknown)}")
    skipped = {normalise(name) for name in args.without}
    runtime = {requirement_name(r) for r in groups["runtime"]}
    if skipped - runtime:
        parser.error(f"--without names packages that are not dependencies: {', '.join(sorted(skipped - runtime))}")
    roots = {requirement_name(r) for g in wanted for r in groups[g]} - skipped
    try:
        chosen = select(lock, roots)
    except ValueError as exc:
        parser.error(str(exc))
    sys.stdout.write("".join("\n".join(entry.lines) + "\n" for entry in chosen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
