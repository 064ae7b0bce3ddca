"""The Kafka source against the real embedded broker and the shared SparkSession."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from streamstate.jobs.kafka import KAFKA_SCHEMA, read_kafka
from tests.integration.kafka_testing import collect_batches, produce

pytestmark = pytest.mark.spark
POSITION = ("partition", "offset")


def spread(count: int, partitions: int, tag: str = "") -> list[tuple[bytes, bytes, int]]:
    return [(f"user-{i % 97}".encode(), f'{{"n":{i}{tag}}}'.encode(), i % partitions) for i in range(count)]


def test_availablenow_reads_exactly_what_was_produced(spark, settings, bootstrap, new_topic, tmp_path):
    topic = new_topic(partitions=4)
    delivered = produce(bootstrap, topic, spread(200_000, 4))

    df = read_kafka(spark, settings, subscribe=topic, startingOffsets="earliest")
    assert df.schema == KAFKA_SCHEMA
    batches = collect_batches(df, str(tmp_path / "ck"), POSITION)

    read = [row for batch in batches for row in batch]
    assert len(read) == len(delivered) == 200_000
    assert set(read) == {(d.partition, d.offset) for d in delivered}


def test_records_keep_key_value_topic_and_timestamp(spark, settings, bootstrap, new_topic, tmp_path):
    topic = new_topic(partitions=2)
    delivered = produce(bootstrap, topic, [(b"k1", b"v1", 0), (None, b"v2", 1), (b"k3", None, 1)])

    df = read_kafka(spark, settings, subscribe=topic)
    rows = [r for b in collect_batches(df, str(tmp_path / "ck"), tuple(KAFKA_SCHEMA.fieldNames())) for r in b]

    assert sorted((r[3], r[4], r[0], r[1]) for r in rows) == sorted((d.partition, d.offset, d.key, d.value) for d in delivered)
    assert {r[2] for r in rows} == {topic}
    assert all(r[5] is not None and r[5].year >= 2024 and r[6] == 0 for r in rows)  # CreateTime stamps


def test_max_offsets_per_trigger_bounds_every_batch(spark, settings, bootstrap, new_topic, tmp_path):
    topic = new_topic(partitions=3)
    delivered = produce(bootstrap, topic, spread(1_000, 3))

    df = read_kafka(spark, settings, subscribe=topic, maxOffsetsPerTrigger=150)
    batches = collect_batches(df, str(tmp_path / "ck"), POSITION, available_now=False)

    sizes = [len(b) for b in batches if b]
    assert max(sizes) <= 150 and len(sizes) >= 7
    assert sorted(r for b in batches for r in b) == sorted((d.partition, d.offset) for d in delivered)


def test_starting_offsets_json_per_partition(spark, settings, bootstrap, new_topic, tmp_path):
    topic = new_topic(partitions=3)
    before = produce(bootstrap, topic, spread(30, 3))
    starting = json.dumps({topic: {"0": 4, "1": -2, "2": -1}})

    df = read_kafka(spark, settings, subscribe=topic, startingOffsets=starting)
    read = {r for b in collect_batches(df, str(tmp_path / "ck"), POSITION) for r in b}

    expected = {(d.partition, d.offset) for d in before if (d.partition == 0 and d.offset >= 4) or d.partition == 1}
    assert read == expected


def test_restart_from_checkpoint_reads_only_new_records_and_checkpoints_spark_offsets(
    spark, settings, bootstrap, new_topic, tmp_path
):
    topic = new_topic(partitions=2)
    first = produce(bootstrap, topic, spread(500, 2))
    checkpoint = str(tmp_path / "ck")
    df = read_kafka(spark, settings, subscribe=topic)
    assert {r for b in collect_batches(df, checkpoint, POSITION) for r in b} == {(d.partition, d.offset) for d in first}

    second = produce(bootstrap, topic, spread(300, 2, tag=",\"again\":1"))
    read_again = [r for b in collect_batches(df, checkpoint, POSITION) for r in b]
    assert sorted(read_again) == sorted((d.partition, d.offset) for d in second)

    # What Spark checkpoints is the exclusive end per partition, in Spark's Kafka JSON form.
    offset_files = sorted((p for p in Path(checkpoint, "offsets").iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    last_offsets = json.loads(offset_files[-1].read_text().splitlines()[-1])
    ends = {str(p): max(d.offset for d in first + second if d.partition == p) + 1 for p in (0, 1)}
    assert last_offsets == {topic: ends}


def test_unknown_topic_is_a_clear_error_naming_it(spark, settings, tmp_path):
    df = read_kafka(spark, settings, subscribe="no-such-topic-kafka-test")
    with pytest.raises(Exception, match="no-such-topic-kafka-test.*do not exist"):
        collect_batches(df, str(tmp_path / "ck"), POSITION)


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_deleted_topic_follows_fail_on_data_loss(spark, settings, bootstrap, new_topic, tmp_path, fail_on_data_loss):
    kept, doomed = new_topic(partitions=1), new_topic(partitions=1)
    produce(bootstrap, kept, spread(10, 1))
    produce(bootstrap, doomed, spread(10, 1))
    checkpoint = str(tmp_path / "ck")
    df = read_kafka(spark, settings, subscribe=f"{kept},{doomed}", failOnDataLoss=fail_on_data_loss)
    assert sum(len(b) for b in collect_batches(df, checkpoint, POSITION)) == 20

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([doomed]).values():
        future.result(10)
    later = produce(bootstrap, kept, spread(5, 1))

    if fail_on_data_loss == "true":
        with pytest.raises(Exception, match=f"{doomed}.*deleted"):
            collect_batches(df, checkpoint, POSITION)
    else:
        read = {r for b in collect_batches(df, checkpoint, POSITION) for r in b}
        assert read == {(d.partition, d.offset) for d in later}
