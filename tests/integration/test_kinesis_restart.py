"""SIGKILL the driver reading Kinesis mid-stream, reshard while it is down, restart on the same
checkpoints: nothing lost, nothing twice, the same ordinals for the same records."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from streamstate_pipeline.settings import REPO_ROOT
from tests.integration.test_kafka_restart import batch_rows, kill, wait_for
from tests.kinesis_testing import ordinals, put_in_order, split

pytestmark = [pytest.mark.spark, pytest.mark.slow]
DRIVER = Path(__file__).with_name("kinesis_restart_driver.py")
RECORDS, SHARDS, PER_TRIGGER, AFTER_SPLIT = 3_000, 3, 600, 600


def start_driver(endpoint_url: str, stream: str, workdir: Path, run: int) -> subprocess.Popen:
    log = open(workdir / f"driver-{run}.log", "w")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(REPO_ROOT)}
    args = [sys.executable, str(DRIVER), endpoint_url, stream, str(workdir / "ck"), str(workdir / "out"), str(PER_TRIGGER)]
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def test_sigkill_mid_stream_then_reshard_and_restart_loses_and_repeats_nothing(kinesis_settings, new_stream, tmp_path):
    stream = new_stream(shards=SHARDS)
    landed = put_in_order(kinesis_settings, stream, [(f"user-{i % 37}", f"event {i}".encode()) for i in range(RECORDS)])
    raw_out, counts_out = tmp_path / "out" / "raw", tmp_path / "out" / "counts"
    endpoint = kinesis_settings.kinesis_endpoint_url

    first = start_driver(endpoint, stream, tmp_path, 1)
    try:
        committed = lambda q, n: (tmp_path / "ck" / q / "commits" / str(n)).exists()  # noqa: E731
        wait_for(lambda: committed("raw", 1) and committed("counts", 0), first, tmp_path / "driver-1.log", 300, "first commits")
    finally:
        kill(first)
    read_before_kill = len({(s, q) for s, q, _ in batch_rows(raw_out)})
    assert read_before_kill < RECORDS, "the driver finished before it was killed: nothing was tested"

    # While the driver is down the stream is resharded and more records arrive on the children.
    children = split(kinesis_settings, stream, "shardId-000000000000")
    landed += put_in_order(kinesis_settings, stream, [(f"user-{i % 37}", f"late {i}".encode()) for i in range(AFTER_SPLIT)])
    assert {r.shard_id for r in landed} & set(children)
    total = RECORDS + AFTER_SPLIT

    def final_counts() -> dict[str, int]:
        latest: dict[str, int] = {}
        for key, count in batch_rows(counts_out):
            latest[key] = max(count, latest.get(key, 0))
        return latest

    second = start_driver(endpoint, stream, tmp_path, 2)
    try:
        wait_for(
            lambda: len(batch_rows(raw_out)) >= total and sum(final_counts().values()) >= total,
            second, tmp_path / "driver-2.log", 400, "all records to be processed",
        )
        time.sleep(2)  # a duplicate batch, if the restart produced one, would land now
    finally:
        kill(second)

    raw = [(s, q) for s, q, _ in batch_rows(raw_out)]
    assert len(raw) == len(set(raw)) == total  # the union of batch outputs: no record twice
    assert set(raw) == {(r.shard_id, r.sequence_number) for r in landed}
    ordinal = ordinals(landed)
    assert all(o == ordinal[(s, q)] for s, q, o in batch_rows(raw_out))  # replays kept their ordinals
    assert final_counts() == dict(Counter(r.key for r in landed))  # state saw every record exactly once
