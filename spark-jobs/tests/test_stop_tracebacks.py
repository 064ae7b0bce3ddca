"""A job's stop that interrupts a batch's Spark action logs no traceback; every other error
raised out of ``foreachBatch`` keeps py4j's (streamstate_jobs.spark_action_errors)."""

from __future__ import annotations

import logging
import sys

from streamstate_jobs.spark_action_errors import InterruptedStopTracebacks, SparkActionFailed


def _py4j_record(error: BaseException) -> logging.LogRecord:
    """The record py4j's ``logger.exception`` makes when a Python callback raised ``error``."""
    try:
        raise error
    except BaseException:  # noqa: BLE001 - any error a callback raises
        exc_info = sys.exc_info()
    return logging.LogRecord("py4j.clientserver", logging.ERROR, __file__, 1,
                             "There was an exception while executing the Python Proxy on the Python Side.", None, exc_info)


def test_an_interrupted_action_leaves_no_traceback_and_other_errors_keep_theirs():
    keeps = InterruptedStopTracebacks().filter
    assert not keeps(_py4j_record(SparkActionFailed("... java.lang.InterruptedException", interrupted=True)))
    assert keeps(_py4j_record(SparkActionFailed("... java.nio.file.NoSuchFileException: /x")))
    assert keeps(_py4j_record(ValueError("a rule's own error")))
    assert keeps(logging.LogRecord("py4j.clientserver", logging.INFO, __file__, 1, "Python Server ready", None, None))
