"""``spark-submit --master`` is honoured: the session builder keeps the master Spark was given
(docs/cluster.md's spark-submit recipe would otherwise run on the ``spark_master`` setting)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

PROBE = """
from streamstate_jobs.spark import build_spark
from streamstate_pipeline.settings import Settings

spark = build_spark(Settings(), app_name="master-probe")
print("MASTER=" + spark.sparkContext.master, flush=True)
spark.stop()
"""


def test_spark_submit_keeps_its_master(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if k not in ("STREAMSTATE_SPARK_MASTER", "MASTER", "PYSPARK_SUBMIT_ARGS")}
    env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    spark_submit = Path(sys.executable).parent / "spark-submit"
    result = subprocess.run(
        [str(spark_submit), "--master", "local[1]", "--conf", "spark.ui.enabled=false", str(script)],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # The setting's default is local[2]: spark-submit's local[1] must win.
    assert "MASTER=local[1]" in result.stdout.splitlines(), result.stdout[-2000:]
