"""A Kafka record whose timestamp Spark's source cannot convert, on a topic with Kafka's defaults:
dead-lettered once and skipped by an edit of the offset log Spark itself wrote, every other
record read once, the query running on (issue 51; the jobs' case is
``tests/reliability/test_extreme_kafka_timestamps.py``)."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from confluent_kafka import Producer

from streamstate_pipeline.contracts import DeadLetter
from streamstate_jobs.checkpoints import CheckpointFiles
from streamstate_jobs.kafka.connector import read_kafka
from streamstate_jobs.kafka.timestamps import SPARK_LIMIT_MS
from streamstate_jobs.kafka.unreadable_records import (
    RunPastUnreadableRecords,
    Skipper,
    UnreadableRecord,
    dead_letter,
    write_dead_letter,
)
from tests.integration.kafka_testing import read_topic

pytestmark = pytest.mark.spark


def _produce(bootstrap: str, topic: str, records: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(partition, timestamp) records, in order; returns (partition, offset) of each."""
    landed: list[tuple[int, int]] = []
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i, (partition, stamp) in enumerate(records):
        producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=partition, timestamp=stamp,
                         on_delivery=lambda e, m: landed.append((m.partition(), m.offset())) if e is None else pytest.fail(str(e)))
        producer.flush(30)  # one at a time: offsets in the order given
    return landed


def _starts(files: CheckpointFiles, topic: str) -> dict[str, int]:
    return json.loads((files.read("sources/0/0") or "").split("\n")[1])[topic]


def _ends(files: CheckpointFiles, batch: int, topic: str) -> dict[str, int]:
    return json.loads((files.read(f"offsets/{batch}") or "").split("\n")[2])[topic]


def test_an_unreadable_record_is_dead_lettered_once_and_skipped_and_the_rest_read_once(
    profile_spark, profile_settings, bootstrap, new_topic, tmp_path
):
    """On each profile's checkpoints: a local disk (with Hadoop's .crc files) and s3a:// on MinIO."""
    spark, settings = profile_spark, profile_settings
    topic, dead = new_topic(2, "plain"), new_topic(1, "dead")
    now = int(time.time() * 1000)  # a fixed date ages past the topic's 7-day retention, which then deletes the records
    beyond, below = SPARK_LIMIT_MS + 1, -(2**62)
    # Partition 0: ten records, the unreadable one at offset 6 (its batch is cut before it, then it
    # is skipped); partition 1: the unreadable one first (its start, the initial offsets, moves past it).
    landed = _produce(bootstrap, topic, [(0, now)] * 6 + [(0, beyond)] + [(0, now)] * 3 + [(1, below), (1, now), (1, now)])
    unreadable = {(0, 6): beyond, (1, 0): below}
    assert set(unreadable) <= set(landed)

    seen: list[tuple[int, int, int]] = []  # batch, partition, offset
    checkpoint = f"{settings.checkpoint_root}/cp"
    writer = (
        read_kafka(spark, settings, topic).select("partition", "offset")
        .writeStream.foreachBatch(lambda df, batch: seen.extend((batch, r.partition, r.offset) for r in df.collect()))
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
    )
    prefix = f"streamstate.test.{uuid.uuid4().hex[:8]}"
    query = RunPastUnreadableRecords(writer.start, Skipper(spark, settings, checkpoint, dead, lambda: prefix))
    try:
        query.awaitTermination(240)
        assert query.exception() is None and not query.isActive
    finally:
        query.stop()

    assert sorted((p, o) for _, p, o in seen) == sorted(set(landed) - set(unreadable)), "every other record read, each once"
    letters = [DeadLetter.model_validate_json(m.value or b"") for m in read_topic(bootstrap, dead)]
    assert sorted((d.source_partition, d.source_offset) for d in letters) == sorted(unreadable), "one dead letter each"
    for letter in letters:
        stamp = unreadable[(letter.source_partition, letter.source_offset)]
        assert (letter.stage, letter.source_topic, letter.ts) == ("contract", topic, stamp)
        assert str(stamp) in letter.reason and "timestamp" in letter.reason
        assert letter.key == f"k{landed.index((letter.source_partition, letter.source_offset))}"

    # The edits, in the files Spark wrote (read through Hadoop, which checks each file's .crc).
    files = CheckpointFiles(spark, checkpoint)
    assert _starts(files, topic)["1"] == 1, "partition 1's initial offset moved past its first record"
    # Batch 0 was cut to end before the record (it read 0-5), then its end moved past it (to 7), where batch 1 started.
    assert sorted(o for b, p, o in seen if (b, p) == (0, 0)) == [0, 1, 2, 3, 4, 5]
    assert [_ends(files, batch, topic)["0"] for batch in sorted(files.batches("offsets"))] == [7, 10]
    assert sorted(o for b, p, o in seen if (b, p) == (1, 0)) == [7, 8, 9]
    if not checkpoint.startswith("s3a://"):
        assert (tmp_path / "checkpoints" / "cp" / "offsets" / ".0.crc").exists(), "checked on every read above"

    # The same record again: its marker shows the letter was written, so nothing is.
    record = UnreadableRecord(topic, 0, 6, beyond)
    assert not write_dead_letter(settings, dead, dead_letter(record, b"k6", b"v6"), f"{prefix}.unreadable.{topic}.0.6")
    assert len(read_topic(bootstrap, dead)) == 2

    # The edited checkpoint restarts as any other: nothing read again.
    before = len(seen)
    again = writer.start()
    again.awaitTermination(120)
    assert again.exception() is None and len(seen) == before
