"""Recognising input lost under a checkpoint, by type and by Spark's error class.

Two things mean the input lost records the checkpoint still points at: Spark's Kafka source
refusing to skip offsets that are gone (error class ``KAFKA_DATA_LOSS.*``), and our
:class:`~streamstate_jobs.kafka.identity.SourceResetError` (a topic recreated, a Kinesis shard
lineage broken). The runner then stops the job, or starts over, instead of restarting into the
same loss.

A failed query's error is read with its JVM exception behind it (:func:`query_failure`), and
Spark's error class along its causes. A SourceResetError raised in a writer task reaches the
driver only as text inside the JVM's error: its message starts with its condition code
``[SOURCE_RESET]``, and that code is what is recognised.
"""

from __future__ import annotations

from typing import Any

from streamstate_pipeline.errors import conditions_in
from streamstate_jobs.kafka.identity import SourceResetError

KAFKA_DATA_LOSS = "KAFKA_DATA_LOSS"


def _jvm_origin(error: object) -> Any:
    """The JVM exception behind a PySpark error: its own, or, for one built in Python around a
    JVM cause (``StreamingQuery.exception()`` passes Spark only the failure's cause), its cause's."""
    hops = 0
    while error is not None and hops < 20:
        origin = getattr(error, "java_exception", None) or getattr(error, "_origin", None)
        if origin is not None:
            return origin
        error, hops = getattr(error, "_cause", None), hops + 1
    return None


def error_conditions(error: object) -> list[str]:
    """The Spark error classes (conditions) of a failed Spark call or query: along its JVM causes,
    or its own when no JVM is behind it."""
    origin: Any = _jvm_origin(error)
    if origin is None:
        # No JVM behind it (a Spark Connect error, one built in Python): a PySpark exception then
        # holds its own condition, which getCondition() returns without asking a JVM. A classic
        # CapturedException keeps its condition only in the JVM, so without one it has none.
        from pyspark.errors import PySparkException
        from pyspark.errors.exceptions.captured import CapturedException

        if isinstance(error, PySparkException) and not isinstance(error, CapturedException):
            condition = error.getCondition()
            return [condition] if condition else []
        return []
    from py4j.java_gateway import is_instance_of
    from pyspark import SparkContext

    gateway, jvm = SparkContext._gateway, SparkContext._jvm  # noqa: SLF001 - how PySpark itself reads conditions
    conditions, hops = [], 0
    while origin is not None and hops < 20:  # a cause chain can loop back on itself
        if is_instance_of(gateway, origin, "org.apache.spark.SparkThrowable"):
            condition = jvm.PythonErrorUtils.getCondition(origin)  # type: ignore[union-attr]  # PySpark types the JVM handle Optional; it is set while Spark runs
            if condition:
                conditions.append(str(condition))
        origin, hops = origin.getCause(), hops + 1
    return conditions


def _data_loss_conditions(error: object) -> list[str]:
    """The error's conditions of class KAFKA_DATA_LOSS (any subclass)."""
    return [c for c in error_conditions(error) if c.split(".")[0] == KAFKA_DATA_LOSS]


def is_source_reset(error: object) -> bool:
    """Whether a failed query lost input under its checkpoint."""
    if isinstance(error, SourceResetError) or _data_loss_conditions(error):
        return True
    # Boundary: a SourceResetError raised in a task reaches the driver only as text inside
    # the query's JVM error; its condition code, which its message starts with, is matched there.
    return SourceResetError.condition in conditions_in(str(error))


def query_failure(query: Any) -> BaseException | None:
    """Why a streaming query failed (None: it did not), with its JVM exception behind it.

    PySpark's ``StreamingQuery.exception()`` rebuilds the error from its text and its causes'
    texts, keeping no JVM exception: a failure in a task (Spark's Kafka source finding records
    gone, read in the writer's tasks) then shows no error class. Converted from the JVM's own
    exception, the error's causes are read along the JVM (:func:`error_conditions`). A query
    without a JVM handle (Spark Connect) gives PySpark's error."""
    failure = query.exception()
    jvm_query = getattr(query, "_jsq", None)
    if failure is None or jvm_query is None:
        return failure
    from pyspark.errors.exceptions.captured import convert_exception

    return convert_exception(jvm_query.exception().get())
