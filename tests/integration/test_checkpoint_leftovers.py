"""A job killed while Spark wrote its first batch can start again: the half-written temporary
file it left in the offset log would otherwise make Spark refuse the checkpoint for good."""

from __future__ import annotations

import pytest
from pyspark.errors import StreamingQueryException

from streamstate.jobs.checkpoints import discard_unstarted_leftovers

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
