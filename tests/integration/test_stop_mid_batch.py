"""A job's query stopped while its batch is being written stops as Spark's own stop.

Spark reads a stop from the text of the error the foreachBatch function raises; the JVM stack
trace of a Py4JJavaError made that reading overflow the stream thread's stack, so the thread
died of a StackOverflowError instead (streamstate_jobs.spark_action_errors). Here a real query
is stopped mid-write, and the errors the module raises are read by Spark's own function."""

from __future__ import annotations

import time
import traceback

import pytest
from py4j.protocol import Py4JJavaError

from streamstate_jobs.declaration import JobSpec
from streamstate_jobs.runner import start_query
from streamstate_jobs.spark_action_errors import MAX_JVM_TEXT, SparkActionFailed, short_for_spark
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


def _is_read_as_a_stop(spark, crossed_text: str) -> bool:
    """Spark's own test, on the text py4j hands the JVM for an error raised in foreachBatch."""
    jvm = spark.sparkContext._jvm  # noqa: SLF001 - Spark's function, called as the stream thread calls it
    execution = getattr(jvm.org.apache.spark.sql.execution.streaming.runtime, "StreamExecution$").__getattr__("MODULE$")
    return bool(execution.isInterruptionException(jvm.py4j.Py4JException(crossed_text), spark.sparkContext._jsc.sc()))  # noqa: SLF001


def _raised_in_jvm(call) -> Py4JJavaError:
    with pytest.raises(Py4JJavaError) as raised:
        call()
    return raised.value


def _crossed(error: BaseException) -> str:
    """What py4j sends the JVM when ``error`` leaves a Python callback (traceback.format_exc())."""
    try:
        raise error from None
    except SparkActionFailed:
        return traceback.format_exc()


def test_an_interrupted_action_reads_as_a_stop(spark):
    jvm = spark.sparkContext._jvm  # noqa: SLF001
    jvm.java.lang.Thread.currentThread().interrupt()  # the thread py4j calls on: its next wait is interrupted
    interrupted = _raised_in_jvm(lambda: jvm.java.lang.Thread.sleep(10_000))
    short = short_for_spark(interrupted, batch_id=7)
    assert "java.lang.InterruptedException" in str(short) and "\tat " not in str(short)
    assert short.interrupted, "its py4j traceback is left out of the job's log (InterruptedStopTracebacks)"
    assert _is_read_as_a_stop(spark, _crossed(short))


def test_another_jvm_error_keeps_its_class_and_message_and_is_no_stop(spark):
    jvm = spark.sparkContext._jvm  # noqa: SLF001
    missing = _raised_in_jvm(lambda: jvm.java.nio.file.Files.readAllBytes(jvm.java.io.File("/nonexistent/streamstate").toPath()))
    short = short_for_spark(missing, batch_id=7)
    assert "java.nio.file.NoSuchFileException: /nonexistent/streamstate" in str(short)
    assert "\tat " not in str(short) and not short.interrupted
    assert not _is_read_as_a_stop(spark, _crossed(short))


def test_a_long_jvm_message_is_cut_to_what_spark_can_read(spark):
    jvm = spark.sparkContext._jvm  # noqa: SLF001
    long_name = "/nonexistent/" + "x" * 5000
    missing = _raised_in_jvm(lambda: jvm.java.nio.file.Files.readAllBytes(jvm.java.io.File(long_name).toPath()))
    short = short_for_spark(missing, batch_id=7)
    assert len(str(short)) < MAX_JVM_TEXT + 200 and "cut; the whole error is in the log" in str(short)
    assert not _is_read_as_a_stop(spark, _crossed(short))  # read to the end without overflowing
