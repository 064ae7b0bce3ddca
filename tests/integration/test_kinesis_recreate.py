"""A Kinesis stream deleted and created again under a query's checkpoint, on real Spark against
the local Kinesis server: the recreated stream has the same name, ARN and shard ids, so only its
creation time tells it apart; the next batch must fail as a source reset naming the stream, not
read the new stream from the old stream's positions, and a job (a real process) must stop with
exit status 2, or start over when told to."""

from __future__ import annotations

import json
import time

import pytest

from streamstate_jobs.kinesis import read_kinesis
from streamstate_jobs.kinesis.identity import epoch_ms, iso_ms
from streamstate_jobs.lost_input import is_source_reset
from streamstate_pipeline.kinesis import create_stream
from tests.integration.kafka_testing import collect_batches
from tests.kinesis_testing import client, put_in_order

pytestmark = pytest.mark.spark
SHARDS = 2


def records(count: int, tag: str) -> list[tuple[str, bytes]]:
    return [(f"user-{i % 7}", f"{tag}{i}".encode()) for i in range(count)]


def describe(settings, stream: str) -> dict:
    return client(settings).describe_stream_summary(StreamName=stream)["StreamDescriptionSummary"]


def recreate(settings, stream: str) -> None:
    """Delete ``stream``, wait until it is gone, create it again with as many shards."""
    kinesis = client(settings)
    kinesis.delete_stream(StreamName=stream)
    deadline = time.monotonic() + 60
    while True:
        try:
            kinesis.describe_stream_summary(StreamName=stream)
        except kinesis.exceptions.ResourceNotFoundException:
            break
        assert time.monotonic() < deadline, f"{stream} still exists 60 s after DeleteStream"
        time.sleep(0.05)
    assert create_stream(kinesis, stream, SHARDS)


def failure(query) -> str:
    """The text of the query's failure (as the runner sees it), after waiting for it to end."""
    try:
        query.awaitTermination(300)
    except Exception:  # noqa: BLE001 - the failure itself, read back below
        pass
    if query.isActive:
        query.stop()
        pytest.fail("the query still runs 300 s after the stream was recreated: the new stream is being read")
    assert query.exception() is not None, "the query ended without an error: the recreated stream went unnoticed"
    return str(query.exception())


def assert_reset_of(error: str, stream: str, old: dict, new: dict) -> None:
    assert is_source_reset(error), error[:3000]  # the runner's test: stop with exit 2, or start over
    assert f"Kinesis stream {stream!r} was deleted and created again" in error, error[:3000]
    for summary in (old, new):
        assert iso_ms(epoch_ms(summary["StreamCreationTimestamp"])) in error, error[:3000]
    assert "STREAMSTATE_ON_SOURCE_RESET=start-over" in error


def test_the_local_server_gives_a_recreated_stream_a_new_creation_time_only(kinesis_settings, new_stream):
    # What the source relies on, checked on the server the other tests use: a new creation time;
    # the name, ARN and shard ids stay the same (as on AWS), so none of those could tell.
    stream = new_stream(shards=SHARDS)
    old = describe(kinesis_settings, stream)
    time.sleep(0.01)  # creation times are in milliseconds
    recreate(kinesis_settings, stream)
    new = describe(kinesis_settings, stream)
    assert new["StreamCreationTimestamp"] > old["StreamCreationTimestamp"]
    assert new["StreamARN"] == old["StreamARN"]
    shard_ids = [s["ShardId"] for s in client(kinesis_settings).list_shards(StreamName=stream)["Shards"]]
    assert shard_ids == [f"shardId-{n:012d}" for n in range(SHARDS)]


def test_a_stream_recreated_while_the_query_is_down_fails_its_restart(spark, kinesis_settings, new_stream, tmp_path):
    stream = new_stream(shards=SHARDS)
    put_in_order(kinesis_settings, stream, records(60, "old"))
    checkpoint = str(tmp_path / "ck")
    first = collect_batches(read_kinesis(spark, kinesis_settings, streamName=stream), checkpoint, ("value",))
    assert sum(len(b) for b in first) == 60
    old = describe(kinesis_settings, stream)

    recreate(kinesis_settings, stream)
    put_in_order(kinesis_settings, stream, records(40, "new"))
    new = describe(kinesis_settings, stream)

    read: list[bytes] = []
    query = (
        read_kinesis(spark, kinesis_settings, streamName=stream)
        .writeStream.foreachBatch(lambda df, _: read.extend(r[0] for r in df.select("value").collect()))
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    assert_reset_of(failure(query), stream, old, new)
    assert read == []  # not one record of the new stream was read from the old stream's positions


def test_a_stream_recreated_while_the_query_runs_fails_its_next_batch(spark, kinesis_settings, new_stream, tmp_path):
    stream = new_stream(shards=SHARDS)
    put_in_order(kinesis_settings, stream, records(60, "old"))
    old = describe(kinesis_settings, stream)
    batches: list[list[bytes]] = []

    def keep_then_recreate(df, batch_id):
        batches.append([r[0] for r in df.select("value").collect()])
        if batch_id == 0:  # inside the batch, so the recreate lands between two plannings, deterministically
            recreate(kinesis_settings, stream)
            put_in_order(kinesis_settings, stream, records(40, "new"))

    query = (
        read_kinesis(spark, kinesis_settings, streamName=stream)
        .writeStream.foreachBatch(keep_then_recreate)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    error = failure(query)
    assert_reset_of(error, stream, old, describe(kinesis_settings, stream))
    assert [len(b) for b in batches] == [60]  # the old stream's records, then nothing of the new one


@pytest.mark.slow
def test_the_job_stops_with_exit_2_on_a_recreated_stream_or_starts_over(kinesis_settings, stack, new_topic, new_stream, tmp_path):
    # As tests/reliability/test_source_reset.py for a Kafka topic, with the anomalies job (a real
    # process, the runner deciding) reading its metrics from Kinesis.
    from streamstate_stack.launcher import free_port
    from tests.reliability.test_source_reset import latest, points
    from tests.scenario import pipeline_topics

    stream = new_stream(SHARDS, "metrics")
    settings = kinesis_settings.model_copy(
        update={
            **pipeline_topics(new_topic),
            "source": "kinesis",
            "topic_metrics": stream,
            "checkpoint_root": str(tmp_path / "checkpoints"),
            "trigger_interval": "1 second",
            "sessions_metrics_port": 0,
            "anomalies_metrics_port": 0,
            "api_port": free_port(),
        }
    )
    bootstrap, state_topic = settings.bootstrap_servers, settings.topic_metric_state
    launcher = stack.sibling(settings, tmp_path)

    def put_points(count: int, start_ts: int, base: float) -> None:
        put_in_order(settings, stream, [("s", json.dumps(p).encode()) for p in points("s", count, start_ts, base)])

    def wait_for(condition, what: str) -> None:
        deadline = time.monotonic() + 300
        while not condition():
            assert time.monotonic() < deadline, f"{what}:\n{job.tail(60)}"
            time.sleep(1)

    try:
        put_points(50, 1_700_000_000_000, 0.0)
        job = launcher.start_job("anomalies")
        wait_for(lambda: latest(bootstrap, state_topic, "s") == (50, 0.0), "the first run")
        job.stop()
        old = describe(settings, stream)

        recreate(settings, stream)
        put_points(120, 1_700_100_000_000, 100.0)
        new = describe(settings, stream)

        job = launcher.start_job("anomalies")
        wait_for(lambda: not job.alive(), "the job to stop on the recreated stream")
        assert job.popen.returncode == 2, job.tail(60)
        log = job.tail(200)
        assert f"Kinesis stream {stream!r} was deleted and created again" in log, log
        assert iso_ms(epoch_ms(old["StreamCreationTimestamp"])) in log and iso_ms(epoch_ms(new["StreamCreationTimestamp"])) in log, log
        assert "STREAMSTATE_ON_SOURCE_RESET=start-over" in log, log
        assert latest(bootstrap, state_topic, "s") == (50, 0.0), "nothing of the new stream may be applied"

        launcher.settings = settings.model_copy(update={"on_source_reset": "start-over"})
        job = launcher.start_job("anomalies")
        # A fresh state from the new stream's first record: 120 values, all >= 100.
        wait_for(lambda: latest(bootstrap, state_topic, "s") == (120, 100.0), "starting over")
        assert job.alive(), job.tail(40)
        assert "moved to" in job.tail(400)
    finally:
        launcher.stop()
