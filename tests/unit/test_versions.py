"""infra/versions.env is the one place for versions: the files that cannot read it are
rendered from it and not stale, every third-party image is pinned from it, the Python
wheel is the Spark it names, and the Makefile and the install scripts read it."""

from __future__ import annotations

import re
import tomllib

import pytest
import yaml
from packaging.requirements import Requirement

from streamstate_pipeline import binaries
from streamstate_stack import version_pins
from streamstate_pipeline.settings import REPO_ROOT

VERSIONS = binaries.versions()


def test_the_versions_file_names_every_part():
    for key in ("SPARK_VERSION", "SCALA_BINARY_VERSION", "KAFKA_VERSION", "MINIO_RELEASE", "MINIO_MODULE_VERSION",
                "MC_RELEASE", "PROMETHEUS_VERSION", "GRAFANA_VERSION", "PYTHON_IMAGE"):
        assert VERSIONS.get(key), key


def test_a_line_that_is_not_plain_key_value_is_refused(tmp_path, monkeypatch):
    bad = tmp_path / "versions.env"
    bad.write_text('SPARK_VERSION="4.1.1"\n')
    monkeypatch.setattr(binaries, "VERSIONS_FILE", bad)
    binaries.versions.cache_clear()
    try:
        with pytest.raises(ValueError, match="plain KEY=VALUE"):
            binaries.versions()
    finally:
        binaries.versions.cache_clear()


def test_the_pyspark_wheel_is_the_spark_of_the_versions_file():
    # The jobs pin the wheel (the library's range admits more); the Spark image installs it.
    requirements = tomllib.loads((REPO_ROOT / "spark-jobs" / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = {m[1]: m[2] for m in (re.match(r"([\w-]+)==(\S+)", r) for r in requirements) if m}
    assert pins["pyspark"] == VERSIONS["SPARK_VERSION"], "bump SPARK_VERSION in infra/versions.env and spark-jobs/pyproject.toml's pin together"
    library = tomllib.loads((REPO_ROOT / "library" / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(Requirement(r).name == "pyspark" and VERSIONS["SPARK_VERSION"] in Requirement(r).specifier for r in library), \
        "the library's pyspark range excludes the Spark of infra/versions.env"


def test_the_dockerfiles_rendered_are_the_images_compose_builds():
    built = {REPO_ROOT / service["build"]["dockerfile"] for service in yaml.safe_load(version_pins.COMPOSE.read_text())["services"].values()
             if "build" in service}
    assert set(version_pins.DOCKERFILES) == built


def test_compose_and_the_dockerfiles_are_rendered_from_the_versions_file():
    assert version_pins.stale() == [], "run `make versions`"


def test_a_changed_version_makes_them_stale():
    changed = {**VERSIONS, "KAFKA_VERSION": "0.0.1"}
    text = version_pins.COMPOSE.read_text()
    assert "apache/kafka:0.0.1" in version_pins.render(version_pins.COMPOSE, text, changed)


@pytest.mark.parametrize("path", [version_pins.COMPOSE, version_pins.COMPOSE_LOCAL_IMAGES], ids=lambda p: p.name)
def test_every_third_party_image_is_pinned_from_the_versions_file(path):
    text = path.read_text()
    built = {"streamstate-spark", "streamstate-api", "streamstate-producers"}
    images = [m for m in re.findall(r"^\s+image: (\S+)$", text, re.MULTILINE) if m.split(":")[0] not in built]
    patterns = [pin.pattern for pin in version_pins.PINS if pin.path == path]
    unpinned = [image for image in images if not any(re.match(p, f"    image: {image}") for p in patterns)]
    assert images and not unpinned, f"images whose tag is not rendered from infra/versions.env: {unpinned}"


def test_the_makefile_and_the_install_scripts_read_the_versions_file():
    assert re.search(r"^include infra/versions\.env$", (REPO_ROOT / "Makefile").read_text(), re.MULTILINE)
    common = (REPO_ROOT / "infra" / "deps" / "common.sh").read_text()
    assert "infra/versions.env" in common
    for script in ("install-spark-jars.sh", "install-kafka.sh", "install-minio.sh", "install-mc.sh"):
        assert "common.sh" in (REPO_ROOT / "infra" / "deps" / script).read_text(), script
