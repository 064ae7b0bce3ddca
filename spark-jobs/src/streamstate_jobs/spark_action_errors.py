"""A Spark action's JVM error inside ``foreachBatch``, handed back to Spark in words it can read.

Past the Python function only text crosses back to the JVM: py4j sends the Python traceback.
When the query is being stopped, Spark tells the stop from a failure by matching that text
with a regular expression (``StreamExecution.PROXY_ERROR``, SPARK-39218:
``py4j.protocol.Py4JJavaError: An error occurred while calling((.|\\n)*)(java.lang.InterruptedException|...)``).
Java's regex engine recurses once per character after ``calling``, and a Py4JJavaError's text
carries the JVM's whole stack trace (about 8 KB for an action called in ``foreachBatch``): the
match overflows the stream thread's stack. Every stop that cut a batch short then killed the
thread with a ``StackOverflowError`` before Spark recorded the stop (the query's status stayed
at its last step, and ``STATE_STORE_INVALID_STAMP`` errors followed in the job's log).

So a Py4JJavaError never crosses as it is: :func:`short_for_spark` logs it whole and returns
:class:`SparkActionFailed`, whose message is py4j's first line and the JVM error's class and
message, bounded. An interrupted action then still reads as a stop (the class name is in the
text), a cancelled job group too (Spark's other test: ``SparkException`` and the group's id),
and any other failure keeps its JVM class and message. Errors PySpark already converted
(:class:`~pyspark.errors.exceptions.captured.CapturedException`: a task's Python error, an
analysis error) carry no py4j preamble and pass unchanged.
"""

from __future__ import annotations

import logging

from py4j.protocol import Py4JJavaError

from streamstate_pipeline.errors import JobError

log = logging.getLogger(__name__)

# The JVM exceptions Spark takes for a stop (StreamExecution.IO_EXCEPTION_NAMES).
INTERRUPTIONS = frozenset({"java.lang.InterruptedException", "java.io.InterruptedIOException", "java.nio.channels.ClosedByInterruptException"})
# What of the JVM error's own text crosses: under what the regex copes with (1.4 KB matched, 6.8 KB
# overflowed Spark 4.2's stack), and enough for a cancelled job group's message with its id.
MAX_JVM_TEXT = 1000
_PREAMBLE = "py4j.protocol.Py4JJavaError: "


class SparkActionFailed(JobError, RuntimeError):
    """A Spark action called in ``foreachBatch`` failed in the JVM, or was ``interrupted`` by the
    query's stop; the message holds the JVM error's class and message, the log its stack trace."""

    def __init__(self, message: str, interrupted: bool = False):
        super().__init__(message)
        self.interrupted = interrupted


class InterruptedStopTracebacks(logging.Filter):
    """Drops py4j's traceback of a ``foreachBatch`` call that the query's stop interrupted.

    py4j logs every exception a Python callback raises, with its traceback, at ERROR
    (``py4j.clientserver``). For an interrupted action that is the stop working as meant:
    :func:`short_for_spark` has said at INFO that the batch is run again from the checkpoint,
    and a traceback in a clean stop's log reads as a crash (the suite's broker-outage test saw
    one when the stop came while the first batch was collecting). Every other error keeps its
    traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (isinstance(error, SparkActionFailed) and error.interrupted)


def _jvm_classes(error: Py4JJavaError) -> list[str]:
    """The class names along the JVM error's causes."""
    names, origin, hops = [], error.java_exception, 0
    while origin is not None and hops < 20:  # a cause chain can loop back on itself
        names.append(str(origin.getClass().getName()))
        origin, hops = origin.getCause(), hops + 1
    return names


def short_for_spark(error: Py4JJavaError, batch_id: int) -> SparkActionFailed:
    """The error to raise out of ``foreachBatch`` in place of ``error`` (logged here in full)."""
    interrupted = bool(INTERRUPTIONS.intersection(_jvm_classes(error)))
    if interrupted:
        log.info("batch %d: a Spark action was interrupted: the query is stopping, and the batch is run again from the "
                 "checkpoint at the next start", batch_id)
    else:
        log.error("batch %d: a Spark action failed in the JVM: %s", batch_id, error)
    jvm_text = str(error.java_exception.toString())
    if len(jvm_text) > MAX_JVM_TEXT:
        jvm_text = jvm_text[:MAX_JVM_TEXT] + " ... (cut; the whole error is in the log above)"
    return SparkActionFailed(f"{_PREAMBLE}{error.errmsg.strip()}\n: {jvm_text}", interrupted)
