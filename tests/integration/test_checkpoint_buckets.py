"""A checkpoint keeps the bucket count its keys were placed with (a key's bucket is where its
state lives): the same count passes, another is refused before any query starts."""

from __future__ import annotations

import json

import pytest

from streamstate.jobs.checkpoints import StatePartitionsChanged, check_state_buckets

pytestmark = pytest.mark.spark


def test_the_bucket_count_is_recorded_and_then_fixed(spark, tmp_path):
    checkpoint = str(tmp_path / "cp")
    check_state_buckets(spark, checkpoint, 64)
    assert json.loads((tmp_path / "cp" / "streamstate" / "engine.json").read_text())["state_buckets"] == 64
    check_state_buckets(spark, checkpoint, 64)
    with pytest.raises(StatePartitionsChanged, match="keeps its keys' state in 64 buckets.*STREAMSTATE_STATE_BUCKETS=64"):
        check_state_buckets(spark, checkpoint, 128)
