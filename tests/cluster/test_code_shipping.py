"""The project's code as executors get it: the shipped members' wheels, as one zip on ``sys.path``."""

from __future__ import annotations

import subprocess
import sys
import zipfile

from streamstate_jobs.code_shipping import build_code_zip, code_to_ship, copy_tree, source_files
from streamstate_pipeline.settings import REPO_ROOT, Settings

# What a Python worker does with a shipped file: put it on sys.path ahead of site-packages.
IMPORT_PROBE = (
    "import sys; sys.path.insert(1, sys.argv[1]); "
    "import streamstate_jobs.sessions.job, streamstate_jobs.kafka.connector, streamstate.state, streamstate_pipeline.contracts; "
    "print('\\n'.join(m.__file__ for m in (streamstate_jobs.sessions.job, streamstate_jobs.kafka.connector, "
    "streamstate.state, streamstate_pipeline.contracts)))"
)


def test_the_zip_carries_the_import_layout_and_wins_over_the_installed_project(tmp_path):
    code = build_code_zip(cache_dir=tmp_path)
    names = zipfile.ZipFile(code).namelist()
    assert "streamstate_jobs/sessions/job.py" in names and "streamstate_jobs/kafka/connector.py" in names
    assert "streamstate/state/__init__.py" in names and "streamstate_pipeline/contracts.py" in names
    assert {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")} == {
        "streamstate", "streamstate_pipeline", "streamstate_jobs"
    }, "only the library, the pipeline and the jobs are shipped (not the API, the producers or the stack)"
    probe = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE, str(code)], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert probe.returncode == 0, probe.stderr
    files = probe.stdout.split()
    assert len(files) == 4 and all(f.startswith(f"{code}/") for f in files), files


def test_the_zip_is_rebuilt_only_when_the_sources_change(tmp_path):
    source = tmp_path / "src"
    copy_tree(REPO_ROOT, source_files(REPO_ROOT), source)
    cache = tmp_path / "cache"
    first = build_code_zip(source, cache)
    built_at = first.stat().st_mtime_ns
    assert build_code_zip(source, cache) == first and first.stat().st_mtime_ns == built_at
    changed = source / "pipeline" / "src" / "streamstate_pipeline" / "contracts.py"
    changed.write_text(changed.read_text() + "\n# changed\n")
    second = build_code_zip(source, cache)
    assert second != first and second.is_file()


def test_what_is_shipped_depends_on_the_master_and_the_setting():
    assert code_to_ship(Settings(spark_master="local[2]")) is None
    assert code_to_ship(Settings(spark_master="spark://10.0.0.1:7077", ship_code="none")) is None
    shipped = code_to_ship(Settings(spark_master="spark://10.0.0.1:7077"))
    assert shipped is not None and shipped.suffix == ".zip"
    assert code_to_ship(Settings(spark_master="local[2]", ship_code="wheel")) == shipped
