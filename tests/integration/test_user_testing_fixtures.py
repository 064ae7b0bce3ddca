"""A user's own test, on streamstate.testing's fixtures, run the way a user runs it.

A project of its own in a temporary directory (a conftest.py naming the plugin, one test
file, nothing of this suite's fixtures), run by a pytest of its own: the ``kafka`` fixture
starts Apache Kafka in a container (the image `make images` builds here, the official one
where a registry is reachable), ``spark`` a local session for the state API, and the test
runs the word-count example (examples/word_count.py) from one topic to another and reads the
result with ``read_committed``. Both files are taken from the README ("Testing your own jobs
against Kafka"), so the example users copy is the one that runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from streamstate_pipeline.settings import REPO_ROOT
from streamstate_pipeline import binaries
from streamstate.testing.spark import JARS_VARIABLE

pytestmark = [
    pytest.mark.docker,
    pytest.mark.timeout(600),
    pytest.mark.skipif(os.environ.get("DOCKER_TESTS", "").lower() == "off", reason="DOCKER_TESTS=off: the Docker tests were opted out of"),
]

README = (REPO_ROOT / "README.md").read_text()
SECTION = "### Testing your own jobs against Kafka"


def readme_blocks() -> tuple[str, str]:
    """The README's conftest line and user's test, as a user copies them."""
    text = README[README.index(SECTION):]
    text = text[: text.index("\n### ", len(SECTION))]
    conftest, user_test = re.findall(r"```python\n(.*?)```", text, re.S)[:2]
    return conftest, user_test


def test_a_users_test_on_the_fixtures_passes_against_kafka_in_a_container(tmp_path):
    project = tmp_path / "users-project"
    project.mkdir()
    conftest, user_test = readme_blocks()
    (project / "conftest.py").write_text(conftest)
    (project / "test_word_count.py").write_text(user_test)
    env = {
        **os.environ,
        # The user's jobs (here the project's examples) on the path, as a user's own package would be.
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        # No Maven repository for Spark's resolver here: the connector's jars `make deps` installed.
        JARS_VARIABLE: binaries.spark_jars_setting(),
    }
    env.pop("PYTEST_XDIST_WORKER", None)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--basetemp", str(tmp_path / "tmp"), str(project)],
        cwd=project, env=env, capture_output=True, text=True, timeout=540,
    )
    assert result.returncode == 0, f"the user's test failed:\n{result.stdout[-6000:]}\n{result.stderr[-3000:]}"
    assert "1 passed" in result.stdout, result.stdout[-2000:]
