"""A stopped query's state stores are snapshotted and unloaded at once (streamstate_jobs.state_snapshots),
not at the maintenance thread's next pass, which a job stopping sooner never reaches."""

from __future__ import annotations

import json

import pytest

from streamstate_jobs.state_snapshots import StoppedQuery, snapshot_stopped

pytestmark = pytest.mark.spark

RUNS = 2


@pytest.fixture
def snapshot_every_version(spark):
    """A local snapshot at every commit (Spark makes one every 10 by default), so two runs suffice."""
    key = "spark.sql.streaming.stateStore.minDeltasForSnapshot"
    before = spark.conf.get(key)
    spark.conf.set(key, "1")
    yield
    spark.conf.set(key, before)


def test_a_stopped_querys_newest_state_is_uploaded_and_its_stores_unloaded(spark, tmp_path, snapshot_every_version):
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    for run in range(RUNS):  # one batch each: state versions 1 and 2
        (source / f"{run}.json").write_text(json.dumps({"user": f"u{run % 2}"}) + "\n")
        query = (
            spark.readStream.schema("user string").json(str(source)).groupBy("user").count()
            .writeStream.format("noop").outputMode("update").option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True).start()
        )
        query.awaitTermination()
    stopped = StoppedQuery(str(checkpoint), str(query.runId))

    stores = snapshot_stopped(spark, [stopped])

    partitions = sorted(p for p in (checkpoint / "state" / "0").iterdir() if p.name.isdigit())
    assert stores == len(partitions) > 0, (stores, partitions)
    for partition in partitions:
        assert (partition / f"{RUNS}.zip").is_file(), sorted(f.name for f in partition.iterdir())
    assert snapshot_stopped(spark, [stopped]) == 0, "the stores stay loaded"


def test_a_checkpoint_without_state_or_a_query_never_run_here_is_nothing_to_do(spark, tmp_path):
    (tmp_path / "stateless").mkdir()
    unknown_run = "00000000-0000-0000-0000-000000000000"
    assert snapshot_stopped(spark, [StoppedQuery(str(tmp_path / "stateless"), unknown_run),
                                    StoppedQuery(str(tmp_path / "missing"), unknown_run)]) == 0
