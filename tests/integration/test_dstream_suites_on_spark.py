"""Spark's own DStream state suites (library/tests/dstream_suites.py) as real streaming queries.

One query over JSON file sources runs every case: each step writes one file per source (an
empty file is an empty batch, as the suites' empty and null batches) and runs the query once
from its checkpoint (``trigger(once=True)``: exactly one micro-batch, so a batch holds exactly
each case's batch). A stateful operator costs every batch a fixed time, so the mapWithState
cases without a timeout share one operator, their keys prefixed with the case (the function
dispatches on it); the timing-out case and each updateStateByKey case (whose function sees no
key) have their own. Each case's rows must equal, batch by
batch, the in-memory tester's at the batch times Spark used (read from the offset log), and
meet the suite's own expectations. The timing-out case's expectations hold for its one-second
ManualClock, which a query cannot have: on Spark it is compared with the tester at Spark's
own batch times, over its first batches.
"""

from __future__ import annotations

import pytest

from library.tests.dstream_suites import run_cases_on_a_streaming_query

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]


def test_spark_suite_cases_on_a_streaming_query(spark, tmp_path):
    run_cases_on_a_streaming_query(spark, tmp_path)
