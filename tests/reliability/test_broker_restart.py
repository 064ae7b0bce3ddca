"""The Kafka broker killed mid-stream and started again with its data.

Both jobs run as processes on a dedicated Apache Kafka broker (the session's broker is
left alone), read with Spark's built-in connector. The scenario arrives in three parts:
the first before the jobs start; the second while they run, and the broker is SIGKILLed
as soon as a batch reading it is planned (the jobs lose their broker mid-batch); the
broker is started again on the same ports and data directory, and the third part follows.
The jobs must recover by themselves (their restarts from the checkpoint) and the outputs
must equal the plain-Python reference exactly.
"""

from __future__ import annotations

import time

import pytest

from streamstate_stack.launcher import free_port
from tests.checkpoints import CheckpointFiles
from tests.integration.api_harness import wait_until
from tests.scenario import Scenario, assert_outputs_match, build_scenario, collect_outputs, produce_scenario

pytestmark = [pytest.mark.spark, pytest.mark.slow]

JOBS = ("sessions", "anomalies")
DOWN_S = 8  # long enough for the jobs' Kafka clients to fail and the runner to restart a query


def parts(scenario: Scenario, count: int) -> list[Scenario]:
    size = -(-len(scenario.records) // count)
    return [Scenario(scenario.seed, scenario.records[i : i + size]) for i in range(0, len(scenario.records), size)]


def test_jobs_recover_when_the_broker_is_killed_mid_stream_and_comes_back(stack, tmp_path):
    # A dedicated broker in this test's directory.
    dedicated = stack.sibling(
        stack.settings.model_copy(
            update={
                "checkpoint_root": str(tmp_path / "checkpoints"),
                "trigger_interval": "1 second",
                "sessions_metrics_port": 0,
                "anomalies_metrics_port": 0,
                "api_port": free_port(),
            }
        ),
        tmp_path,
    )
    try:
        bootstrap = dedicated.start_broker()
        settings = dedicated.settings
        scenario = build_scenario(seed=23, events=800, metrics=500)
        first, second, third = parts(scenario, 3)
        produced = produce_scenario(bootstrap, first, settings)
        jobs = {job: dedicated.start_job(job) for job in JOBS}
        checkpoints = {job: CheckpointFiles.of(dedicated, settings.checkpoint(job)) for job in JOBS}
        for job, files in checkpoints.items():
            wait_until(lambda f=files, p=jobs[job]: f.batches("commits") or not p.alive(), 420, f"{job}'s first committed batch")
            assert jobs[job].alive(), f"{job} job exited:\n{jobs[job].tail(40)}"

        planned_before = {job: files.planned_records() for job, files in checkpoints.items()}
        produced += produce_scenario(bootstrap, second, settings)
        # Kill as soon as a batch with the second part is planned and not yet committed, or
        # (on a fast machine) once it is done: either way the broker dies with the jobs running.
        wait_until(
            lambda: any(
                files.planned_records() > planned_before[job] for job, files in checkpoints.items()
            ),
            300,
            "a batch reading the second part",
        )
        in_flight = {job: len(f.batches("offsets")) > len(f.batches("commits")) for job, f in checkpoints.items()}
        dedicated.kill_broker()
        time.sleep(DOWN_S)
        assert dedicated.start_broker() == bootstrap, "the broker must come back on its address"

        produced += produce_scenario(bootstrap, third, settings)
        scenario.produced = produced
        outputs = collect_outputs(bootstrap, settings, scenario=scenario, timeout_s=420)
        for job, proc in jobs.items():
            assert proc.alive(), f"{job} job exited after the broker came back:\n{proc.tail(40)}"
        restarts = {job: proc.log_path.read_text(errors="replace").count(f"query {job} started") - 1 for job, proc in jobs.items()}
        print(f"\nbroker restart: killed with batches in flight {in_flight}; query restarts {restarts}; "
              f"{len(produced)} input records, {len(outputs.alerts)} alerts in {outputs.alert_copies} copies")
        assert_outputs_match(scenario, outputs, settings)
    finally:
        dedicated.stop()
