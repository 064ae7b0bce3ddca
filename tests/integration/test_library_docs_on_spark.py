"""The state library's documented examples that start a SparkSession (library/README.md's main
example among them), each run as a user runs it: a Python process of its own, with the library
and nothing of the application on its path. The blocks and the rules are
tests/unit/test_library_docs.py's."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.unit.test_library_docs import NOT_RUN, REPO_ROOT, all_blocks

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]


@pytest.mark.parametrize("block", [b for b in all_blocks() if b.needs_spark], ids=lambda b: b.name)
def test_a_block_with_spark_runs(block, tmp_path):
    if block.not_run:
        pytest.skip(block.code[block.code.index(NOT_RUN):].splitlines()[0])
    script = tmp_path / "example.py"
    script.write_text(block.code)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_XDIST_WORKER")}
    env.update(PYTHONPATH=str(REPO_ROOT / "library" / "src"), PYSPARK_PYTHON=sys.executable)
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=540)
    assert result.returncode == 0, f"{block.name} failed:\n{result.stdout[-4000:]}\n{result.stderr[-6000:]}"
