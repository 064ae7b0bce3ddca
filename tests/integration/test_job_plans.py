"""The jobs' query plans: each reads its input topic once per batch.

A dead-letter branch unioned with the stateful branch used to make Spark scan and validate the
topic twice (docs/profile.md); invalid records now pass the one stateful operator instead.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from streamstate.jobs.registry import JOBS

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("job", JOBS.values(), ids=list(JOBS))
def test_job_reads_its_topic_once(spark, settings, job):
    plan = job.load_builder()(spark, settings)._jdf.queryExecution().logical().toString()
    assert len(re.findall(r"\bStreamingRelationV2\b", plan)) == 1
    assert "Deduplicate" not in plan, "duplicates are dropped in the session state, not by a second state store"


def test_python_workers_import_the_installed_pyspark(spark):
    """Not from Spark's zips (compiled from source in every worker), no jar on the path (its
    directory re-read by every task): the streamstate-spark-python launcher starts them, the
    daemon and the driver's one-off workers alike."""
    assert Path(spark.sparkContext.pythonExec).name == "streamstate-spark-python"

    def where(_):
        import sys

        import py4j
        import pyspark

        return pyspark.__file__, py4j.__file__, [p for p in sys.path if p.endswith((".zip", ".jar")) and "pyspark" in p]

    for pyspark_file, py4j_file, archives in spark.sparkContext.parallelize(range(4), 4).map(where).collect():
        assert ".zip" not in pyspark_file and ".zip" not in py4j_file
        assert archives == []
