"""A stuck old driver cannot commit output once a second copy of the job runs on its checkpoint;
a fence that no other copy follows up restarts the job once.

The anomalies job stalls inside a task, its records acknowledged in an open transaction and
not committed (:mod:`tests.reliability.crash_at`, ``stall-before-commit``): a driver stuck in
a long GC pause or on a frozen host. A second copy starts on the same checkpoint, replays the
stalled batch and goes on with the rest of the input. Then the old one wakes up and tries to
commit: its producer was fenced and its transaction aborted; begun again, it finds the batch
committed by the new copy and writes nothing; Spark then finds the new copy's batch in the
checkpoint, and the old job stops (exit 2) instead of restarting and racing the new one. A
read_committed consumer sees every output once and the outputs equal the reference.

A producer can also be fenced with no other copy running: librdkafka may ask for its producer
id twice when a restarted broker is still completing the id's previous transaction, and then
writes with the older epoch. No batch of another copy is in the checkpoint then, and the job
restarts once instead of stopping.
"""

from __future__ import annotations

import re
import sys
import time

import pytest
from confluent_kafka import Producer

from streamstate_pipeline.kafka_clients import producer_config
from tests.integration.api_harness import wait_until
from tests.reliability.crash_at import STALL
from tests.scenario import Feeder, assert_outputs_match, build_scenario, collect_outputs, read_outputs

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def _stalled_pipeline(stack, tmp_path, chunks: int, name: str):
    """The scenario's first of ``chunks`` fed, the sessions job running, and the anomalies job
    (``name``) with its first task with records stalled in its open transaction."""
    settings = stack.settings
    feeder = Feeder(settings.bootstrap_servers, settings, build_scenario(7, events=800, metrics=500), chunks)
    marker = tmp_path / "anomalies-stalled"
    feeder.feed(0)
    sessions = stack.start_job("sessions")
    job = stack.spawn(name, [sys.executable, "-m", "tests.reliability.crash_at", STALL, "anomalies"],
                      extra_env={"STREAMSTATE_TEST_CRASH_MARKER": str(marker)})
    wait_until(marker.exists, 240, f"the anomalies job to stall in a transaction:\n{job.tail(30)}")
    return feeder, marker, sessions, job


def _release(marker) -> None:
    """The stalled task goes on to commit."""
    marker.with_name(marker.name + ".release").touch()


def test_a_stuck_old_driver_cannot_commit_after_a_new_copy_started(pipeline_stack, tmp_path):
    stack, settings = pipeline_stack, pipeline_stack.settings
    feeder, marker, sessions, old = _stalled_pipeline(stack, tmp_path, 2, "anomalies-job-old")

    new = stack.start_job("anomalies")
    feeder.feed(1)
    outputs = collect_outputs(settings.bootstrap_servers, settings, scenario=feeder.scenario, timeout_s=300)
    assert_outputs_match(feeder.scenario, outputs, settings)

    _release(marker)  # the old driver wakes up and tries to commit
    wait_until(lambda: not old.alive(), 120, f"the fenced old job to stop:\n{old.tail(30)}")
    assert old.popen.returncode == 2, old.tail(30)
    assert "another copy of this job runs on the checkpoint" in old.log_path.read_text(errors="replace")
    time.sleep(2)
    assert new.alive() and sessions.alive(), new.tail(30)

    outputs = read_outputs(settings.bootstrap_servers, settings)
    assert_outputs_match(feeder.scenario, outputs, settings)
    assert outputs.duplicates() == {}, outputs.duplicates()
    uncommitted = read_outputs(settings.bootstrap_servers, settings, isolation="read_uncommitted")
    print(f"\nzombie fencing: {marker.read_text().strip()}; read_uncommitted also sees {uncommitted.records() - outputs.records()} "
          "aborted records")


def test_a_fence_no_other_copy_follows_restarts_the_job_once(pipeline_stack, tmp_path):
    stack, settings = pipeline_stack, pipeline_stack.settings
    feeder, marker, sessions, job = _stalled_pipeline(stack, tmp_path, 1, "anomalies-job-fenced")

    # Takes the task's transactional id, as the job's own second InitProducerId did, and commits nothing.
    transactional_id = re.search(r"transactional id (\S+)", marker.read_text()).group(1)
    Producer({**producer_config(settings.kafka), "transactional.id": transactional_id}).init_transactions(30)
    _release(marker)

    def log() -> str:
        return job.log_path.read_text(errors="replace")

    wait_until(lambda: "restarting once" in log() or not job.alive(), 120, f"the fenced job to restart or stop:\n{job.tail(30)}")
    assert job.alive(), job.tail(40)
    outputs = collect_outputs(settings.bootstrap_servers, settings, scenario=feeder.scenario, timeout_s=300)
    assert_outputs_match(feeder.scenario, outputs, settings)
    assert outputs.duplicates() == {}, outputs.duplicates()
    assert "OUTPUT_FENCED" in log() and "another copy of this job runs" not in log(), job.tail(40)
    assert job.alive() and sessions.alive(), job.tail(30)
