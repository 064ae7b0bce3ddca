"""The production profile's parts that are not Python packages: their versions and where
they are installed.

``infra/versions.env`` is the one list of versions (the Makefile, the Dockerfiles, compose
and the tests read it too); ``infra/deps/install-*.sh`` install each part into ``.deps/``
(gitignored, cached): Spark's Kafka connector and S3A jars and Apache Kafka's jars from
Maven Central, MinIO built through the Go module proxy, and the local checkpoint file system
compiled from ``spark-jobs/jvm/``. ``make test`` and ``make run``
run the scripts; :func:`ensure` runs one on demand (a test or ``streamstate up`` on a
fresh clone), showing its progress, and is a no-op once the part is installed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

from streamstate_pipeline.settings import REPO_ROOT
from streamstate_pipeline.errors import ConfigurationError

VERSIONS_FILE = REPO_ROOT / "infra" / "versions.env"
SCRIPTS = REPO_ROOT / "infra" / "deps"
DEPS_DIR = REPO_ROOT / ".deps"  # infra/deps/common.sh installs here
COMPONENTS = ("spark-jars", "kafka", "minio", "checkpoint-io", "mc")
CHECKPOINT_IO_JAR = "streamstate-checkpoint-io.jar"


class DependencyMissing(ConfigurationError, RuntimeError):
    """A part of the production profile is not installed and could not be installed."""


@lru_cache(maxsize=1)
def versions() -> dict[str, str]:
    """``infra/versions.env`` as a dict (KEY=VALUE lines; # comments)."""
    entries = {}
    for line in VERSIONS_FILE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, sep, value = line.partition("=")
            if not sep or not key.isidentifier() or value != value.strip() or value.startswith(("'", '"')):
                raise ValueError(f"{VERSIONS_FILE}: not a plain KEY=VALUE line: {line!r}")
            entries[key] = value
    return entries


def _install_dir(component: str) -> Path:
    v = versions()
    name = {
        "spark-jars": f"spark-jars-{v['SPARK_VERSION']}",
        "kafka": f"kafka-{v['KAFKA_VERSION']}",
        "minio": f"minio-{v['MINIO_RELEASE']}",
        "checkpoint-io": f"checkpoint-io-{v['SPARK_VERSION']}",
        "mc": f"mc-{v['MC_RELEASE']}",
    }[component]
    return DEPS_DIR / name


def installed(component: str) -> bool:
    """Whether ``component`` is installed (its install script left a completion stamp)."""
    return any(_install_dir(component).glob(".installed-*"))


def ensure(component: str) -> Path:
    """Install ``component`` unless it is (the script's output shows the progress); its directory."""
    if component not in COMPONENTS:
        raise ValueError(f"unknown component {component!r}; one of {COMPONENTS}")
    script = SCRIPTS / f"install-{component}.sh"
    # The script itself decides whether its stamp is current (a changed pom or version re-installs).
    result = subprocess.run(
        ["bash", str(script)],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHON": sys.executable},
    )
    command = f"`bash {script.relative_to(REPO_ROOT)}`"
    if result.returncode != 0:
        raise DependencyMissing(f"{component} could not be installed: {command} exited {result.returncode}")
    if not installed(component):
        # The script skips what it cannot build here (no JDK for the checkpoint classes) and says why above.
        raise DependencyMissing(
            f"{component} is not installed: {command} finished without leaving its completion stamp in "
            f"{_install_dir(component)} (its output above says what it skipped)"
        )
    return _install_dir(component)


def spark_jars(install: bool = True) -> list[Path]:
    """The connector and S3A jars for ``spark.jars`` (empty when not installed and ``install`` is
    False, as in an installed package outside a source checkout: the images hold them among Spark's own)."""
    if not install and not (VERSIONS_FILE.is_file() and installed("spark-jars")):
        return []
    folder = ensure("spark-jars") if install else _install_dir("spark-jars")
    return sorted(folder.glob("*.jar"))


def spark_jars_setting(install: bool = True) -> str:
    """:func:`spark_jars` as ``Settings.spark_jars`` takes them (comma-separated): the stack
    launcher sets this, and the Spark driver's class archive is trained on the same list."""
    return ",".join(str(jar) for jar in spark_jars(install))


def checkpoint_io_jar(install: bool = True) -> Path | None:
    """The jar of ``spark-jobs/jvm/`` (None when not installed and ``install`` is False, as in
    an installed package outside a source checkout, which has no ``infra/versions.env``)."""
    if not install and not (VERSIONS_FILE.is_file() and installed("checkpoint-io")):
        return None
    folder = ensure("checkpoint-io") if install else _install_dir("checkpoint-io")
    return folder / CHECKPOINT_IO_JAR


def kafka_classpath() -> str:
    """The classpath of the Apache Kafka broker (its ``libs/*``), installed on demand."""
    return str(ensure("kafka") / "libs" / "*")


def minio_binary() -> Path:
    """The MinIO server binary, built on demand."""
    return ensure("minio") / "minio"


def mc_binary() -> Path:
    """MinIO's client, built on demand: compose's one-shot MinIO init runs it
    (infra/minio/create-bucket.sh), and the tests run that script natively with it."""
    return ensure("mc") / "mc"
