"""``spark-submit --master`` is honoured: the session builder keeps the master Spark was given
(docs/cluster.md's spark-submit recipe would otherwise run on the ``spark_master`` setting),
and that recipe (the shipped zip, ``spark-jobs/submit.py <job>``) starts each declared job."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from streamstate_jobs.code_shipping import build_code_zip
from streamstate_jobs.registry import JOBS
from streamstate_pipeline.settings import REPO_ROOT

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


def test_docs_spark_submit_recipe_runs_the_named_job(tmp_path):
    """docs/cluster.md's recipe: the shipped zip as --py-files, spark-jobs/submit.py and a job's name
    (--help: the job's options print, parsed under spark-submit before a session starts)."""
    code = build_code_zip(cache_dir=tmp_path / "dist")
    env = {k: v for k, v in os.environ.items() if k not in ("STREAMSTATE_SPARK_MASTER", "MASTER", "PYSPARK_SUBMIT_ARGS")}
    env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    spark_submit = Path(sys.executable).parent / "spark-submit"
    for name, spec in JOBS.items():
        result = subprocess.run(
            [str(spark_submit), "--master", "local[1]", "--py-files", str(code), str(REPO_ROOT / "spark-jobs" / "submit.py"), name, "--help"],
            capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert spec.description in " ".join(result.stdout.split()), result.stdout[-2000:]
