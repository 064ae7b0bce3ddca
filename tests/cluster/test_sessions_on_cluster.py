"""The sessions job on a real Spark standalone cluster (master + two 1-core workers), the
built-in connector's reads of Apache Kafka on the executors, checkpoints on the local disk
(executors' state stores writing to s3a:// in MinIO are proven by the compose test,
tests/compose/test_compose_stack.py, whose Spark workers do that).

The job runs as its own process through its CLI with ``--master spark://...`` and the
project's wheel shipped to the executors; its outputs must equal the plain-Python reference
exactly, also when a worker is SIGKILLed mid-stream (tasks rescheduled, state reloaded from
the checkpoint, no duplicate alert through the API). Where tasks ran is read from Spark's
event log, which the job writes into the test's directory.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from streamstate_pipeline.settings import Settings
from streamstate_stack.launcher import EmbeddedStack
from tests.checkpoints import CheckpointFiles
from tests.integration.api_harness import ApiProcess, ApiTopics, wait_until
from tests.scenario import Scenario, differences, build_scenario, collect_outputs, produce_scenario

pytestmark = [pytest.mark.spark, pytest.mark.slow]

EVENTS, METRICS = 800, 400
# The RDDs that read Kafka: the built-in connector's V2 stream scans through DataSourceRDD (its V1 source: KafkaSourceRDD).
SOURCE_RDDS = ("DataSourceRDD", "KafkaSourceRDD")


def sessions_scenario(seed: int) -> Scenario:
    """The end-to-end scenario's user events only: the sessions job is the one under test."""
    full = build_scenario(seed, events=EVENTS, metrics=METRICS)
    return Scenario(seed=seed, records=[r for r in full.records if r.topic == "user-events"])


def assert_sessions_match(scenario: Scenario, outputs, settings: Settings) -> None:
    expected = scenario.expected(settings)
    # The scenario must exercise the sessions job's paths, or matching it proves little.
    assert {s.ended_by for s in expected.sessions.values()} == {"logout", "timeout"}
    assert expected.alerts and expected.dead_letters and expected.session_state
    problems = differences(expected, outputs)
    assert not problems, "outputs differ from the reference:\n" + "\n".join(problems)


@contextmanager
def sessions_job(stack: EmbeddedStack, settings: Settings, workdir: Path, monkeypatch):
    """The sessions job CLI as a process on the cluster, with Spark's event log in ``workdir/events``."""
    events = workdir / "events"
    events.mkdir()
    monkeypatch.setenv(
        "PYSPARK_SUBMIT_ARGS",
        f"--conf spark.eventLog.enabled=true --conf spark.eventLog.dir=file://{events} "
        "--conf spark.eventLog.compress=false --conf spark.eventLog.rolling.enabled=false pyspark-shell",
    )
    launcher = stack.sibling(settings, workdir / "stack")
    job = launcher.start_job("sessions")
    try:
        yield job
    finally:
        launcher.stop()


@dataclass
class EventLog:
    """What Spark's event log says about the application's tasks and executors."""

    app_id: str
    tasks: list[tuple[str, str, str, int]]  # (RDD names of the stage, executor id, end reason, finish time ms)
    executors_removed: dict[str, int]  # executor id -> time ms

    @classmethod
    def read(cls, events_dir: Path) -> "EventLog":
        (log,) = [p for p in events_dir.iterdir() if p.name.startswith("app-")]
        stage_rdds: dict[int, str] = {}
        tasks, removed = [], {}
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if event["Event"] == "SparkListenerStageSubmitted":
                info = event["Stage Info"]
                stage_rdds[info["Stage ID"]] = " ".join(rdd["Name"] for rdd in info["RDD Info"])
            elif event["Event"] == "SparkListenerTaskEnd":
                task = event["Task Info"]
                reason = event["Task End Reason"]["Reason"]
                tasks.append((stage_rdds.get(event["Stage ID"], ""), task["Executor ID"], reason, task["Finish Time"]))
            elif event["Event"] == "SparkListenerExecutorRemoved":
                removed[event["Executor ID"]] = event["Timestamp"]
        return cls(log.name.removesuffix(".inprogress"), tasks, removed)

    def executors(self, only_source: bool = False) -> set[str]:
        return {executor for rdds, executor, _, _ in self.tasks if not only_source or any(r in rdds for r in SOURCE_RDDS)}


def shipped_zips(cluster, app_id: str) -> list[Path]:
    """The project zips the executors of ``app_id`` downloaded into their work directories."""
    return sorted(cluster.workdir.glob(f"worker-*/{app_id}/*/streamstate-*.zip"))


def tasks_started_on(cluster, worker: int) -> int:
    """Tasks the executors on ``worker`` have started so far (their logs line per task, written at once)."""
    return sum(log.read_text(errors="replace").count("Running task") for log in cluster.workdir.glob(f"worker-{worker}/app-*/*/stderr"))


def produce_in_two_parts(bootstrap: str, scenario: Scenario, settings: Settings):
    """Produce the first half now; return the function that produces the rest (``scenario.produced`` becomes all)."""
    half = len(scenario.records) // 2
    first = Scenario(scenario.seed, scenario.records[:half])
    produce_scenario(bootstrap, first, settings)

    def rest() -> None:
        second = Scenario(scenario.seed, scenario.records[half:])
        produce_scenario(bootstrap, second, settings)
        scenario.produced = first.produced + second.produced

    return rest


def api_alerts_covering(api: ApiProcess, expected: set[str]) -> list[str] | None:
    """The alert ids the API lists, once they include every expected one."""
    ids = [alert["alert_id"] for alert in api.get("/alerts", limit=1000).json()["items"]]
    return ids if set(ids) >= expected else None


def test_a_worker_killed_mid_stream_changes_no_output(full_cluster, cluster_settings, stack, tmp_path, monkeypatch):
    """The scenario on the cluster equals the reference, with a worker SIGKILLed mid-stream.

    One run proves both acceptance points (a second, kill-free run cost two minutes of the
    suite and asserted a subset): the outputs equal the reference, the Kafka reads ran on
    the executors with the shipped code, and after the kill the survivor took over.
    """
    # The input arrives in two parts and the worker dies once the second part's batch is planned.
    # (Not maxOffsetsPerTrigger: a rate limit over partitions with uneven event times lets the global
    # watermark overtake a lagging partition, whose records then count as late; see docs/cluster.md.)
    cluster, settings = full_cluster, cluster_settings
    bootstrap = settings.bootstrap_servers
    checkpoint = CheckpointFiles.of(stack, settings.checkpoint("sessions"))

    def committed_batches() -> int:
        return len(checkpoint.batches("commits"))

    scenario = sessions_scenario(seed=15)
    produce_rest = produce_in_two_parts(bootstrap, scenario, settings)
    api_topics = ApiTopics(settings.topic_session_state, settings.topic_metric_state, settings.topic_alerts)
    api = ApiProcess(bootstrap, api_topics, tmp_path / "api.log")
    try:
        with sessions_job(stack, settings, tmp_path, monkeypatch) as job:
            wait_until(lambda: committed_batches() >= 1 or not job.alive(), 420, "the job's first committed batch")
            assert job.alive(), f"the job exited:\n{job.tail(40)}"
            before = tasks_started_on(cluster, 2), committed_batches()
            produce_rest()
            # Kill while worker 2's executor runs a task of the second part's batch (or once that batch is done).
            wait_until(
                lambda: checkpoint.planned_records() == len(scenario.records)
                and (tasks_started_on(cluster, 2) > before[0] or committed_batches() > before[1] + 1),
                180,
                "a task of the second part's batch on worker 2",
            )
            at_kill = committed_batches()
            cluster.kill_worker(2)
            wait_until(lambda: len(cluster.alive_workers()) == 1, 120, "the master to drop the killed worker")
            outputs = collect_outputs(bootstrap, settings, scenario=scenario, timeout_s=420)
            assert job.alive(), f"the job exited:\n{job.tail(40)}"
            batches = committed_batches()
        # The topics first: an API without every alert is only a symptom when the job's output is short.
        assert_sessions_match(scenario, outputs, settings)
        expected_alerts = set(scenario.expected(settings).alerts)
        try:
            shown = wait_until(lambda: api_alerts_covering(api, expected_alerts), 60, "every alert in the API")
        except AssertionError as exc:
            listed = {alert["alert_id"] for alert in api.get("/alerts", limit=1000).json()["items"]}
            raise AssertionError(
                f"{exc}: {len(expected_alerts - listed)} of {len(expected_alerts)} missing, {len(listed - expected_alerts)} "
                f"unexpected; readyz {api.get('/readyz').text}\nAPI log:\n{api.log_tail(60)}"
            ) from None
    finally:
        api.stop()
    assert batches > at_kill, "no batch ran after the kill: it did not land mid-stream"
    assert sorted(shown) == sorted(set(shown)), "the API shows an alert twice"
    assert set(shown) == expected_alerts

    log = EventLog.read(tmp_path / "events")
    # The Kafka reads ran in tasks on the executors (never "driver"), and both executors worked.
    assert log.executors(only_source=True) and "driver" not in log.executors(only_source=True)
    assert log.executors() == {"0", "1"}
    assert len(shipped_zips(cluster, log.app_id)) == 2, "each executor should have fetched the project's zip"
    assert len(log.executors_removed) == 1, f"expected the killed worker's executor to be removed: {log.executors_removed}"
    (lost, removed_at) = next(iter(log.executors_removed.items()))
    survivors = {executor for _, executor, reason, finished in log.tasks if finished > removed_at and reason == "Success"}
    assert survivors and lost not in survivors, "after the kill, tasks must run (and succeed) on the remaining executor"
