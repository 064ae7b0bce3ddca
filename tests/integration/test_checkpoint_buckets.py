"""A checkpoint keeps the bucket count and labels its keys were placed with (a key's bucket is
where its state lives): a new one records the asked-for count, or the default for new
checkpoints, under labels that fill its state partitions evenly; an existing one keeps its
own whatever the default is now, and a set count that differs is refused before any query
starts."""

from __future__ import annotations

import json

import pytest
from pyspark.sql import functions as F

from streamstate_jobs.checkpoints import StatePartitionsChanged, bucket_labels
from streamstate_pipeline.settings import NEW_CHECKPOINT_BUCKETS, UNRECORDED_BUCKETS
from streamstate.state.placement import balanced_labels, spark_int_hash

pytestmark = pytest.mark.spark


def _recorded(path) -> dict:
    body = json.loads((path / "streamstate" / "engine.json").read_text())
    return {key: value for key, value in body.items() if key != "sha256"}


def test_the_placement_is_sparks_own(spark):
    labels = spark.range(5000).select(F.col("id").cast("int").alias("label"))
    hashed = {row.label: row.h for row in labels.select("label", F.hash("label").alias("h")).collect()}
    assert hashed == {label: spark_int_hash(label) for label in range(5000)}
    # Where a shuffle by an INT label puts each label, as the stateful operator's exchange does.
    placed = labels.repartition(3, "label").select("label", F.spark_partition_id().alias("p")).collect()
    assert {row.label: row.p for row in placed} == {label: spark_int_hash(label) % 3 for label in range(5000)}


def test_a_new_checkpoint_gets_the_new_default_under_balanced_labels(spark, tmp_path):
    assert NEW_CHECKPOINT_BUCKETS != UNRECORDED_BUCKETS
    checkpoint = str(tmp_path / "cp")
    labels = bucket_labels(spark, checkpoint, None, 2)
    assert labels == balanced_labels(NEW_CHECKPOINT_BUCKETS, 2) and labels != tuple(range(NEW_CHECKPOINT_BUCKETS))
    assert _recorded(tmp_path / "cp") == {"state_buckets": NEW_CHECKPOINT_BUCKETS, "bucket_labels": list(labels)}
    assert bucket_labels(spark, checkpoint, None, 2) == labels
    assert bucket_labels(spark, checkpoint, NEW_CHECKPOINT_BUCKETS, 2) == labels
    with pytest.raises(StatePartitionsChanged, match=f"in {NEW_CHECKPOINT_BUCKETS} buckets"):
        bucket_labels(spark, checkpoint, UNRECORDED_BUCKETS, 2)


def test_an_asked_for_count_is_recorded_and_then_fixed(spark, tmp_path):
    checkpoint = str(tmp_path / "cp")
    labels = bucket_labels(spark, checkpoint, 64, 4)
    assert labels == balanced_labels(64, 4)
    assert bucket_labels(spark, checkpoint, None, 4) == labels, "an existing checkpoint keeps its count when none is set"
    with pytest.raises(StatePartitionsChanged, match="keeps its keys' state in 64 buckets.*STREAMSTATE_STATE_BUCKETS=64"):
        bucket_labels(spark, checkpoint, 128, 4)


def test_a_checkpoint_from_before_labels_keeps_its_numbered_buckets(spark, tmp_path):
    checkpoint = str(tmp_path / "cp")
    bucket_labels(spark, checkpoint, 64, 2)
    engine = tmp_path / "cp" / "streamstate" / "engine.json"
    engine.write_text('{"state_buckets": 64}')  # as written before labels were recorded
    for crc in engine.parent.glob(".*.crc"):
        crc.unlink()
    assert bucket_labels(spark, checkpoint, None, 2) == tuple(range(64))


def test_a_checkpoint_from_before_the_count_was_recorded_keeps_the_old_default(spark, tmp_path):
    commits = tmp_path / "cp" / "commits"
    commits.mkdir(parents=True)
    (commits / "0").write_text('v1\n{"nextBatchWatermarkMs":0}\n')
    checkpoint = str(tmp_path / "cp")
    assert bucket_labels(spark, checkpoint, None, 2) == tuple(range(UNRECORDED_BUCKETS))
    assert bucket_labels(spark, checkpoint, 16, 2) == tuple(range(16)), "a set count is trusted where nothing was recorded"
    assert not (tmp_path / "cp" / "streamstate" / "engine.json").exists(), "nothing known is recorded"
