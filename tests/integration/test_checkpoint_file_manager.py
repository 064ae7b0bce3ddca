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
        return _s3a_manager(spark, request.getfixturevalue("production_stack"))
    return _manager_at(spark, f"file://{tmp_path}/checkpoint")


def _s3a_manager(spark, production_stack):
    reaching_object_store(spark, production_stack)
    return _manager_at(spark, f"s3a://{BUCKET}/tests/file-manager-{uuid.uuid4().hex[:8]}")


def _manager_at(spark, folder: str):
    jvm = spark.sparkContext._jvm
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    path = jvm.org.apache.hadoop.fs.Path(folder)
    made = jvm.org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager.create(path, conf)
    made.mkdirs(path)
    return jvm, made, folder, folder.startswith("s3a://")


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


def test_of_two_writers_of_a_new_name_the_second_to_close_is_refused(manager):
    """Both find the name free; on S3A the store itself refuses the second (a conditional PUT),
    elsewhere the rename does, and either way it surfaces as the exception Spark's logs expect."""
    jvm, made, folder, _ = manager
    first = _write(jvm, made, f"{folder}/3", CONTENT, overwrite=False, close=False)
    second = _write(jvm, made, f"{folder}/3", b"other writer", overwrite=False, close=False)
    first.close()
    with pytest.raises(Py4JJavaError) as refused:
        second.close()
    assert refused.value.java_exception.getClass().getName() == "org.apache.hadoop.fs.FileAlreadyExistsException"
    assert _read(jvm, made, f"{folder}/3") == CONTENT


REQUEST_KINDS = ("object_put_request", "action_http_head_request", "object_list_request", "action_http_get_request")


def _s3a_requests(jvm, spark, folder: str) -> dict[str, int]:
    """S3A's request counters by kind (``REQUEST_KINDS``), as the manager's file system has counted them."""
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    fs = jvm.org.apache.hadoop.fs.Path(folder).getFileSystem(conf)  # the cached instance the manager writes through
    counters = jvm.org.apache.hadoop.fs.statistics.IOStatisticsSupport.snapshotIOStatistics(fs.getIOStatistics()).counters()
    return {name: int(counters.get(name)) for name in REQUEST_KINDS}


@pytest.mark.parametrize("overwrite", [False, True])
def test_on_s3a_a_checkpoint_file_costs_one_put_and_no_probe(spark, production_stack, overwrite):
    """S3A's create looks for the name (a HEAD and a LIST) before the PUT unless told not to."""
    jvm, made, folder, _ = _s3a_manager(spark, production_stack)
    before = _s3a_requests(jvm, spark, folder)
    _write(jvm, made, f"{folder}/4", CONTENT, overwrite=overwrite)
    after = _s3a_requests(jvm, spark, folder)
    assert {name: after[name] - before[name] for name in after} == {
        "object_put_request": 1, "action_http_head_request": 0, "object_list_request": 0, "action_http_get_request": 0}


def test_on_s3a_looking_for_a_log_file_costs_one_head_and_nothing_else(spark, production_stack):
    """Spark looks for each offset and commit log file before writing it. S3A's check of a
    missing name is a HEAD and then a LIST (for a directory of that name); a log folder holds
    only files, so there the HEAD is the answer. A manager that has written no log file asks."""
    jvm, made, folder, _ = _s3a_manager(spark, production_stack)
    path = jvm.org.apache.hadoop.fs.Path
    _write(jvm, _manager_at(spark, folder)[1], f"{folder}/offsets/5", CONTENT, overwrite=False)  # another manager's file
    before = _s3a_requests(jvm, spark, folder)
    found = [made.exists(path(f"{folder}/{log}/{batch}")) for log in ("offsets", "commits") for batch in ("5", "6")]
    after = _s3a_requests(jvm, spark, folder)
    assert found == [True, False, False, False]
    assert {name: after[name] - before[name] for name in after} == {
        "object_put_request": 0, "action_http_head_request": 4, "object_list_request": 0, "action_http_get_request": 0}


def test_on_s3a_the_log_file_after_the_managers_own_is_missing_without_a_request(spark, production_stack):
    """A query writes its log files in order through one manager per log: the next one after
    the file it wrote is not there unless another writer made it, and the store refuses that
    writer's name to this one's PUT, which Spark reports as two queries on one checkpoint."""
    jvm, made, folder, _ = _s3a_manager(spark, production_stack)
    path = jvm.org.apache.hadoop.fs.Path
    _write(jvm, made, f"{folder}/offsets/7", CONTENT, overwrite=False)
    before = _s3a_requests(jvm, spark, folder)
    assert not made.exists(path(f"{folder}/offsets/8"))
    assert _s3a_requests(jvm, spark, folder) == before
    # Any other name is asked for: a later batch, another log, the file itself.
    assert [made.exists(path(f"{folder}/{name}")) for name in ("offsets/9", "commits/8", "offsets/7")] == [False, False, True]
    assert _s3a_requests(jvm, spark, folder)["action_http_head_request"] == before["action_http_head_request"] + 3

    other = _manager_at(spark, folder)[1]  # a second query on the same checkpoint
    _write(jvm, other, f"{folder}/offsets/8", b"other writer", overwrite=False)
    assert not made.exists(path(f"{folder}/offsets/8"))
    with pytest.raises(Py4JJavaError) as refused:
        _write(jvm, made, f"{folder}/offsets/8", CONTENT, overwrite=False)
    assert refused.value.java_exception.getClass().getName() == "org.apache.hadoop.fs.FileAlreadyExistsException"
    assert _read(jvm, made, f"{folder}/offsets/8") == b"other writer"
    assert _manager_at(spark, folder)[1].exists(path(f"{folder}/offsets/8"))  # a restarted query's manager finds it


def test_on_s3a_folders_and_other_files_are_found_as_spark_finds_them(spark, production_stack):
    """Only a log folder's batch files skip the LIST: a folder (one named by a number too, as a
    state partition's is) exists while any object is under it."""
    jvm, made, folder, _ = _s3a_manager(spark, production_stack)
    path = jvm.org.apache.hadoop.fs.Path
    _write(jvm, made, f"{folder}/state/0/1/1.changelog", CONTENT, overwrite=False)
    _write(jvm, made, f"{folder}/commits/0", CONTENT, overwrite=False)
    for existing in ("state", "state/0", "state/0/1", "state/0/1/1.changelog", "commits", "commits/0"):
        assert made.exists(path(f"{folder}/{existing}")), existing
    for missing in ("state/1", "state/0/1/2.changelog", "offsets", "metadata"):
        assert not made.exists(path(f"{folder}/{missing}")), missing
