"""spark-jobs/jvm/'s local file system, which the tests' session and the embedded jobs
checkpoint through, does what Hadoop's own local file system does (permissions, renames, link
status, checksums) without forking chmod or readlink: each operation runs on both and the
results are compared."""

from __future__ import annotations

import os
import stat

import pytest

from streamstate_jobs.spark import LOCAL_ABSTRACT_FILE_SYSTEM, LOCAL_FILE_SYSTEM

pytestmark = pytest.mark.spark


@pytest.fixture
def hadoop(spark):
    """(jvm, conf, ours, hadoop's): the session's raw local file system and Hadoop's own."""
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    root = jvm.java.net.URI("file:///")
    ours = jvm.org.apache.hadoop.fs.FileSystem.get(root, conf)
    theirs = jvm.org.apache.hadoop.fs.RawLocalFileSystem()
    theirs.initialize(root, conf)
    return jvm, conf, ours, theirs


def _mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_the_session_checkpoints_through_it(hadoop):
    jvm, conf, ours, _ = hadoop
    assert ours.getClass().getName() == LOCAL_FILE_SYSTEM
    assert ours.getRawFileSystem().getClass().getName() == "io.streamstate.hadoop.NioRawLocalFileSystem"
    context = jvm.org.apache.hadoop.fs.FileContext.getFileContext(jvm.java.net.URI("file:///"), conf)
    assert context.getDefaultFileSystem().getClass().getName() == LOCAL_ABSTRACT_FILE_SYSTEM


@pytest.mark.parametrize("mode", [0o640, 0o600, 0o755, 0o444, 0o000, 0o777])
def test_created_files_and_directories_get_the_permissions_hadoop_gives(hadoop, tmp_path, mode):
    jvm, _, ours, theirs = hadoop
    permission = jvm.org.apache.hadoop.fs.permission.FsPermission(mode)
    Path = jvm.org.apache.hadoop.fs.Path
    modes = {}
    for name, fs in (("ours", ours.getRawFileSystem()), ("hadoop", theirs)):
        folder = tmp_path / name
        folder.mkdir()
        fs.create(Path(str(folder / "created")), permission, True, 4096, 1, 1 << 20, None).close()
        fs.create(Path(str(folder / "default")), True).close()
        (folder / "changed").write_text("x")
        fs.setPermission(Path(str(folder / "changed")), permission)
        fs.mkdirs(Path(str(folder / "made" / "deeper")), permission)
        modes[name] = {entry: _mode(folder / entry) for entry in ("created", "default", "changed", "made", "made/deeper")}
        os.chmod(folder / "made", 0o700)
        os.chmod(folder / "made" / "deeper", 0o700)
    assert modes["ours"] == modes["hadoop"]
    assert modes["ours"]["changed"] == mode


def test_a_permission_on_a_missing_file_fails_as_hadoops_does(hadoop, tmp_path):
    jvm, _, ours, theirs = hadoop
    permission = jvm.org.apache.hadoop.fs.permission.FsPermission(0o640)
    missing = jvm.org.apache.hadoop.fs.Path(str(tmp_path / "missing"))
    for fs in (ours.getRawFileSystem(), theirs):
        with pytest.raises(Exception, match="IOException|NoSuchFile|ExitCodeException"):
            fs.setPermission(missing, permission)


def test_link_status_is_hadoops_for_files_directories_and_links(hadoop, tmp_path):
    jvm, _, ours, theirs = hadoop
    (tmp_path / "file").write_bytes(b"12345")
    (tmp_path / "dir").mkdir()
    os.symlink(tmp_path / "file", tmp_path / "link")
    for name in ("file", "dir", "link"):
        path = jvm.org.apache.hadoop.fs.Path(str(tmp_path / name))
        statuses = [fs.getFileLinkStatus(path) for fs in (ours.getRawFileSystem(), theirs)]
        described = [
            (s.isSymlink(), s.isDirectory(), s.getLen(), s.getPath().toString(), s.getSymlink().toString() if s.isSymlink() else None)
            for s in statuses
        ]
        assert described[0] == described[1], name


def test_an_overwriting_rename_through_file_context_keeps_checksums(spark, hadoop, tmp_path):
    """Spark's checkpoint manager writes a temporary file, then renames it over the target."""
    jvm, conf, _, _ = hadoop
    gateway, fs = spark.sparkContext._gateway, jvm.org.apache.hadoop.fs
    Path, Rename = fs.Path, fs.Options.Rename
    context = fs.FileContext.getFileContext(jvm.java.net.URI("file:///"), conf)
    overwrite = gateway.new_array(Rename, 1)
    overwrite[0] = Rename.OVERWRITE
    create, no_options = jvm.java.util.EnumSet.of(fs.CreateFlag.CREATE), gateway.new_array(fs.Options.CreateOpts, 0)
    for content in (b"first", b"second, longer"):
        temporary, target = Path(str(tmp_path / ".1.tmp")), Path(str(tmp_path / "1"))
        stream = context.create(temporary, create, no_options)
        stream.write(bytearray(content))
        stream.close()
        context.rename(temporary, target, overwrite)
        assert (tmp_path / "1").read_bytes() == content
        assert not (tmp_path / ".1.tmp").exists()
        # The checksum file moved with it, and Hadoop's checked read accepts the content.
        assert (tmp_path / ".1.crc").exists()
        read = context.open(target)
        assert bytes(read.readAllBytes()) == content
        read.close()
