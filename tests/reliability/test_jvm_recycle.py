"""Both jobs move to new Spark JVMs when their sockets run past the budget, losing and repeating nothing.

Spark 4.2.0 leaks one connection per stateful task (SPARK-58932): the runner counts the
connections its JVM holds after their other end closed them, and past
``STREAMSTATE_JOB_JVM_SOCKET_BUDGET`` stops the queries, ends the JVM and starts a new one
(:mod:`streamstate_jobs.jvm_recycle`). Here the budget is one, so the jobs move again and again
while the scenario arrives; a read_committed consumer must see every output once,
equal to the reference, and no old JVM may outlive its move.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from streamstate_jobs.jvm_recycle import java_descendants
from tests.integration.api_harness import wait_until
from tests.scenario import Feeder, assert_outputs_match, build_scenario, collect_outputs

pytestmark = [pytest.mark.spark, pytest.mark.slow]

BUDGET = 1  # Spark 4.2.0 leaks one or more connections a batch with data
MOVED = "moving to a new JVM"
SNAPSHOTTED = "snapshotted for the next start"  # streamstate_jobs.state_snapshots, before the old JVM ends


def test_jobs_move_to_new_jvms_past_the_socket_budget_and_outputs_stay_exact(pipeline_stack):
    stack = pipeline_stack
    stack.settings = settings = stack.settings.model_copy(update={"job_jvm_socket_budget": BUDGET})
    feeder = Feeder(settings.bootstrap_servers, settings, build_scenario(7, events=800, metrics=500), 2)
    feeder.feed(0)
    jobs = {name: stack.start_job(name) for name in ("sessions", "anomalies")}
    first_jvms = {}
    for name, job in jobs.items():
        wait_until(lambda j=job: java_descendants(j.pid) or not j.alive(), 120, f"{name}'s Spark JVM")
        first_jvms[name] = java_descendants(job.pid)
    for name, job in jobs.items():
        wait_until(lambda j=job: MOVED in j.log_path.read_text(errors="replace") or not j.alive(), 420, f"{name} to move to a new JVM")
        assert job.alive(), f"{name} exited:\n{job.tail(40)}"
        assert SNAPSHOTTED in job.log_path.read_text(errors="replace"), f"{name} moved without snapshotting its state:\n{job.tail(40)}"

    feeder.feed(1)
    outputs = collect_outputs(settings.bootstrap_servers, settings, scenario=feeder.scenario, timeout_s=420)
    assert_outputs_match(feeder.scenario, outputs, settings)
    assert outputs.duplicates() == {}, outputs.duplicates()
    moves = {}
    for name, job in jobs.items():
        assert job.alive(), f"{name} exited:\n{job.tail(40)}"
        moves[name] = job.log_path.read_text(errors="replace").count(MOVED)
        jvms = java_descendants(job.pid)  # none for a moment while the job moves
        assert len(jvms) <= 1, f"{name} runs JVMs {jvms}: the old one did not exit"
        assert not any(Path(f"/proc/{pid}").exists() for pid in first_jvms[name]), f"{name}'s first JVM {first_jvms[name]} still runs"
    print(f"\nJVM recycle at a budget of {BUDGET} abandoned connections: moves {moves}; "
          f"{len(feeder.scenario.produced)} input records, {len(outputs.alerts)} alerts in {outputs.alert_copies} copies")
