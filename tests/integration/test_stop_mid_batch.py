"""A job's query stopped while its batch is being written stops as Spark's own stop.

When the jobs wrote from ``foreachBatch``, Spark read a stop from the text of the error the
function raised, and the JVM stack trace of a Py4JJavaError made that reading overflow the
stream thread's stack: the thread died of a StackOverflowError instead. The writer is now the
query's last step; here a real query is stopped mid-write."""

from __future__ import annotations

import time

import pytest

from streamstate_jobs.declaration import JobSpec
from streamstate_jobs.runner import start_query
from tests.state_queries import produce_json

pytestmark = pytest.mark.spark

HELD_S = 30.0  # how long each record's row is held back in its task: the stop comes long before


def held_rows(ctx):
    """A stateless job whose rows are each held back in a Python UDF, so a stop finds the batch mid-write."""
    from pyspark.sql import functions as F

    @F.udf("string")
    def held(value):
        time.sleep(HELD_S)
        return value

    return ctx.read_input().select(
        F.lit("dead_letter").alias("kind"), F.col("offset").cast("string").alias("key"), held(F.col("value").cast("string")).alias("payload"),
    )


def test_a_query_stopped_mid_write_stops_cleanly(spark, settings, new_topic, bootstrap, tmp_path):
    run = settings.model_copy(update={"topic_metrics": new_topic(1, "held-in"), "topic_dead_letters": new_topic(1, "held-out")})
    job = JobSpec(name="held-rows", description="rows held back", build=held_rows, inputs=("topic_metrics",),
                  outputs={"dead_letter": "topic_dead_letters"})
    produce_json(bootstrap, run.topic_metrics, [{"n": i} for i in range(2)])
    query = start_query(spark, run, job, str(tmp_path / "checkpoint"))
    try:
        deadline = time.monotonic() + 120
        while not (query.status["isTriggerActive"] and spark.sparkContext.statusTracker().getActiveJobsIds()):
            assert query.isActive and time.monotonic() < deadline, f"the first batch never started writing: {query.status}"
            time.sleep(0.2)
        time.sleep(3)  # the write's tasks are inside the held UDF
        assert query.status["isTriggerActive"], "the batch ended before the stop: nothing was cut short"
    finally:
        query.stop()
    # A stop Spark recognised ends with this status; a stream thread killed mid-way keeps its last one.
    assert query.status["message"] == "Stopped", query.status
    assert query.exception() is None
