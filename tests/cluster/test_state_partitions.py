"""The state partition count is fixed per checkpoint: a changed count fails at start, clearly.

Spark stores ``spark.sql.shuffle.partitions`` in each batch's offsets metadata and on
restart silently uses the stored value; the runner refuses to start instead.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from pyspark.sql import functions as F

from streamstate_jobs.checkpoints import StatePartitionsChanged, checkpointed_conf
from streamstate_jobs.declaration import JobSpec
from streamstate_jobs.runner import start_query
from tests.integration.api_harness import wait_until

pytestmark = pytest.mark.spark


def counter_rows(ctx):
    """A minimal job: Spark's rate source as (kind, key, payload) rows."""
    rows = ctx.spark.readStream.format("rate").option("rowsPerSecond", 5).load()
    value = F.col("value").cast("string")
    return rows.select(F.lit("session_state").alias("kind"), value.alias("key"), value.alias("payload"))


def rate_job(name: str) -> JobSpec:
    return JobSpec(name=name, description="rate rows", build=counter_rows, inputs=(),
                   outputs={"session_state": "topic_session_state"}, metrics_port="sessions_metrics_port")


def run_one_batch(spark, settings, job, checkpoint) -> None:
    query = start_query(spark, settings, job, checkpoint)
    try:
        wait_until(lambda: query.lastProgress is not None or query.exception(), 120, "the first batch")
    finally:
        query.stop()
    assert query.exception() is None, query.exception()


def test_a_changed_state_partition_count_fails_at_start(spark, settings, new_topic, tmp_path):
    checkpoint = str(tmp_path / "checkpoint")
    first = settings.model_copy(update={"topic_session_state": new_topic(1, "rows"), "trigger_interval": "1 second"})
    assert checkpointed_conf(spark, checkpoint) is None
    run_one_batch(spark, first, rate_job("partitions-first"), checkpoint)
    stored = checkpointed_conf(spark, checkpoint)["spark.sql.shuffle.partitions"]
    assert stored == str(first.shuffle_partitions)

    changed = first.model_copy(update={"shuffle_partitions": first.shuffle_partitions * 2})
    with pytest.raises(StatePartitionsChanged) as failure:
        start_query(spark, changed, rate_job("partitions-changed"), checkpoint)
    message = str(failure.value)
    assert "\n" not in message
    assert f"holds state in {stored} partitions" in message and f"{changed.shuffle_partitions} were asked for" in message
    assert not any(q.name == "partitions-changed" for q in spark.streams.active)

    again = start_query(spark, first, rate_job("partitions-same"), checkpoint)
    again.stop()
    assert again.exception() is None
    # Unset, the count is the checkpoint's own, whatever the session says.
    spark.conf.set("spark.sql.shuffle.partitions", str(first.shuffle_partitions * 3))
    unset = start_query(spark, first.model_copy(update={"shuffle_partitions": None}), rate_job("partitions-unset"), checkpoint)
    unset.stop()
    assert unset.exception() is None
    assert spark.conf.get("spark.sql.shuffle.partitions") == stored

    # The CLI says the same in one line and exits 2 before touching Kafka.
    cli = subprocess.run(
        [sys.executable, "-m", "streamstate_jobs.sessions.job", "--master", "local[1]", "--checkpoint", checkpoint,
         "--shuffle-partitions", str(changed.shuffle_partitions), "--metrics-port", "0", "--bootstrap-servers", settings.bootstrap_servers],
        capture_output=True, text=True, timeout=300,
    )
    assert cli.returncode == 2, cli.stderr[-2000:]
    errors = [line for line in cli.stderr.splitlines() if " ERROR " in line and "holds state in" in line]
    assert len(errors) == 1 and f"{changed.shuffle_partitions} were asked for" in errors[0], cli.stderr[-2000:]


def test_a_new_checkpoint_gets_the_launch_count_or_one_state_partition_per_core(spark, settings, new_topic, tmp_path):
    unset = settings.model_copy(update={"topic_session_state": new_topic(1, "rows"), "trigger_interval": "1 second",
                                        "shuffle_partitions": None})
    checkpoint = str(tmp_path / "checkpoint")
    spark.conf.set("spark.sql.shuffle.partitions", "7")  # a session's runtime value is not what the job was launched with
    run_one_batch(spark, unset, rate_job("partitions-per-core"), checkpoint)
    launched = spark.sparkContext.getConf().get("spark.sql.shuffle.partitions")
    expected = int(launched) if launched else spark.sparkContext.defaultParallelism
    assert expected != 7
    assert checkpointed_conf(spark, checkpoint)["spark.sql.shuffle.partitions"] == str(expected)
