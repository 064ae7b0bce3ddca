"""`streamstate up` starts the broker before it imports the jobs' declarations (PySpark, pandas,
pyarrow: most of a second), so the launcher's modules must not import them at load."""

import subprocess
import sys


def test_the_launcher_loads_without_the_jobs_modules():
    probe = "import sys, streamstate_stack.up, streamstate_stack.launcher; print(sorted({'pyspark', 'streamstate_jobs.registry'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", f"imported at the launcher's load: {done.stdout.strip()}"
