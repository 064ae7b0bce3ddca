"""The launcher Spark starts its Python processes with (streamstate_jobs.spark_python): with Spark's
own PYTHONPATH (its zips and the spark-core jar first), the module runs as ``python -m`` would
and imports the installed, byte-compiled PySpark."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyspark

from streamstate_jobs.spark import LAUNCHER as LAUNCHER_NAME, worker_python

LAUNCHER = Path(sys.executable).with_name(LAUNCHER_NAME)
SPARK_LIB = Path(pyspark.__file__).parent / "python" / "lib"


def _sparks_pythonpath() -> str:
    archives = sorted(SPARK_LIB.glob("*.zip")) + sorted((Path(pyspark.__file__).parent / "jars").glob("spark-core_*.jar"))
    assert archives, f"no Spark archives under {SPARK_LIB}"
    return os.pathsep.join(str(path) for path in archives)


def test_the_module_runs_as_main_from_the_installed_pyspark(tmp_path):
    (tmp_path / "probe.py").write_text(
        "import sys, pyspark, py4j\n"
        "print(__name__, pyspark.__file__, py4j.__file__, sys.argv, sep='|')\n"
    )
    env = {**os.environ, "PYTHONPATH": _sparks_pythonpath()}
    # The module is found in the working directory, as python -m finds it (Spark's workers
    # resolve functions pickled by reference to the driver's modules that way).
    done = subprocess.run([str(LAUNCHER), "-m", "probe", "pyspark.worker"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True)
    name, pyspark_file, py4j_file, argv = done.stdout.strip().split("|")
    assert name == "__main__"
    assert ".zip" not in pyspark_file and ".zip" not in py4j_file, done.stdout
    assert argv == repr([str(tmp_path / "probe.py"), "pyspark.worker"]), "the arguments after the module, as python -m passes them"


def test_anything_but_dash_m_is_refused_with_its_usage():
    done = subprocess.run([str(LAUNCHER), "probe.py"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "usage: streamstate-spark-python -m <module> [arg ...]" in done.stderr


def test_the_launcher_replaces_only_this_interpreter():
    assert worker_python(sys.executable) == str(LAUNCHER)
    assert worker_python("/usr/bin/python3") == "/usr/bin/python3"
