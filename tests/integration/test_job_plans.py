"""The jobs' query plans: each reads its input topic once per batch.

A dead-letter branch unioned with the stateful branch used to make Spark scan and validate the
topic twice (docs/profile.md); invalid records now pass the one stateful operator instead.
"""

from __future__ import annotations

import re

import pytest

from streamstate.jobs import anomalies_job, sessions_job

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("job", [sessions_job, anomalies_job], ids=["sessions", "anomalies"])
def test_job_reads_its_topic_once(spark, settings, job):
    plan = job.build(spark, settings)._jdf.queryExecution().logical().toString()
    assert len(re.findall(r"\bStreamingRelationV2\b", plan)) == 1
    assert "Deduplicate" not in plan, "duplicates are dropped in the session state, not by a second state store"


def test_python_workers_import_the_installed_pyspark(spark):
    """Not pyspark.zip, which every worker would compile from source again (streamstate.spark_daemon)."""
    files = spark.sparkContext.parallelize(range(4), 4).map(lambda _: __import__("pyspark").__file__).collect()
    assert all(".zip" not in f and f.endswith(".py") for f in files), files
