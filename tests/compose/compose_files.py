"""Reading docker-compose.yml, the Dockerfiles and .env.example for the compose tests."""

from __future__ import annotations

import fnmatch
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from streamstate_pipeline.settings import REPO_ROOT

COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
ENV_EXAMPLE = REPO_ROOT / ".env.example"
# The stack's secrets: the variable .env may set and the file the `secrets` service writes
# (generated when the variable is empty), each into the volume of the services that read it.
SECRETS = {"MINIO_ROOT_PASSWORD": "minio-root-password", "MINIO_JOBS_PASSWORD": "minio-jobs-password",
           "GRAFANA_ADMIN_PASSWORD": "grafana-admin-password", "API_TOKEN": "api-token"}
# Least privilege: the services that may read each secret, and no other. The jobs have their
# own MinIO user, limited to the checkpoint bucket; only MinIO and its one-shot init (which
# creates that user) hold the root password.
SECRET_READERS = {
    "minio-root-password": {"minio", "minio-init"},
    "minio-jobs-password": {"minio-init", "sessions-job", "anomalies-job"},
    "api-token": {"api"},
    "grafana-admin-password": {"grafana"},
}
# Where a service finds its secrets (the *_FILE variables name files below it).
SECRETS_DIR = "/run/secrets"
GENERATE_SECRETS = REPO_ROOT / "infra" / "secrets" / "generate.sh"
FILE_ENV = REPO_ROOT / "infra" / "docker" / "file-env.sh"
# The services that run JVMs, and the variable that hands each its options (Kafka's scripts
# put KAFKA_JVM_PERFORMANCE_OPTS where their G1 tuning goes; the Spark image's JVMs, executors
# included, take JAVA_TOOL_OPTIONS).
JVM_SERVICES = {"kafka": "KAFKA_JVM_PERFORMANCE_OPTS", "spark-master": "JAVA_TOOL_OPTIONS", "spark-worker-1": "JAVA_TOOL_OPTIONS",
                "spark-worker-2": "JAVA_TOOL_OPTIONS", "sessions-job": "JAVA_TOOL_OPTIONS", "anomalies-job": "JAVA_TOOL_OPTIONS"}
# The compose file for machines that reach no registry: the stand-ins `make images` builds.
LOCAL_IMAGES_FILE = REPO_ROOT / "infra" / "docker" / "compose.local-images.yml"
# `${VAR}`, `${VAR:-default}`, `${VAR:?message}`: group 1 the name, group 2 the operator, group 3 the rest.
VARIABLE = re.compile(r"\$\{(\w+)(?:(:?[-?])([^}]*))?\}")
DOCKERFILES = [REPO_ROOT / "spark-jobs" / "Dockerfile", REPO_ROOT / "services" / "api" / "Dockerfile",
               REPO_ROOT / "producers" / "Dockerfile"]
INSTALL_SCRIPT = REPO_ROOT / "infra" / "install-test-deps.sh"


def compose() -> dict[str, Any]:
    """docker-compose.yml as written (anchors merged, variables not interpolated)."""
    return yaml.safe_load(COMPOSE_FILE.read_text())


def run_healthcheck(test: list[str], in_container: int, port: int) -> subprocess.CompletedProcess[str]:
    """A healthcheck's command as Docker runs it (``CMD``), after compose's ``$$`` escape,
    aimed at ``port`` on this host instead of the container's ``in_container``."""
    kind, *command = test
    assert kind == "CMD", "a check run without a shell names its program"
    command = [part.replace("$$", "$").replace(f"localhost/{in_container}", f"localhost/{port}") for part in command]
    return subprocess.run(command, capture_output=True, text=True, timeout=30)


def env_example() -> dict[str, str]:
    """The variables .env.example documents, set (``KEY=value``) or shown commented out with
    their default (``# KEY=value``; a value with spaces in double quotes, which compose removes)."""
    entries = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        match = re.fullmatch(r'#?\s*([A-Z][A-Z0-9_]*)=("[^"]*"|\S*)', line.strip())
        if match:
            entries[match[1]] = match[2].removeprefix('"').removesuffix('"')
    return entries


def compose_defaults() -> dict[str, str]:
    """Each variable's default in docker-compose.yml (``${VAR:-default}``)."""
    return {name: rest for name, op, rest in VARIABLE.findall(COMPOSE_FILE.read_text()) if op in ("-", ":-")}


def dockerignored(path: str) -> bool:
    """Whether .dockerignore keeps ``path`` (relative to the repository) out of the build context:
    the last pattern that matches it or a folder above it decides (``!pattern`` lets it back in)."""
    patterns = [line.strip() for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    parts = path.strip("/").split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    excluded = False
    for pattern in patterns:
        if any(fnmatch.fnmatch(prefix, pattern.removeprefix("!")) for prefix in prefixes):
            excluded = not pattern.startswith("!")
    return excluded


@dataclass
class Dockerfile:
    """The parts of a Dockerfile the checks need (continuation lines joined)."""

    path: Path
    instructions: list[tuple[str, str]]
    args: dict[str, str] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> "Dockerfile":
        text = re.sub(r"\\\n", " ", path.read_text())
        instructions = []
        for line in text.splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                keyword, _, rest = line.partition(" ")
                instructions.append((keyword.upper(), rest.strip()))
        args = {}
        for keyword, rest in instructions:
            if keyword == "ARG" and "=" in rest:
                name, _, default = rest.partition("=")
                args[name.strip()] = default.strip()
        return cls(path, instructions, args)

    def expand(self, text: str) -> str:
        return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: self.args.get(m[1] or m[2], m[0]), text)

    def base_images(self) -> list[str]:
        stages = {rest.split()[-1] for k, rest in self.instructions if k == "FROM" and " AS " in rest.upper()}
        images = [self.expand(rest.split()[0]) for k, rest in self.instructions if k == "FROM"]
        return [image for image in images if image not in stages]

    def copy_sources(self) -> list[str]:
        """Sources of COPY/ADD from the build context (not from other stages)."""
        sources = []
        for keyword, rest in self.instructions:
            if keyword in ("COPY", "ADD"):
                parts = [p for p in rest.split() if not p.startswith("--")]
                if "--from=" not in rest:
                    sources.extend(parts[:-1])
        return sources

    def last_user(self) -> str | None:
        users = [rest for keyword, rest in self.instructions if keyword == "USER"]
        return users[-1] if users else None

    def run_text(self) -> str:
        return "\n".join(rest for keyword, rest in self.instructions if keyword == "RUN")


def image_tag(image: str) -> str | None:
    """The tag of ``name[:tag][@digest]``, None when there is none."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def compose_config_without_dot_env(*files: Path, variables: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`docker-compose config` of ``files`` as a user with a fresh clone sees it: no .env (an
    empty one stands in for a developer's own), no secret and no variable of the compose file
    set in the environment but ``variables``."""
    import os
    import tempfile

    used = {name for name, _, _ in VARIABLE.findall(COMPOSE_FILE.read_text())}
    environment = {k: v for k, v in os.environ.items() if k not in SECRETS and k not in used} | (variables or {})
    arguments = [argument for path in files for argument in ("-f", str(path))]
    with tempfile.NamedTemporaryFile("w", suffix=".env") as empty:
        return subprocess.run(
            [docker_compose_binary(), "--env-file", empty.name, *arguments, "config"],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, env=environment,
        )


def docker_compose_binary() -> str:
    """Debian's docker-compose (v1, validates offline); installed by the test set-up script."""
    if shutil.which("docker-compose") is None:
        subprocess.run(["bash", str(INSTALL_SCRIPT)], capture_output=True, text=True, timeout=600)
    binary = shutil.which("docker-compose")
    if binary is None:
        raise RuntimeError(f"docker-compose is not installed and {INSTALL_SCRIPT} could not install it")
    return binary
