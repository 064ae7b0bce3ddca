"""The jobs' query plans: each reads its input topic once per batch, in one task per core.

A dead-letter branch unioned with the stateful branch used to make Spark scan and validate the
topic twice (docs/profile.md); invalid records now pass the one stateful operator instead.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from streamstate_pipeline.contracts import Alert, DeadLetter
from streamstate_jobs.context import JobContext
from streamstate_jobs.registry import JOBS
from streamstate_jobs.runner import start_query
from tests.doc_job import load_doc_job
from tests.integration.kafka_testing import produce
from tests.scenario import pipeline_topics, read_topic
from tests.state_queries import produce_json

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("job", JOBS.values(), ids=list(JOBS))
def test_job_reads_its_topic_once(spark, settings, job):
    plan = job.build(JobContext(spark, settings, job))._jdf.queryExecution().logical().toString()
    assert len(re.findall(r"\bStreamingRelationV2\b", plan)) == 1
    assert "Deduplicate" not in plan, "duplicates are dropped in the session state, not by a second state store"


@pytest.mark.parametrize("job", JOBS.values(), ids=list(JOBS))
def test_jobs_read_a_batch_in_one_task_per_core(spark, settings, job, new_topic, bootstrap, tmp_path):
    """A topic of four partitions on Spark's two cores: no stage of the batch runs more tasks
    than cores (a task per partition made a batch 150 ms slower, docs/profile.md), and every
    partition's records are still read."""
    cores = spark.sparkContext.defaultParallelism
    assert cores < 4
    tasks = _batch_stage_tasks(spark, settings, job, new_topic, bootstrap, tmp_path)
    assert tasks[0] == cores and max(tasks) <= cores, tasks


@pytest.mark.parametrize(("setting", "read_tasks"), [({"source_tasks": 1}, 1), ({"shuffle_partitions": 3}, 3)],
                         ids=["set", "one per state partition"])
def test_the_read_tasks_follow_the_setting_or_the_state_partitions(spark, settings, setting, read_tasks, new_topic, bootstrap, tmp_path):
    """Set, the read tasks are what is set; unset, as many as the state partitions where a query
    has more of those than cores (on a cluster they count the executors' cores)."""
    shared = spark.conf.get("spark.sql.shuffle.partitions")  # the runner sets the query's count on the shared session
    try:
        tasks = _batch_stage_tasks(spark, settings.model_copy(update=setting), JOBS["sessions"], new_topic, bootstrap, tmp_path)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", shared)
    assert tasks[0] == read_tasks, tasks


def _batch_stage_tasks(spark, settings, job, new_topic, bootstrap, tmp_path) -> list[int]:
    """Run ``job`` over one invalid record in each partition of a four-partition topic, check
    each partition's record came out as a dead letter, and return the tasks of each stage of
    the batch, the source stage first."""
    run = settings.model_copy(update=pipeline_topics(new_topic))
    (topic,) = job.input_topics(run)
    produce(bootstrap, topic, [(None, b"not json", partition) for partition in range(4)])

    query = start_query(spark, run, job, str(tmp_path / job.name), available_now=True)
    query.awaitTermination(180)
    assert not query.isActive and query.exception() is None, query.exception()
    letters = [DeadLetter.model_validate_json(r.value()) for r in read_topic(bootstrap, run.topic_dead_letters)]
    assert sorted(letter.source_partition for letter in letters) == [0, 1, 2, 3]

    tracker = spark.sparkContext.statusTracker()
    stage_ids = sorted(stage for j in tracker.getJobIdsForGroup(str(query.runId)) for stage in tracker.getJobInfo(j).stageIds)
    return [info.numTasks for info in map(tracker.getStageInfo, stage_ids) if info is not None]


def test_the_third_job_of_the_docs_runs_on_kafka(spark, settings, new_topic, bootstrap, tmp_path):
    """docs/adding-a-job.md's example, as written there: one file and one declaration make a job
    that reads its declared input, raises its alert and dead-letters what its contract refuses."""
    job = load_doc_job().JOB
    run = settings.model_copy(update={
        "topic_user_events": new_topic(2, "clicks-in"), "topic_alerts": new_topic(1, "clicks-alerts"),
        "topic_dead_letters": new_topic(1, "clicks-dl"),
    })
    ts = 1_700_000_000_000
    clicks = [{"event_id": f"e{i}", "user_id": "u1", "type": "click", "ts": ts + i} for i in range(3)]
    other = [{"event_id": "e9", "user_id": "u2", "type": "click", "ts": ts}, {"user_id": "u3", "type": "click"}]
    produce_json(bootstrap, run.topic_user_events, clicks + other, key_field="user_id")

    query = start_query(spark, run, job, str(tmp_path / "clicks"), available_now=True)
    query.awaitTermination(180)
    assert not query.isActive and query.exception() is None, query.exception()

    alerts = [Alert.model_validate_json(r.value()) for r in read_topic(bootstrap, run.topic_alerts)]
    assert [(a.kind, a.entity, a.ts) for a in alerts] == [("click_storm", "u1", ts + 2)]
    letters = [DeadLetter.model_validate_json(r.value()) for r in read_topic(bootstrap, run.topic_dead_letters)]
    assert [(d.stage, d.source_topic) for d in letters] == [("contract", run.topic_user_events)]


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
