"""Bucket labels that spread a checkpoint's buckets evenly over its state partitions, by the
placement Spark's hash partitioning gives an INT label (checked against Spark's own ``hash()``
in tests/integration/test_checkpoint_buckets.py)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamstate_jobs.checkpoint_metadata import engine_shape
from streamstate.state import StateSpec
from streamstate.state.placement import balanced_labels, partition_of


def test_numbered_buckets_split_unevenly_which_is_why_labels_are_chosen():
    assert sorted(Counter(partition_of(b, 2) for b in range(8)).values()) == [3, 5]


@given(buckets=st.integers(1, 300), partitions=st.integers(1, 16))
def test_balanced_labels_fill_every_partition_within_one(buckets, partitions):
    labels = balanced_labels(buckets, partitions)
    assert len(labels) == len(set(labels)) == buckets
    assert all(0 <= label < 2**31 for label in labels)
    per_partition = Counter(partition_of(label, partitions) for label in labels)
    counts = [per_partition.get(p, 0) for p in range(partitions)]
    assert max(counts) - min(counts) <= 1, counts
    assert labels == balanced_labels(buckets, partitions), "the same counts give the same labels"


def test_the_engine_file_takes_the_old_shape_and_the_labelled_one():
    assert engine_shape({"state_buckets": 64})
    assert engine_shape({"state_buckets": 3, "bucket_labels": [0, 1, 5]})
    for bad in (
        {"state_buckets": 3, "bucket_labels": [0, 1]},
        {"state_buckets": 3, "bucket_labels": [0, 1, 1]},
        {"state_buckets": 2, "bucket_labels": [0, -1]},
        {"state_buckets": 2, "bucket_labels": [0, 2**31]},
        {"state_buckets": 2, "bucket_labels": [0, True]},
        {"state_buckets": 2, "bucket_labels": "01"},
        {"bucket_labels": [0]},
    ):
        assert not engine_shape(bad), bad


def test_a_spec_takes_labels_only_one_per_bucket():
    spec = StateSpec.function(lambda key, value, state: None)
    assert spec.buckets(3, [4, 0, 9]).bucket_labels == (4, 0, 9)
    assert spec.buckets(3, [4, 0, 9]).buckets(5).bucket_labels is None
    assert spec.buckets(3, [0, 1, 2]).bucket_labels is None, "numbered labels are the default placement"
    for labels in ([0, 1], [0, 1, 1], [0, 1, -2], [0, 1, 2.0]):
        with pytest.raises(ValueError, match="bucket labels must be 3 distinct ints"):
            spec.buckets(3, labels)
