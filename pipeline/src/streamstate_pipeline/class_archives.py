"""Class data sharing archives for the JVMs this project starts (the Spark drivers, the brokers).

A JVM spends most of its start loading, parsing and verifying the same classes every time (a
local SparkSession loads about 10,000). Java 17 can write the classes one run loaded into an
archive when it exits (``-XX:ArchiveClassesAtExit``) and map that archive at every later
start (``-XX:SharedArchiveFile``): a SparkSession and its first query start in about half the
time (docs/profile.md has the figures).

An archive fits one Java runtime and one classpath, so its name is a digest of both, the
jars' sizes and times included, and of the JVM's library and the base archive the runtime
ships (a dynamic archive is only valid on the base it was written against: a regenerated base,
``java -Xshare:dump``, left every archive unused while ``make`` called it up to date). A
changed jar or another Java gives another name, which
``make`` builds anew (each JVM's ``build`` program: ``streamstate_jobs.class_archive`` for
the Spark drivers, ``streamstate_stack.class_archive`` for the brokers). A JVM is given an
archive only when it exists; the JVM checks the rest itself, and one that no longer fits is
ignored, never an error.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterable

from streamstate_pipeline.binaries import DEPS_DIR
from streamstate_pipeline.errors import ConfigurationError

ARCHIVES_DIR = DEPS_DIR / "class-archives"
# The JVM's CDS messages go to standard output (where the console tools print records): off.
# Without them an archive that does not fit is ignored silently, as intended.
QUIET = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")
WRITE_OPTION = "-XX:ArchiveClassesAtExit="  # a JVM given it writes an archive as it exits, and may map none
DIGEST = re.compile(r"[0-9a-f]{16}")  # an archive's name: its program, then the digest of what it was written from


class ClassArchiveFailed(ConfigurationError, RuntimeError):
    """The run that writes a class archive failed or wrote none."""


def java_executable() -> Path:
    """The ``java`` PySpark and the launcher start: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = Path(home, "bin", "java") if home else shutil.which("java")
    if found is None:
        raise ConfigurationError("no `java` on PATH and JAVA_HOME is not set: Spark and Kafka need Java 17")
    return Path(found).resolve()


def _fingerprint(path: Path) -> str:
    try:
        status = path.stat()
    except OSError:
        return f"{path}:missing"
    return f"{path}:{status.st_size}:{status.st_mtime_ns}"


def classpath_entries(classpath: str) -> list[Path]:
    """The files of a ``java -cp`` classpath, a ``dir/*`` entry as the jars in ``dir`` in
    name order."""
    entries: list[Path] = []
    for entry in filter(None, classpath.split(os.pathsep)):
        if entry.endswith("*"):
            entries.extend(sorted(Path(entry[:-1] or ".").glob("*.jar")))
        else:
            entries.append(Path(entry))
    return entries


def runtime_files(java: Path) -> list[Path]:
    """What an archive written by ``java`` depends on besides the classpath: the launcher, the
    JVM's library and the base archive it maps (a JDK's lib/server/)."""
    server = java.parent.parent / "lib" / "server"
    return [java, server / "libjvm.so", server / "classes.jsa"]


def archive_path(program: str, classpath: Iterable[Path]) -> Path:
    """Where the archive of ``program`` (a name) run on ``classpath`` with this Java lives."""
    described = "\n".join(_fingerprint(path) for path in (*runtime_files(java_executable()), *classpath))
    return ARCHIVES_DIR / f"{program}-{hashlib.sha256(described.encode()).hexdigest()[:16]}.jsa"


def earlier_archives(archive: Path) -> list[Path]:
    """The other archives of ``archive``'s program beside it (named as :func:`archive_path`
    names them: another classpath, its jars or another Java), which no JVM here is given again."""
    program, _, digest = archive.stem.rpartition("-")
    if not program or not DIGEST.fullmatch(digest):
        return []
    return sorted(
        path for path in archive.parent.glob(f"{program}-*.jsa")
        if path != archive and DIGEST.fullmatch(path.stem.removeprefix(f"{program}-"))
    )


def use_options(archive: Path) -> list[str]:
    """The JVM options that map ``archive``; none when it was not built."""
    return [f"-XX:SharedArchiveFile={archive}", *QUIET] if archive.is_file() else []


def build(archive: Path, run: Callable[[list[str]], None]) -> bool:
    """Write ``archive`` once: ``run`` starts the JVM with the options given, has it load what
    a real run loads, and returns once it exited (raising if it failed). The archive takes its
    name only then, so a cut run leaves none. False when it already existed."""
    if archive.is_file():
        return False
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(f"{archive.stem}.{os.getpid()}.partial")
    partial.unlink(missing_ok=True)
    try:
        try:
            run([f"{WRITE_OPTION}{partial}", *QUIET])
        except (OSError, subprocess.SubprocessError) as error:
            raise ClassArchiveFailed(f"the run writing {archive.name} failed: {error}") from error
        if not partial.is_file():
            raise ClassArchiveFailed(f"the JVM wrote no class archive ({partial}); is it Java 17 or newer?")
        os.replace(partial, archive)
    finally:
        partial.unlink(missing_ok=True)
    return True


def ensure(archive: Path, jvm: str, run: Callable[[list[str]], None]) -> None:
    """:func:`build` ``archive`` unless it exists, saying what happens on standard error. A
    failure is a warning, not an error: without an archive ``jvm`` only starts slower."""
    if archive.is_file():
        print(f"the class archive of {jvm} is up to date: {archive}", file=sys.stderr)
        return
    print(f"writing the class archive of {jvm} (once per install, up to a minute or two): {archive}", file=sys.stderr)
    started = time.monotonic()
    try:
        build(archive, run)
    except Exception as error:  # noqa: BLE001 - whatever stopped the run, the JVMs run without the archive
        print(f"warning: no class archive for {jvm} ({error}); it starts without one, slower", file=sys.stderr)
        return
    print(f"wrote {archive.name} ({archive.stat().st_size / 1e6:.0f} MB) in {time.monotonic() - started:.0f} s",
          file=sys.stderr)
    # A few hundred MB each, one more at every jar or Java update. A JVM mapping one keeps it until it exits.
    for earlier in earlier_archives(archive):
        earlier.unlink(missing_ok=True)
        print(f"removed the earlier class archive of {jvm}: {earlier.name}", file=sys.stderr)
