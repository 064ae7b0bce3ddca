"""Which class archive a JVM gets, and how one is written (no JVM: tests/integration runs real ones)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from streamstate_pipeline import class_archives


@pytest.fixture
def archives(tmp_path, monkeypatch):
    monkeypatch.setattr(class_archives, "ARCHIVES_DIR", tmp_path / "archives")
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    return tmp_path


def jars(folder: Path, *names: str) -> list[Path]:
    folder.mkdir(exist_ok=True)
    for name in names:
        (folder / name).write_bytes(name.encode())
    return [folder / name for name in names]


def test_a_folder_wildcard_is_its_jars_in_name_order(tmp_path):
    jars(tmp_path, "b.jar", "a.jar", "notes.txt")
    extra = tmp_path / "extra.jar"
    assert class_archives.classpath_entries(f"{extra}{os.pathsep}{tmp_path}/*") == [extra, tmp_path / "a.jar", tmp_path / "b.jar"]
    assert class_archives.classpath_entries("") == []


def test_the_archive_is_named_by_the_classpath_its_jars_and_the_java(archives):
    classpath = jars(archives / "lib", "a.jar", "b.jar")
    first = class_archives.archive_path("spark-driver", classpath)
    assert first.parent == archives / "archives" and first.name.startswith("spark-driver-")
    assert class_archives.archive_path("spark-driver", classpath) == first
    assert class_archives.archive_path("kafka-broker", classpath) != first
    assert class_archives.archive_path("spark-driver", classpath[::-1]) != first
    assert class_archives.archive_path("spark-driver", classpath[:1]) != first

    classpath[1].write_bytes(b"a rebuilt jar")  # another size
    rebuilt = class_archives.archive_path("spark-driver", classpath)
    assert rebuilt != first
    os.utime(classpath[1], ns=(0, 0))  # the same size, another time
    assert class_archives.archive_path("spark-driver", classpath) not in (first, rebuilt)

    before = class_archives.archive_path("spark-driver", classpath)
    (archives / "jdk" / "bin" / "java").write_text("another java")
    assert class_archives.archive_path("spark-driver", classpath) != before


def test_a_regenerated_base_archive_or_another_jvm_library_gives_another_name(archives):
    """A dynamic archive is refused on any base archive but its own (silently, as a JVM does):
    `java -Xshare:dump` or a JVM update must make `make` write a new one, not call it up to date."""
    classpath = jars(archives / "lib", "a.jar")
    server = archives / "jdk" / "lib" / "server"
    server.mkdir(parents=True)
    names = {class_archives.archive_path("spark-driver", classpath)}
    for name, content in (("classes.jsa", b"base"), ("classes.jsa", b"base, dumped again"), ("libjvm.so", b"jvm")):
        (server / name).write_bytes(content)
        names.add(class_archives.archive_path("spark-driver", classpath))
    assert len(names) == 4


def test_no_java_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", "")
    with pytest.raises(class_archives.ConfigurationError, match="no `java` on PATH"):
        class_archives.java_executable()


def test_only_a_built_archive_is_given_to_a_jvm_and_quietly(tmp_path):
    archive = tmp_path / "spark-driver-0.jsa"
    assert class_archives.use_options(archive) == []
    archive.write_bytes(b"classes")
    options = class_archives.use_options(archive)
    assert options[0] == f"-XX:SharedArchiveFile={archive}"
    assert set(class_archives.QUIET) <= set(options)


def test_an_archive_takes_its_name_only_once_its_jvm_exited(archives):
    archive = class_archives.ARCHIVES_DIR / "spark-driver-0.jsa"
    seen: list[list[str]] = []

    def run(options: list[str]) -> None:
        seen.append(options)
        written = Path(options[0].removeprefix("-XX:ArchiveClassesAtExit="))
        assert written.parent == archive.parent and written != archive
        assert not archive.exists()
        written.write_bytes(b"classes")

    assert class_archives.build(archive, run) is True
    assert archive.read_bytes() == b"classes"
    assert set(class_archives.QUIET) <= set(seen[0])
    assert class_archives.build(archive, run) is False and len(seen) == 1, "an archive is built once"
    assert sorted(path.name for path in archive.parent.iterdir()) == [archive.name]


@pytest.mark.parametrize("outcome", ["fails", "writes nothing"])
def test_a_failed_run_leaves_no_archive(archives, outcome):
    archive = class_archives.ARCHIVES_DIR / "kafka-broker-0.jsa"

    def run(options: list[str]) -> None:
        if outcome == "fails":  # a JVM killed while it wrote its archive
            Path(options[0].removeprefix("-XX:ArchiveClassesAtExit=")).write_bytes(b"half")
            raise subprocess.CalledProcessError(1, ["java"])

    with pytest.raises(class_archives.ClassArchiveFailed):
        class_archives.build(archive, run)
    assert list(archive.parent.iterdir()) == []


def test_a_new_archive_replaces_its_programs_earlier_ones_and_only_those(archives, capsys):
    """Each archive is a few hundred MB, and a changed jar or Java names a new one: the earlier
    archives of the same program go once the new one is written. Another program's, and a file
    not named as archive_path names them (an image's --output), stay."""
    folder = class_archives.ARCHIVES_DIR
    folder.mkdir(parents=True)
    stale = folder / "spark-driver-0123456789abcdef.jsa"
    kept = [folder / "kafka-broker-0123456789abcdef.jsa", folder / "spark-driver-custom.jsa", folder / "spark-driver-0123.jsa"]
    for path in (stale, *kept):
        path.write_bytes(b"old")
    archive = class_archives.archive_path("spark-driver", jars(archives / "jars", "spark-core.jar"))

    class_archives.ensure(archive, "the Spark driver", lambda options: Path(options[0].removeprefix("-XX:ArchiveClassesAtExit=")).write_bytes(b"new"))

    assert archive.read_bytes() == b"new"
    assert not stale.exists()
    assert all(path.read_bytes() == b"old" for path in kept)
    assert stale.name in capsys.readouterr().err
