"""Writing ``infra/versions.env`` into the files that cannot read it: the compose files' image
tags and build arguments, and the Dockerfiles' ``ARG`` defaults.

Compose interpolates ``${...}`` only from the environment and ``.env`` (the user's file),
and a Dockerfile's ``FROM`` cannot read a file, so their versions are rendered from the
one file: ``make versions`` (``python -m streamstate_stack.version_pins``) rewrites them, and
``tests/unit/test_versions.py`` fails when any is stale (``--check`` does the same here).
Each pin is one regular expression whose second group is the version; a pin that no
longer matches anything is an error, so a renamed image cannot silently drop out.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from streamstate_stack.files import write_atomic
from streamstate_pipeline.binaries import versions
from streamstate_pipeline.settings import REPO_ROOT

COMPOSE = REPO_ROOT / "docker-compose.yml"
COMPOSE_KINESIS = REPO_ROOT / "docker-compose.kinesis.yml"
COMPOSE_LOCAL_IMAGES = REPO_ROOT / "infra" / "docker" / "compose.local-images.yml"
COMPOSE_KAFKA_3 = REPO_ROOT / "infra" / "docker" / "compose.kafka-3.yml"
DOCKERFILES = [REPO_ROOT / "spark-jobs" / "Dockerfile", REPO_ROOT / "services" / "api" / "Dockerfile", REPO_ROOT / "producers" / "Dockerfile"]


@dataclass(frozen=True)
class Pin:
    path: Path
    pattern: str  # group 1: what precedes the version, group 2: the version
    key: str  # in infra/versions.env

    def apply(self, text: str, values: dict[str, str]) -> tuple[str, int]:
        return re.subn(self.pattern, lambda m: m[1] + values[self.key], text, flags=re.MULTILINE)


PINS = [
    Pin(COMPOSE, r"^(\s+image: apache/kafka:)(\S+)$", "KAFKA_VERSION"),
    Pin(COMPOSE, r"^(\s+image: quay\.io/minio/minio:)(\S+)$", "MINIO_RELEASE"),
    Pin(COMPOSE, r"^(\s+image: quay\.io/minio/mc:)(\S+)$", "MC_RELEASE"),
    Pin(COMPOSE, r"^(\s+image: prom/prometheus:v)(\S+)$", "PROMETHEUS_VERSION"),
    Pin(COMPOSE, r"^(\s+image: grafana/grafana:)(\S+)$", "GRAFANA_VERSION"),
    Pin(COMPOSE, r"^(\s+PYTHON_IMAGE: )(\S+)$", "PYTHON_IMAGE"),
    Pin(COMPOSE_KINESIS, r"^(\s+image: )(node:\S+)$", "NODE_IMAGE"),
    # The stand-ins build-images.sh tags from the same versions.
    Pin(COMPOSE_LOCAL_IMAGES, r"^(\s+image: streamstate-local/kafka:)(\S+)$", "KAFKA_VERSION"),
    Pin(COMPOSE_LOCAL_IMAGES, r"^(\s+image: streamstate-local/minio:)(\S+)$", "MINIO_RELEASE"),
    Pin(COMPOSE_LOCAL_IMAGES, r"^(\s+image: streamstate-local/mc:)(\S+)$", "MC_RELEASE"),
    Pin(COMPOSE_LOCAL_IMAGES, r"^(\s+image: streamstate-local/prometheus:v)(\S+)$", "PROMETHEUS_VERSION"),
    # The two nodes compose.kafka-3.yml adds (image: ${KAFKA_IMAGE:-apache/kafka:<version>}).
    Pin(COMPOSE_KAFKA_3, r"^(\s+image: \$\{KAFKA_IMAGE:-apache/kafka:)([^}\s]+)", "KAFKA_VERSION"),
    *(Pin(path, r"^(ARG PYTHON_IMAGE=)(\S+)$", "PYTHON_IMAGE") for path in DOCKERFILES),
]


def render(path: Path, text: str, values: dict[str, str] | None = None) -> str:
    """``text`` (the contents of ``path``) with every pin of that file set from the versions."""
    values = values or versions()
    for pin in (p for p in PINS if p.path == path):
        text, count = pin.apply(text, values)
        if count == 0:
            raise ValueError(f"{path.relative_to(REPO_ROOT)}: pin {pin.key} ({pin.pattern}) matches nothing")
    return text


def stale() -> list[Path]:
    """The files whose pins differ from infra/versions.env."""
    paths = dict.fromkeys(pin.path for pin in PINS)
    return [path for path in paths if render(path, path.read_text()) != path.read_text()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale files (exit 1 if any)")
    args = parser.parse_args(argv)
    outdated = stale()
    for path in outdated:
        name = path.relative_to(REPO_ROOT)
        if args.check:
            print(f"stale: {name} (run `make versions`)")
        else:
            write_atomic(path, render(path, path.read_text()), mode=path.stat().st_mode & 0o777)
            print(f"updated {name} from infra/versions.env")
    return 1 if args.check and outdated else 0


if __name__ == "__main__":
    sys.exit(main())
