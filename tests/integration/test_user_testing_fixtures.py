"""A user's own test, on streamstate.testing's fixtures, run the way a user runs it.

A project of its own in a temporary directory (a conftest.py naming the plugin, one test
file, nothing of this suite's fixtures), run by a pytest of its own: the ``kafka`` fixture
starts Apache Kafka in a container (the image `make images` builds here, the official one
where a registry is reachable), ``spark`` a local session for the state API, and the test
runs the word-count example (examples/word_count.py) from one topic to another and reads the
result with ``read_committed``. The same file is the README's example of a user's test.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from streamstate.settings import REPO_ROOT
from streamstate.stack import binaries
from streamstate.testing.spark import JARS_VARIABLE

pytestmark = [
    pytest.mark.docker,
    pytest.mark.timeout(600),
    pytest.mark.skipif(os.environ.get("DOCKER_TESTS", "").lower() == "off", reason="DOCKER_TESTS=off: the Docker tests were opted out of"),
]

CONFTEST = 'pytest_plugins = ["streamstate.testing.fixtures"]\n'
# The README's "Testing your own jobs" shows this file as it is.
USER_TEST = '''\
import json

from pyspark.sql import functions as F

from examples import word_count
from examples.runner import read_json_topic


def test_running_word_count(kafka, spark, tmp_path):
    lines, counts = kafka.new_topic(), kafka.new_topic()
    kafka.produce(lines, [(None, json.dumps({"line": text})) for text in ("a b a", "b c")])

    words = word_count.words(read_json_topic(spark, kafka.bootstrap_servers, lines, word_count.SCHEMA))
    result = word_count.running_counts(words)
    query = (result.outputs.select(F.col("output").alias("value")).writeStream.format("kafka")
             .option("kafka.bootstrap.servers", kafka.bootstrap_servers).option("topic", counts)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    query.awaitTermination()

    totals = {}
    for _, value in kafka.read_committed(counts):
        word, total = json.loads(value)
        totals[word] = max(total, totals.get(word, 0))
    assert totals == {"a": 2, "b": 2, "c": 1}
'''


def test_a_users_test_on_the_fixtures_passes_against_kafka_in_a_container(tmp_path):
    project = tmp_path / "users-project"
    project.mkdir()
    (project / "conftest.py").write_text(CONFTEST)
    (project / "test_word_count.py").write_text(USER_TEST)
    env = {
        **os.environ,
        # The user's jobs (here the project's examples) on the path, as a user's own package would be.
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        # No Maven repository for Spark's resolver here: the connector's jars `make deps` installed.
        JARS_VARIABLE: ",".join(str(jar) for jar in binaries.spark_jars()),
    }
    env.pop("PYTEST_XDIST_WORKER", None)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--basetemp", str(tmp_path / "tmp"), str(project)],
        cwd=project, env=env, capture_output=True, text=True, timeout=540,
    )
    assert result.returncode == 0, f"the user's test failed:\n{result.stdout[-6000:]}\n{result.stderr[-3000:]}"
    assert "1 passed" in result.stdout, result.stdout[-2000:]
