"""spark-jobs/jvm/'s checkpoint file manager, which the tests' session and the embedded jobs
checkpoint through: on S3A (MinIO here) each file is written in place with one PUT and an
aborted write leaves nothing; on local disk it is Spark's own temporary file and rename. Both
keep what Spark's callers rely on: a file appears whole on close, ``overwriteIfPossible=False``
refuses an existing file, and ``True`` replaces it."""

from __future__ import annotations

import uuid

import pytest
from py4j.protocol import Py4JJavaError

from streamstate_jobs.spark import CHECKPOINT_FILE_MANAGER
from tests.conftest import BUCKET, reaching_object_store

pytestmark = pytest.mark.spark

CONTENT = b"v1\n{\"batchWatermarkMs\":0}\n" * 64


@pytest.fixture(params=["s3a", "local"])
def manager(request, spark, tmp_path):
    """(jvm, manager, folder, writes_in_place) over the session's own Hadoop configuration."""
    if request.param == "s3a":
        reaching_object_store(spark, request.getfixturevalue("production_stack"))
        folder = f"s3a://{BUCKET}/tests/file-manager-{uuid.uuid4().hex[:8]}"
    else:
        folder = f"file://{tmp_path}/checkpoint"
    jvm = spark.sparkContext._jvm
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    path = jvm.org.apache.hadoop.fs.Path(folder)
    made = jvm.org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager.create(path, conf)
    made.mkdirs(path)
    return jvm, made, folder, request.param == "s3a"


def _write(jvm, manager, name: str, content: bytes, overwrite: bool, close: bool = True):
    out = manager.createAtomic(jvm.org.apache.hadoop.fs.Path(name), overwrite)
    out.write(bytearray(content))
    if close:
        out.close()
    return out


def _read(jvm, manager, name: str) -> bytes:
    stream = manager.open(jvm.org.apache.hadoop.fs.Path(name))
    try:
        return bytes(jvm.org.apache.commons.io.IOUtils.toByteArray(stream))
    finally:
        stream.close()


def _names(jvm, manager, folder: str) -> list[str]:
    return sorted(status.getPath().getName() for status in manager.list(jvm.org.apache.hadoop.fs.Path(folder)))


def test_the_session_chooses_it_and_it_writes_in_place_only_on_s3a(manager):
    jvm, made, folder, in_place = manager
    assert made.getClass().getName() == CHECKPOINT_FILE_MANAGER
    assert made.writesInPlace() is in_place
    out = _write(jvm, made, f"{folder}/0", CONTENT, overwrite=False, close=False)
    # The final object's own stream on S3A; Spark's temporary file, renamed on close, elsewhere.
    assert out.getClass().getName().endswith("InPlaceStream" if in_place else "RenameBasedFSDataOutputStream")
    out.close()
    assert _read(jvm, made, f"{folder}/0") == CONTENT
    assert _names(jvm, made, folder) == ["0"]


def test_a_cancelled_write_leaves_nothing(manager):
    jvm, made, folder, _ = manager
    out = _write(jvm, made, f"{folder}/1", CONTENT, overwrite=False, close=False)
    out.cancel()
    out.cancel()  # Spark may cancel twice on its error paths
    assert not made.exists(jvm.org.apache.hadoop.fs.Path(f"{folder}/1"))
    assert [name for name in _names(jvm, made, folder) if not name.startswith(".")] == []


def test_an_existing_file_is_refused_without_overwrite_and_replaced_with_it(manager):
    jvm, made, folder, _ = manager
    _write(jvm, made, f"{folder}/2", CONTENT, overwrite=False)
    with pytest.raises(Py4JJavaError) as refused:
        _write(jvm, made, f"{folder}/2", b"other writer", overwrite=False)
    assert "FileAlreadyExistsException" in str(refused.value.java_exception.getClass().getName())
    assert _read(jvm, made, f"{folder}/2") == CONTENT
    _write(jvm, made, f"{folder}/2", b"replaced", overwrite=True)
    assert _read(jvm, made, f"{folder}/2") == b"replaced"
