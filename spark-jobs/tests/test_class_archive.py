"""Which Java options build_spark gives a driver for its class archive (no JVM: see
tests/integration/test_class_archives.py for real ones)."""

from __future__ import annotations

import pytest

from streamstate_jobs import class_archive, spark
from streamstate_pipeline import class_archives


@pytest.fixture
def archives(tmp_path, monkeypatch):
    monkeypatch.setattr(class_archives, "ARCHIVES_DIR", tmp_path)
    return tmp_path


def test_no_archive_no_options(archives):
    assert spark.driver_conf({}) == {}


def test_the_archive_of_the_drivers_classpath_joins_the_callers_options(archives, tmp_path):
    jar = tmp_path / "extra.jar"
    jar.write_bytes(b"")
    conf = {spark.DRIVER_CLASSPATH: str(jar), spark.DRIVER_JAVA_OPTIONS: "-Dmine=1"}
    archive = spark.driver_archive(conf)
    assert archive != spark.driver_archive({}), "another classpath, another archive"
    archive.write_bytes(b"classes")
    options = spark.driver_conf(conf)[spark.DRIVER_JAVA_OPTIONS].split()
    assert options[:2] == ["-Dmine=1", f"-XX:SharedArchiveFile={archive}"]
    assert spark.driver_conf({}) == {}, "the archive of another classpath is not given"


def test_an_output_that_exists_is_kept_without_starting_a_jvm(tmp_path, capsys, monkeypatch):
    """The Spark image names its archive (--output); one already written is not written again."""
    archive = tmp_path / "spark.jsa"
    archive.write_bytes(b"classes")
    monkeypatch.setattr(class_archive, "_train", lambda options: pytest.fail("a JVM was started"))
    assert class_archive.main(["--output", str(archive)]) == 0
    assert archive.read_bytes() == b"classes"
    assert f"up to date: {archive}" in capsys.readouterr().err


def test_a_driver_writing_an_archive_maps_none(archives):
    """A JVM refuses to start with both (Java 17: "DynamicDumpSharedSpaces is unsupported when
    base CDS archive is not loaded"): `--output` elsewhere, with the local archive already
    written, trained nothing."""
    spark.driver_archive({}).write_bytes(b"classes")
    writing = {spark.DRIVER_JAVA_OPTIONS: "-XX:ArchiveClassesAtExit=/elsewhere/spark.jsa -Xlog:cds=off"}
    assert spark.driver_conf(writing) == {}
    assert "-XX:SharedArchiveFile=" in spark.driver_conf({})[spark.DRIVER_JAVA_OPTIONS]
