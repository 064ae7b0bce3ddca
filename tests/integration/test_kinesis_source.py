"""The Kinesis source on real Spark against the real local Kinesis-API server (kinesis-mock)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest

from streamstate_jobs.kinesis import KINESIS_SCHEMA, read_kinesis
from tests.integration.kafka_testing import collect_batches
from tests.kinesis_testing import ThrottlingProxy, merge, ordinals, put_in_order, split

pytestmark = pytest.mark.spark
COLUMNS = ("key", "value", "stream", "shardId", "sequenceNumber", "approximateArrivalTimestamp", "partition", "offset")


def spread(count: int, keys: int = 41, tag: str = "v") -> list[tuple[str, bytes]]:
    return [(f"user-{i % keys}", f"{tag}{i}".encode()) for i in range(count)]


def test_reads_a_stream_of_several_shards_exactly(spark, kinesis_settings, new_stream, tmp_path):
    stream = new_stream(shards=3)
    landed = put_in_order(kinesis_settings, stream, spread(3_000))
    assert len({r.shard_id for r in landed}) == 3

    df = read_kinesis(spark, kinesis_settings, streamName=stream, startingPosition="TRIM_HORIZON")
    assert df.schema == KINESIS_SCHEMA
    rows = [r for batch in collect_batches(df, str(tmp_path / "ck"), COLUMNS) for r in batch]

    assert len(rows) == 3_000
    expected = {(r.shard_id, r.sequence_number): r for r in landed}
    ordinal = ordinals(landed)
    for key, value, name, shard_id, seq, arrival, partition, offset in rows:
        record = expected.pop((shard_id, seq))
        assert (key.decode(), value, name, partition) == (record.key, record.value, stream, record.partition)
        assert offset == ordinal[(shard_id, seq)]  # dense per shard, from 0
        assert arrival is not None and arrival.year >= 2024
    assert not expected


def test_split_and_merge_mid_stream_lose_nothing_repeat_nothing_and_keep_key_order(spark, kinesis_settings, new_stream, tmp_path):
    stream = new_stream(shards=2)
    batches: list[tuple[int, list[tuple]]] = []
    lock = threading.Lock()

    def keep(batch_df, batch_id):
        rows = [tuple(r) for r in batch_df.select("key", "value", "shardId", "sequenceNumber", "partition", "offset").collect()]
        with lock:
            batches.append((batch_id, rows))

    def read_count() -> int:
        with lock:
            return sum(len(rows) for _, rows in batches)

    def wait_for(count: int) -> None:
        deadline = time.monotonic() + 180
        while read_count() < count:
            assert query.isActive, query.exception()
            assert time.monotonic() < deadline, f"read {read_count()} of {count}"
            time.sleep(0.2)

    df = read_kinesis(spark, kinesis_settings, streamName=stream, startingPosition="TRIM_HORIZON", maxRecordsPerTrigger=150)
    query = df.writeStream.foreachBatch(keep).option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="200 milliseconds").start()
    try:
        landed = put_in_order(kinesis_settings, stream, spread(600, tag="a"))
        wait_for(150)  # the parents are partly read when the split comes
        children = split(kinesis_settings, stream, "shardId-000000000000")
        landed += put_in_order(kinesis_settings, stream, spread(600, tag="b"))
        merged = merge(kinesis_settings, stream, *children)
        landed += put_in_order(kinesis_settings, stream, spread(600, tag="c"))
        wait_for(1_800)
        time.sleep(1)  # a repeated record, if the source produced one, would arrive now
    finally:
        query.stop()
    assert query.exception() is None

    assert max(len(rows) for _, rows in batches) <= 150  # maxRecordsPerTrigger bounds every batch
    rows = [(batch_id, *row) for batch_id, rows in batches for row in rows]
    read = [(shard_id, seq) for _, _, _, shard_id, seq, _, _ in rows]
    assert len(read) == len(set(read)) == 1_800
    assert set(read) == {(r.shard_id, r.sequence_number) for r in landed}
    assert {r.shard_id for r in landed} >= {"shardId-000000000000", *children, merged}

    # Each key's records, ordered as the jobs order them (batch, then partition and offset), are in put order.
    by_key: dict[str, list[tuple]] = defaultdict(list)
    for batch_id, key, value, _, _, partition, offset in rows:
        by_key[key.decode()].append(((batch_id, partition, offset), value))
    put_order: dict[str, list[bytes]] = defaultdict(list)
    for record in landed:
        put_order[record.key].append(record.value)
    assert {k: [v for _, v in sorted(vs)] for k, vs in by_key.items()} == dict(put_order)

    # A child's first batch comes after the last batch of every parent.
    batches_of: dict[str, list[int]] = defaultdict(list)
    for batch_id, _, _, shard_id, _, _, _ in rows:
        batches_of[shard_id].append(batch_id)
    for child in children:
        assert min(batches_of[child]) > max(batches_of["shardId-000000000000"])
        assert min(batches_of[merged]) > max(batches_of[child])


def test_throttling_and_provisioned_throughput_exceeded_are_waited_out(spark, kinesis_settings, new_stream, tmp_path):
    stream = new_stream(shards=2)
    landed = put_in_order(kinesis_settings, stream, spread(400))
    with ThrottlingProxy(kinesis_settings.kinesis_endpoint_url, every=3) as proxy:
        df = read_kinesis(
            spark, kinesis_settings, streamName=stream, maxRecordsPerTrigger=100, maxRecordsPerFetch=20,
            endpointUrl=proxy.url, retryInitialMs=20, retryMaxMs=200,
        )
        batches = collect_batches(df, str(tmp_path / "ck"), ("shardId", "sequenceNumber"), available_now=False)
    read = [(r[0], r[1]) for b in batches for r in b]
    assert max(len(b) for b in batches) <= 100
    assert proxy.throttled >= 10, f"only {proxy.throttled} of {proxy.calls} calls were throttled: nothing was tested"
    assert sorted(read) == sorted((r.shard_id, r.sequence_number) for r in landed)


def test_latest_and_at_timestamp_starting_positions(spark, kinesis_settings, new_stream, tmp_path):
    stream = new_stream(shards=2)
    before = put_in_order(kinesis_settings, stream, spread(40, tag="old"))
    time.sleep(1.1)  # arrival times have millisecond precision: a clear gap between the two sets
    since = int(time.time() * 1000)
    time.sleep(0.1)
    after = put_in_order(kinesis_settings, stream, spread(30, tag="new"))
    assert before and after

    at = read_kinesis(spark, kinesis_settings, streamName=stream, startingPosition="AT_TIMESTAMP", startingTimestamp=str(since))
    read = {r[0] for b in collect_batches(at, str(tmp_path / "at"), ("value",)) for r in b}
    assert read == {r.value for r in after}

    seen: list[bytes] = []
    latest = read_kinesis(spark, kinesis_settings, streamName=stream, startingPosition="LATEST")
    query = (
        latest.writeStream.foreachBatch(lambda df, _: seen.extend(r[0] for r in df.select("value").collect()))
        .option("checkpointLocation", str(tmp_path / "latest"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 120
        while query.lastProgress is None:  # the start position is pinned with the first batch
            assert time.monotonic() < deadline and query.isActive, query.exception()
            time.sleep(0.2)
        newest = put_in_order(kinesis_settings, stream, spread(20, tag="newest"))
        while len(seen) < 20:
            assert time.monotonic() < deadline and query.isActive, query.exception()
            time.sleep(0.2)
        time.sleep(0.5)
    finally:
        query.stop()
    assert sorted(seen) == sorted(r.value for r in newest)


@pytest.mark.parametrize("job", ["sessions", "anomalies"])
def test_with_source_kinesis_each_job_reads_its_stream_once_with_the_kafka_columns(spark, kinesis_settings, job):
    import re

    from streamstate_jobs.context import JobContext
    from streamstate_jobs.registry import JOBS

    context = JobContext(spark, kinesis_settings.model_copy(update={"source": "kinesis"}), JOBS[job])
    plan = JOBS[job].build(context)._jdf.queryExecution().logical().toString()
    assert len(re.findall(r"\bStreamingRelationV2\b", plan)) == 1
    assert "streamstate_kinesis" in plan and "KafkaSourceProvider" not in plan and "kafka.bootstrap.servers" not in plan
