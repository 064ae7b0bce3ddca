"""Shipping the project's Python code to the executors of a Spark cluster.

On a cluster every executor imports the jobs' code (the Kafka data source, the state
processors and the rules run there): the workspace members ``library/`` (``streamstate``),
``pipeline/`` (``streamstate_pipeline``) and ``spark-jobs/`` (``streamstate_jobs``). Two
standard ways are supported:

* the same image (or the same installation) on every node, as ``docker-compose.yml`` does:
  nothing is shipped (``ship_code = "none"``);
* built packages on ``spark.submit.pyFiles``: each member's wheel is built with
  ``pip wheel --no-deps --no-build-isolation`` (so each package is laid out by the build
  backend, exactly as for an install), and their entries are written into one ``.zip``
  (Spark puts ``.zip``/``.egg`` files, not ``.whl``, on the executors' ``sys.path``; a
  pure-Python wheel is a zip of its import layout, and the members' layouts do not overlap),
  added with ``SparkContext.addPyFile``.

``ship_code = "auto"`` ships on any non-local master when the job runs from a source
checkout, and ships nothing in local mode or from an installed package (an image).

    python -m streamstate_jobs.code_shipping package    # prints the zip, for spark-submit --py-files
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from pyspark.sql import SparkSession

from streamstate_pipeline.settings import REPO_ROOT, Settings
from streamstate_pipeline.errors import JobError

CODE_CACHE = REPO_ROOT / "var" / "dist"
# The workspace members the executors import (the root pyproject's [tool.uv.workspace] lists
# them all): the state library (the state processors), what the deployables share (settings,
# contracts) and the jobs (the Kafka data source, the rules). The API, the producers and the
# stack never run on an executor (the jobs import none of them), so they are not shipped.
SHIPPED_MEMBERS = ("library", "pipeline", "spark-jobs")
# Files of a member the build backend reads besides its src/ folder (README.md where it has one).
BUILD_FILES = ("pyproject.toml", "README.md")


class CodeShippingError(JobError, RuntimeError):
    """The project's code could not be packaged for the executors."""


def is_local_master(master: str) -> bool:
    return master == "local" or master.startswith("local[") or master.startswith("local-cluster[")


def source_checkout(root: Path = REPO_ROOT) -> Path | None:
    """The workspace the running code comes from, or None when it runs from installed packages."""
    members = [root / member / "pyproject.toml" for member in SHIPPED_MEMBERS]
    return root if (root / "pyproject.toml").is_file() and all(m.is_file() for m in members) else None


def source_files(source: Path) -> list[Path]:
    """Every file the shipped members' wheels are built from: each member's build files and its
    ``src/`` folder (the import layout: packages, ``py.typed``), without build leftovers."""
    files: list[Path] = []
    for member in SHIPPED_MEMBERS:
        folder = source / member
        files += [folder / name for name in BUILD_FILES if (folder / name).is_file()]
        files += sorted(
            p
            for p in (folder / "src").rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and not any(part.endswith(".egg-info") for part in p.parts)
        )
    return files


def copy_tree(source: Path, files: list[Path], target: Path) -> None:
    """Copy ``files`` (below ``source``) to the same relative places below ``target``."""
    for path in files:
        copy = target / path.relative_to(source)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, copy)


def _digest(source: Path, files: list[Path]) -> str:
    sha = hashlib.sha256()
    for path in files:
        sha.update(str(path.relative_to(source)).encode() + b"\0" + path.read_bytes() + b"\0")
    return sha.hexdigest()[:16]


def _combine(wheels: list[Path], target: Path) -> None:
    """Write the entries of ``wheels`` (pure-Python: each a zip of its import layout) into one zip."""
    seen: dict[str, str] = {}
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as combined:
        for wheel in wheels:
            with zipfile.ZipFile(wheel) as archive:
                for info in archive.infolist():
                    if info.filename in seen:
                        raise CodeShippingError(f"{info.filename} is in both {seen[info.filename]} and {wheel.name}")
                    seen[info.filename] = wheel.name
                    combined.writestr(info, archive.read(info))


def build_code_zip(source: Path | None = None, cache_dir: Path = CODE_CACHE) -> Path:
    """Build the shipped members' wheels from ``source`` and return their import layouts as one
    ``streamstate-<digest>.zip``.

    The result is cached by the digest of the sources, so an unchanged tree is built once.
    The build runs on a copy of the sources, so the checkout gets no ``build/`` folder and
    concurrent builds do not meet.
    """
    source = source or source_checkout()
    if source is None:
        raise CodeShippingError(f"no source checkout (the workspace members {', '.join(SHIPPED_MEMBERS)}) to build the wheels from")
    files = source_files(source)
    target = cache_dir / f"streamstate-{_digest(source, files)}.zip"
    if target.is_file():
        return target
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="streamstate-wheel-") as scratch:
        tree = Path(scratch) / "src"
        copy_tree(source, files, tree)
        out = Path(scratch) / "out"
        build = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(out)]
            + [str(tree / member) for member in SHIPPED_MEMBERS],
            capture_output=True,
            text=True,
        )
        wheels = sorted(out.glob("*.whl"))
        if build.returncode != 0 or len(wheels) != len(SHIPPED_MEMBERS):
            raise CodeShippingError(f"pip wheel failed ({build.returncode}, {len(wheels)} wheels): {' '.join(build.stderr.split())[-500:]}")
        # Written aside and renamed last, so a concurrent reader never sees a half-written zip.
        staged = cache_dir / f".{target.name}.{os.getpid()}"
        _combine(wheels, staged)
        staged.replace(target)
    return target


def code_to_ship(settings: Settings) -> Path | None:
    """The zip to add to the executors' Python path under ``settings.ship_code``, or None."""
    if settings.ship_code == "none":
        return None
    if settings.ship_code == "auto" and (is_local_master(settings.spark_master) or source_checkout() is None):
        return None
    return build_code_zip()


def ship_code(spark: SparkSession, settings: Settings) -> Path | None:
    """Add the project's code to every executor's ``sys.path`` (``SparkContext.addPyFile``)."""
    code = code_to_ship(settings)
    if code is not None:
        spark.sparkContext.addPyFile(str(code))
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m streamstate_jobs.code_shipping",
        description="Package the project's code for Spark executors (spark-submit --py-files).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    package = commands.add_parser("package", help="build the shipped members' wheels as one .zip and print its path")
    package.add_argument("--out-dir", type=Path, default=CODE_CACHE, help=f"where to put the zip (default {CODE_CACHE})")
    args = parser.parse_args(argv)
    try:
        print(build_code_zip(cache_dir=args.out_dir))
    except CodeShippingError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
