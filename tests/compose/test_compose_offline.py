"""Offline checks of docker-compose.yml and the Dockerfiles: no Docker engine needed."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path, PurePosixPath

import pytest
import yaml

from streamstate_jobs.registry import JOBS
from streamstate_stack.observability import COMPOSE_TARGETS
from streamstate_pipeline.settings import REPO_ROOT
from tests.compose.compose_files import (
    COMPOSE_FILE,
    DOCKERFILES,
    FILE_ENV,
    GENERATE_SECRETS,
    JVM_SERVICES,
    LOCAL_IMAGES_FILE,
    SECRET_READERS,
    SECRETS,
    SECRETS_DIR,
    VARIABLE,
    Dockerfile,
    compose,
    compose_config_without_dot_env,
    compose_defaults,
    dockerignored,
    env_example,
    image_tag,
)

SERVICES = compose()["services"]
ONE_SHOT = {name for name, service in SERVICES.items() if service.get("restart") == "no"}
LONG_RUNNING = set(SERVICES) - ONE_SHOT


def docker_compose_config(*files: Path) -> subprocess.CompletedProcess:
    return compose_config_without_dot_env(COMPOSE_FILE, *files)


@pytest.mark.parametrize("files", [(), (LOCAL_IMAGES_FILE,)], ids=["official-images", "local-images"])
def test_docker_compose_config_is_valid_without_a_dot_env(files):
    result = docker_compose_config(*files)
    assert result.returncode == 0, result.stderr
    assert "variable is not set" not in result.stderr, result.stderr


def test_the_local_images_file_only_swaps_images_and_base():
    merged = yaml.safe_load(docker_compose_config(LOCAL_IMAGES_FILE).stdout)["services"]
    built = {service["image"] for service in merged.values() if "build" in service}
    for name, service in merged.items():
        original = SERVICES[name]
        if service.get("profiles") or ("build" not in service and service["image"] in built):
            continue
        if "build" in service:
            assert service["build"]["args"]["PYTHON_IMAGE"].startswith("streamstate-base:"), name
            assert service["image"] == original["image"], f"{name}: the project's images keep their names"
        else:
            assert service["image"].startswith("streamstate-local/"), f"{name} would pull {service['image']}"
            assert image_tag(service["image"]) == image_tag(original["image"]), f"{name}: not the same release"
        for key in ("command", "environment", "healthcheck", "ports"):
            assert (key in service) == (key in original), f"{name}: {key} added or dropped"
    opt_in = {name for name, service in merged.items() if service.get("profiles")}
    assert opt_in == {"grafana"}, "only Grafana (no stand-in) leaves the default profile"


def test_secrets_have_no_value_anywhere_in_the_repository():
    uses = VARIABLE.findall(COMPOSE_FILE.read_text())
    for secret in SECRETS:
        defaults = {rest for name, op, rest in uses if name == secret}
        assert defaults <= {""}, f"{secret} has a default in docker-compose.yml: {defaults}"
        assert env_example().get(secret, "") == "", f".env.example must leave {secret} empty"


def test_services_read_secrets_from_the_generated_files_only():
    generator = SERVICES["secrets"]
    assert generator["entrypoint"][-1] == "/app/infra/secrets/generate.sh"
    assert generator["network_mode"] == "none"
    assert set(generator["environment"]) == set(SECRETS)
    for name, service in SERVICES.items():
        environment = service.get("environment") or {}
        for key, value in environment.items():
            if key.endswith("_FILE") and str(value).startswith(SECRETS_DIR):
                assert PurePosixPath(str(value)).name in SECRETS.values(), f"{name}: {key}={value}"
                # Directly, or through a dependency that waits for it (minio-init waits for minio).
                dependencies = service["depends_on"]
                assert "secrets" in dependencies or any("secrets" in SERVICES[d]["depends_on"] for d in dependencies), name
            elif name != "secrets":
                assert not re.search(r"PASSWORD|SECRET|TOKEN", key) or key.endswith("_FILE"), f"{name}: {key} in plain"


def run_generate(directory: Path, **given: str) -> dict[str, str]:
    environment = {"PATH": os.environ["PATH"], "SECRETS_DIR": str(directory), **given}
    result = subprocess.run(["sh", str(GENERATE_SECRETS)], env=environment, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    written = {path.name: path for path in directory.rglob("*") if path.is_file()}
    return {name: written[file].read_text() for name, file in SECRETS.items()}


def test_the_secrets_service_generates_random_secrets_once_and_keeps_them(tmp_path):
    first = run_generate(tmp_path)
    assert len(set(first.values())) == len(SECRETS), "each secret is its own random value"
    for value in first.values():
        assert re.fullmatch(r"[A-Za-z0-9_-]{43}", value), value
    assert run_generate(tmp_path) == first, "a restart keeps the generated secrets"
    assert run_generate(tmp_path / "other") != first, "another stack gets other secrets"
    assert not list(tmp_path.rglob(".*.tmp"))


def test_the_secrets_service_writes_a_value_set_in_dot_env(tmp_path):
    run_generate(tmp_path)
    written = run_generate(tmp_path, API_TOKEN="my-own-token-0123456789")
    assert written["API_TOKEN"] == "my-own-token-0123456789"


def _mounts(service: dict) -> list[tuple[str, str, bool]]:
    """(source, target, read-only) of each of a rendered service's volumes, short or long syntax."""
    found = []
    for volume in service.get("volumes", []):
        if isinstance(volume, str):
            parts = volume.split(":")
            found.append((parts[0], parts[1], len(parts) > 2 and "ro" in parts[2].split(",")))
        else:
            found.append((volume.get("source", ""), volume["target"], bool(volume.get("read_only"))))
    return found


def test_each_service_mounts_only_the_secrets_it_needs_read_only(tmp_path):
    # As compose runs it (`docker-compose config`), against the files the generator really writes.
    services = yaml.safe_load(docker_compose_config().stdout)["services"]
    run_generate(tmp_path)
    volume_files = {}
    for source, target, _ in _mounts(services["secrets"]):
        below = PurePosixPath(target).relative_to(SECRETS_DIR)
        volume_files[source] = sorted(path.name for path in (tmp_path / below).iterdir() if path.is_file())
    held = sorted(file for files in volume_files.values() for file in files)
    assert held == sorted(SECRETS.values()), f"each secret in exactly one of the secrets' volumes: {volume_files}"
    reached: dict[str, dict[str, str]] = {}  # service -> {secret file: its path in the container}
    for name, service in services.items():
        if name == "secrets":
            continue
        for source, target, read_only in _mounts(service):
            if source in volume_files:
                assert read_only, f"{name} mounts the secrets' volume {source} writable"
                reached.setdefault(name, {}).update({file: f"{target}/{file}" for file in volume_files[source]})
    readers = {file: {name for name, files in reached.items() if file in files} for file in SECRETS.values()}
    assert readers == SECRET_READERS
    for name, service in services.items():
        for key, value in (service.get("environment") or {}).items():
            if key.endswith("_FILE") and str(value).startswith(SECRETS_DIR + "/") and name != "secrets":
                assert str(value) in reached.get(name, {}).values(), f"{name}: {key}={value} is not mounted there"


def _image_uid(dockerfile: Path) -> int:
    match = re.search(r"useradd [^&]*--uid (\d+)", Dockerfile.read(dockerfile).run_text())
    assert match, f"{dockerfile}: no useradd --uid"
    return int(match[1])


# The user each reader runs as: root in MinIO's images, the project's user in its images,
# uid 472 in Grafana's official image.
SECRET_OWNERS = {
    "minio-root-password": 0,
    "minio-jobs-password": _image_uid(REPO_ROOT / "spark-jobs" / "Dockerfile"),
    "api-token": _image_uid(REPO_ROOT / "services" / "api" / "Dockerfile"),
    "grafana-admin-password": 472,
}


def test_each_secret_is_readable_by_its_readers_user_only(tmp_path):
    run_generate(tmp_path)
    for path in tmp_path.rglob("*"):
        mode = path.stat().st_mode & 0o777
        if path.is_dir():
            assert mode == 0o700, f"{path}: {oct(mode)}"
        else:
            assert mode == 0o400, f"{path}: {oct(mode)}: not world-readable, not writable"
            if os.geteuid() == 0:  # chown needs root, as the `secrets` service runs
                assert path.stat().st_uid == SECRET_OWNERS[path.name], path
                assert path.parent.stat().st_uid == SECRET_OWNERS[path.name], path.parent


def test_the_jobs_use_their_own_minio_user_not_the_root_account():
    jobs_user = "${MINIO_JOBS_USER:-streamstate-jobs}"
    for job in (spec.service for spec in JOBS.values()):
        environment = SERVICES[job]["environment"]
        assert environment["AWS_ACCESS_KEY_ID"] == jobs_user, job
        assert environment["AWS_SECRET_ACCESS_KEY_FILE"] == f"{SECRETS_DIR}/{SECRETS['MINIO_JOBS_PASSWORD']}", job
    init = SERVICES["minio-init"]["environment"]
    assert init["MINIO_JOBS_USER"] == jobs_user
    assert compose_defaults()["MINIO_JOBS_USER"] != compose_defaults()["MINIO_ROOT_USER"]


def test_the_images_entry_point_reads_file_variables(tmp_path):
    (tmp_path / "api-token").write_text("from-a-file")
    environment = {"PATH": os.environ["PATH"], "SECRETS_DIR": str(tmp_path),
                   "STREAMSTATE_API_TOKEN_FILE": str(tmp_path / "api-token"), "OTHER_FILE": "/app/kept.toml"}
    probe = "import json, os; print(json.dumps({k: v for k, v in os.environ.items() if 'TOKEN' in k or 'OTHER' in k}))"
    result = subprocess.run(["sh", str(FILE_ENV), sys.executable, "-c", probe], env=environment,
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"STREAMSTATE_API_TOKEN": "from-a-file", "OTHER_FILE": "/app/kept.toml"}
    environment["STREAMSTATE_API_TOKEN_FILE"] = str(tmp_path / "missing")
    result = subprocess.run(["sh", str(FILE_ENV), "true"], env=environment, capture_output=True, text=True, timeout=30)
    assert result.returncode != 0 and "cannot be read" in result.stderr


def test_every_variable_the_compose_file_uses_is_documented_in_env_example():
    used = {name for name, _, _ in VARIABLE.findall(COMPOSE_FILE.read_text())}
    missing = used - set(env_example())
    assert not missing, f".env.example lacks {sorted(missing)}"


def test_env_example_shows_the_defaults_compose_uses():
    documented, defaults = env_example(), compose_defaults()
    wrong = {name: (documented[name], value) for name, value in defaults.items() if documented.get(name) != value}
    assert not wrong, f".env.example and docker-compose.yml defaults differ (documented, compose): {wrong}"


def test_env_example_leaves_the_embedded_defaults_alone():
    # Settings also reads .env (copied from the example): a STREAMSTATE_* key would change every local run.
    assert not [key for key in env_example() if key.startswith("STREAMSTATE_")]


def test_dot_env_is_not_tracked():
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", ".env"], cwd=REPO_ROOT, capture_output=True, text=True)
    ignored = subprocess.run(["git", "check-ignore", "-q", ".env"], cwd=REPO_ROOT)
    assert tracked.returncode != 0, ".env is tracked: it holds the user's secrets"
    assert ignored.returncode == 0, ".env must be in .gitignore"


def test_every_published_port_is_on_loopback():
    exposed = [f"{name}: {port}" for name, service in SERVICES.items() for port in service.get("ports", [])
               if not str(port).startswith("127.0.0.1:")]
    assert not exposed, "ports published beyond 127.0.0.1:\n" + "\n".join(exposed)


def test_every_service_has_a_memory_limit():
    unlimited = sorted(name for name, service in SERVICES.items() if not service.get("mem_limit"))
    assert not unlimited, f"no mem_limit: {unlimited}"


def test_the_api_requires_a_token_in_compose():
    assert SERVICES["api"]["environment"]["STREAMSTATE_API_TOKEN_FILE"] == f"{SECRETS_DIR}/{SECRETS['API_TOKEN']}"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_the_project_images_enter_through_file_env(path):
    entrypoints = [rest for keyword, rest in Dockerfile.read(path).instructions if keyword == "ENTRYPOINT"]
    assert entrypoints and "infra/docker/file-env.sh" in entrypoints[-1]
    assert not dockerignored("infra/docker/file-env.sh")


def test_the_spark_ui_cannot_kill_in_the_image():
    """The daemons' UIs (the drivers' are the session builder's); the compose stack test reads
    the master's live page."""
    env = [rest for keyword, rest in Dockerfile.read(REPO_ROOT / "spark-jobs" / "Dockerfile").instructions if keyword == "ENV"]
    assert any(re.search(r"\bSPARK_DAEMON_JAVA_OPTS=.*-Dspark\.ui\.killEnabled=false\b", rest) for rest in env), env


def test_every_java_of_the_spark_image_maps_the_archive_it_builds_quietly():
    """The archive the build writes is the one JDK_JAVA_OPTIONS names, with the JVM's CDS messages
    off as everywhere else (class_archives.QUIET: they go to standard output); the compose stack
    test reads the JVMs' memory maps."""
    from streamstate_pipeline.class_archives import QUIET

    dockerfile = Dockerfile.read(REPO_ROOT / "spark-jobs" / "Dockerfile")
    archive = dockerfile.args["CLASS_ARCHIVE"]
    assert "streamstate_jobs.class_archive --output ${CLASS_ARCHIVE}" in dockerfile.run_text()
    env = [rest for keyword, rest in dockerfile.instructions if keyword == "ENV" and rest.startswith("JDK_JAVA_OPTIONS=")]
    assert len(env) == 1
    options = dockerfile.expand(env[0].partition("=")[2].strip('"')).split()
    assert options == [f"-XX:SharedArchiveFile={archive}", *QUIET]


def test_the_spark_image_keeps_its_conf_directory_empty():
    """Spark's launcher puts $SPARK_HOME/conf on every JVM's classpath, and Java maps no class
    archive with a non-empty directory there."""
    dockerfile = Dockerfile.read(REPO_ROOT / "spark-jobs" / "Dockerfile")
    targets = [rest.split()[-1] for keyword, rest in dockerfile.instructions if keyword in ("COPY", "ADD")]
    assert not [target for target in targets if "/conf" in target], targets
    assert "spark-defaults.conf" not in dockerfile.run_text()


def test_the_spark_image_resolves_its_jars_as_the_native_install_does():
    run = Dockerfile.read(REPO_ROOT / "spark-jobs" / "Dockerfile").run_text()
    assert "infra/deps/install-spark-jars.sh resolve" in run
    assert "infra/deps/install-spark-jars.sh prune" in run
    assert "curl" not in run, "jars fetched by hand would bypass the Maven resolution the native install uses"


def test_every_path_the_compose_file_references_exists():
    missing = []
    for name, service in SERVICES.items():
        build = service.get("build")
        if build:
            context = REPO_ROOT / build["context"]
            if not context.is_dir():
                missing.append(f"{name}: build context {build['context']}")
            if not (context / build.get("dockerfile", "Dockerfile")).is_file():
                missing.append(f"{name}: dockerfile {build.get('dockerfile')}")
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith(".") and not (REPO_ROOT / source).exists():
                missing.append(f"{name}: volume {source}")
    assert not missing, "compose references missing paths:\n" + "\n".join(missing)


def test_compose_builds_exactly_the_three_dockerfiles():
    built = {REPO_ROOT / s["build"]["dockerfile"] for s in SERVICES.values() if "build" in s}
    assert built == set(DOCKERFILES)


def test_every_image_is_pinned_to_a_tag():
    images = [f"{name}: {s['image']}" for name, s in SERVICES.items() if "image" in s]
    images += [f"{d.path.relative_to(REPO_ROOT)}: {image}" for d in map(Dockerfile.read, DOCKERFILES)
               for image in d.base_images()]
    unpinned = [entry for entry in images if image_tag(entry.split(": ", 1)[1]) in (None, "latest")]
    assert not unpinned, "images without a pinned tag:\n" + "\n".join(unpinned)


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_dockerfile_copy_sources_exist_and_are_not_dockerignored(path):
    problems = []
    for source in Dockerfile.read(path).copy_sources():
        if not (REPO_ROOT / source).exists():
            problems.append(f"{source}: missing")
        elif source not in (".", "./") and dockerignored(source):
            problems.append(f"{source}: excluded by .dockerignore")
    assert not problems, f"{path}:\n" + "\n".join(problems)


def _member_folders(path: Path) -> list[str]:
    """The folders the Dockerfile installs with `pip install --no-deps` (its members)."""
    match = re.search(r"pip install ([^\n&]*--no-deps[^\n&]*)", Dockerfile.read(path).run_text())
    assert match, f"{path} installs no member with --no-deps"
    return [word.removeprefix("./").rstrip("/") for word in match[1].split() if not word.startswith("-")]


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_dockerfile_copies_everything_pip_install_needs(path):
    # `pip install <member>` builds each member from its folder: its pyproject.toml, its src/
    # packages and the readme it declares must be copied, and not kept out by .dockerignore.
    copied = {source.rstrip("/") for source in Dockerfile.read(path).copy_sources()}
    absent = []
    for folder in _member_folders(path):
        project = tomllib.loads((REPO_ROOT / folder / "pyproject.toml").read_text())["project"]
        needed = ["pyproject.toml", "src", *([project["readme"]] if "readme" in project else [])]
        if folder not in copied:
            absent.append(folder)
        absent += [f"{folder}/{name}" for name in needed if dockerignored(f"{folder}/{name}")]
        absent += [f"{folder}/src/{p.name}" for p in (REPO_ROOT / folder / "src").iterdir()
                   if (p / "__init__.py").is_file() and dockerignored(f"{folder}/src/{p.name}")]
    assert not absent, f"{path}: the image lacks {absent}"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_the_source_tree_does_not_shadow_the_installed_package(path):
    # Found by the compose test: Spark's Python workers, started in /app, imported the source
    # folder streamstate/ (which has no streamstate_jobs) instead of the installed package.
    # The final WORKDIR (on every Python process's sys.path) holds nothing the build copied.
    dockerfile = Dockerfile.read(path)
    workdir, copied_to = "/", []
    for keyword, rest in dockerfile.instructions:
        if keyword == "WORKDIR":
            workdir = str(PurePosixPath(workdir) / dockerfile.expand(rest))
        elif keyword == "COPY" and "--from=" not in rest:
            copied_to.append(str(PurePosixPath(workdir) / dockerfile.expand(rest.split()[-1])))
    assert _member_folders(path) and copied_to
    inside = [target for target in copied_to if target == workdir or target.startswith(workdir.rstrip("/") + "/")]
    assert not inside, f"{path}: the final WORKDIR {workdir} holds copied files: {inside}"


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_dockerfile_runs_as_a_non_root_user(path):
    user = Dockerfile.read(path).last_user()
    assert user and user.split(":")[0] not in ("root", "0"), f"{path}: final USER is {user!r}"


def make_run_jvm_options() -> str:
    """The JVM options `make run` gives its JVMs unless told otherwise (the Makefile's defaults)."""
    defaults = dict(re.findall(r"^(\w+) \?= (.*)$", (REPO_ROOT / "Makefile").read_text(), re.MULTILINE))
    value = defaults["RUN_JVM_OPTIONS"]
    while reference := re.fullmatch(r"\$\((\w+)\)", value):
        value = defaults[reference[1]]
    return value


@pytest.mark.parametrize("files", [(), (LOCAL_IMAGES_FILE,)], ids=["official-images", "local-images"])
def test_every_jvm_starts_as_make_run_starts_its_jvms_unless_jvm_options_says_otherwise(files):
    as_shipped = yaml.safe_load(compose_config_without_dot_env(COMPOSE_FILE, *files).stdout)["services"]
    emptied = yaml.safe_load(compose_config_without_dot_env(COMPOSE_FILE, *files, variables={"JVM_OPTIONS": ""}).stdout)["services"]
    make_run = make_run_jvm_options()
    assert make_run == "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    for service, variable in JVM_SERVICES.items():
        assert as_shipped[service]["environment"][variable] == make_run, service
        assert emptied[service]["environment"][variable] in ("", None), service
    others = {name: sorted(set(service.get("environment") or {}) & set(JVM_SERVICES.values()))
              for name, service in as_shipped.items() if name not in JVM_SERVICES}
    assert not any(others.values()), f"JVM options on services without a JVM: {others}"


def test_every_long_running_service_has_a_healthcheck():
    missing = sorted(name for name in LONG_RUNNING if "test" not in SERVICES[name].get("healthcheck", {}))
    assert not missing, f"no healthcheck: {missing}"


def test_dependencies_wait_for_health_or_completion():
    for name, service in SERVICES.items():
        for dependency, spec in (service.get("depends_on") or {}).items():
            expected = "service_completed_successfully" if dependency in ONE_SHOT else "service_healthy"
            assert spec.get("condition") == expected, f"{name} -> {dependency}: condition {spec.get('condition')}"


def test_jobs_run_on_the_standalone_cluster_with_s3a_checkpoints():
    for job in (spec.service for spec in JOBS.values()):
        assert job in SERVICES, f"the declared job {job} has no compose service"
        environment = SERVICES[job]["environment"]
        assert environment["STREAMSTATE_SPARK_MASTER"] == "spark://spark-master:7077"
        assert environment["STREAMSTATE_CHECKPOINT_ROOT"].startswith("s3a://")
        assert environment["STREAMSTATE_SPARK_DRIVER_HOST"] == SERVICES[job]["hostname"]
    workers = [s for s in SERVICES.values() if "deploy.worker.Worker" in " ".join(s.get("command", []))]
    assert len(workers) == 2


def test_prometheus_scrapes_services_that_exist_on_their_ports():
    for job, target in COMPOSE_TARGETS.items():
        host, port = target.rsplit(":", 1)
        if host == "localhost":
            continue
        assert host in SERVICES, f"scrape job {job}: no compose service {host}"
        environment = json.dumps(SERVICES[host].get("environment", {}))
        assert port in environment, f"scrape job {job}: {host} does not serve port {port}"


@pytest.mark.parametrize(
    "path, entry_modules",
    [
        (REPO_ROOT / "services" / "api" / "Dockerfile", ["streamstate_api.__main__"]),
        (REPO_ROOT / "producers" / "Dockerfile", ["streamstate_producers.cli", "streamstate_pipeline.cli"]),
        (REPO_ROOT / "spark-jobs" / "Dockerfile", ["streamstate_jobs.sessions.job", "streamstate_jobs.anomalies.job"]),
    ],
    ids=["services-api", "producers", "spark-jobs"],
)
def test_images_do_not_import_what_they_leave_out(path, entry_modules):
    match = re.search(r"python (infra/locked_requirements\.py [^>]*)>", Dockerfile.read(path).run_text())
    assert match, f"{path} does not select its packages from requirements.lock"
    selected = subprocess.run([sys.executable, *match[1].split()], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT, check=True)
    chosen = {m[1] for m in re.finditer(r"^(\S+)==", selected.stdout, re.M)}
    locked = {m[1] for m in re.finditer(r"^([A-Za-z0-9][\w.-]*)(?:\[[^\]]*\])?==", (REPO_ROOT / "requirements.lock").read_text(), re.M)}
    normalise = lambda name: re.sub(r"[-_.]+", "-", name).lower()  # noqa: E731
    left_out = {normalise(name) for name in locked} - {normalise(name) for name in chosen}
    assert left_out, f"{path} installs every locked package"
    modules = {
        module
        for module, distributions in importlib.metadata.packages_distributions().items()
        if {normalise(d) for d in distributions} & left_out
    }
    probe = (
        "import importlib, json, sys\n"
        f"for m in {entry_modules!r}: importlib.import_module(m)\n"
        "print(json.dumps(sorted({name.split('.')[0] for name in sys.modules})))"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert result.returncode == 0, result.stderr
    imported = set(json.loads(result.stdout)) & modules
    assert not imported, f"{path.parent.name} image leaves out packages its code imports: {sorted(imported)}"
