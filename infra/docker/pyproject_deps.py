"""Print pyproject.toml's pinned runtime dependencies, one per line, for `pip install -r`.

The images install dependencies from this list before copying the source, so a code
change does not invalidate the (large) dependency layer, and the pins stay in one
place. ``--without NAME ...`` leaves out packages an image does not use (the API and
producer images do not need Spark).
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    return normalise(re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0])


def dependencies(pyproject: Path, without: set[str]) -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    skipped = {normalise(name) for name in without}
    unknown = skipped - {requirement_name(r) for r in project["dependencies"]}
    if unknown:
        raise SystemExit(f"error: --without names packages that are not dependencies: {', '.join(sorted(unknown))}")
    return [r for r in project["dependencies"] if requirement_name(r) not in skipped]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pyproject", type=Path, nargs="?", default=Path("pyproject.toml"))
    parser.add_argument("--without", nargs="*", default=[], metavar="NAME")
    args = parser.parse_args()
    sys.stdout.write("".join(f"{r}\n" for r in dependencies(args.pyproject, set(args.without))))


if __name__ == "__main__":
    main()
