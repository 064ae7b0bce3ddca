"""Kills around a checkpoint's own steps: a job killed while Spark wrote its first batch can
start again (the half-written temporary file it left in the offset log would otherwise make
Spark refuse the checkpoint for good), and a start-over killed while moving the checkpoint
aside is finished by the next start."""

from __future__ import annotations

import shutil

import pytest
from pyspark.errors import StreamingQueryException

from streamstate_jobs.checkpoints import discard_unstarted_leftovers, finish_interrupted_move

pytestmark = pytest.mark.spark


def _run_once(spark, source, checkpoint) -> list[int]:
    seen: list[int] = []
    query = (
        spark.readStream.schema("n INT").json(str(source))
        .writeStream.foreachBatch(lambda df, _: seen.extend(r.n for r in df.collect()))
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    return seen


def test_a_kill_during_the_first_offset_write_does_not_block_the_restart(spark, tmp_path):
    source = tmp_path / "in"
    source.mkdir()
    (source / "a.json").write_text('{"n": 1}\n{"n": 2}\n')
    checkpoint = tmp_path / "cp"
    (checkpoint / "offsets").mkdir(parents=True)
    # What a SIGKILL between Spark's write of the temporary file and its rename leaves.
    (checkpoint / "offsets" / ".0.6a1f0c1e-0000-4000-8000-000000000000.tmp").write_text("v1\n")

    with pytest.raises(StreamingQueryException, match="should be empty on batch 0"):
        _run_once(spark, source, str(checkpoint))

    discard_unstarted_leftovers(spark, str(checkpoint))
    assert sorted(_run_once(spark, source, str(checkpoint))) == [1, 2]
    discard_unstarted_leftovers(spark, str(checkpoint))  # a started checkpoint is left as it is
    assert sorted(p.name for p in (checkpoint / "offsets").iterdir() if not p.name.startswith(".")) == ["0"]


class _Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs."""


def _checkpoint_with_batches(root) -> None:
    for folder in ("offsets", "commits", "state/0/0", "streamstate"):
        (root / folder).mkdir(parents=True)
    for name in ("offsets/0", "offsets/1", "commits/0", "state/0/0/1.delta", "streamstate/topic-ids.json", "metadata"):
        (root / name).write_text(name)


def test_a_start_over_killed_at_any_step_leaves_no_part_of_the_old_checkpoint_in_place(spark, tmp_path):
    """A start-over moves the checkpoint aside under a marker. On a local disk the move is one
    rename; on S3 it is a copy and then a delete, and a kill in the delete would leave part of
    the old checkpoint where the job reads it. Each kill point is recreated as it leaves the
    files, and the next start (finish_interrupted_move, which every query start runs first)
    must leave nothing at the checkpoint and the marker gone."""
    from streamstate_jobs.checkpoints import CheckpointFiles

    checkpoint = tmp_path / "cp"
    target_of = lambda suffix: tmp_path / f"cp.{suffix}"  # noqa: E731
    marker = tmp_path / "cp.moving-aside"

    # 1. Killed after the marker, before the rename: the next start does the move.
    _checkpoint_with_batches(checkpoint)
    files = CheckpointFiles(spark, str(checkpoint))
    rename = files._rename_root
    files._rename_root = lambda target: (_ for _ in ()).throw(_Killed())
    with pytest.raises(_Killed):
        files.move_aside("reset-1")
    assert marker.exists() and checkpoint.exists()
    finish_interrupted_move(spark, str(checkpoint))
    assert not checkpoint.exists() and not marker.exists() and (target_of("reset-1") / "offsets" / "1").exists()

    # 2. Killed in an S3 rename's delete phase: the copy is complete, part of the old remains.
    _checkpoint_with_batches(checkpoint)
    shutil.copytree(checkpoint, target_of("reset-2"))
    shutil.rmtree(checkpoint / "offsets")
    marker.write_text(str(target_of("reset-2")))
    finish_interrupted_move(spark, str(checkpoint))
    assert not checkpoint.exists() and not marker.exists() and (target_of("reset-2") / "commits" / "0").exists()

    # 3. Killed after the rename, before the marker went: nothing left to move.
    marker.write_text(str(target_of("reset-2")))
    finish_interrupted_move(spark, str(checkpoint))
    assert not marker.exists() and (target_of("reset-2") / "metadata").exists()

    # 4. A move that completes leaves no marker, and a later start moves nothing.
    _checkpoint_with_batches(checkpoint)
    files = CheckpointFiles(spark, str(checkpoint))
    files._rename_root = rename
    assert files.move_aside("reset-4") == str(target_of("reset-4"))
    assert not marker.exists() and not checkpoint.exists()
    finish_interrupted_move(spark, str(checkpoint))
    assert (target_of("reset-4") / "state" / "0" / "0" / "1.delta").exists()
