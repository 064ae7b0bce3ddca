"""`make run`, stop, `make run` again: every record of the second run reaches the outputs.

The embedded broker keeps nothing between runs, while the checkpoints stay in
``var/checkpoints``; resumed from them, the second run's queries would start at the first
run's offsets and skip the new run's first records. So the launcher moves them aside
(:meth:`EmbeddedStack.prepare_checkpoints`, called by ``streamstate up``). The test does
what two runs do (a fresh broker, the same topic names, the same checkpoint root), with
both jobs in the shared SparkSession to stay cheap, and compares the second run's outputs
with the reference over exactly its records.
"""

from __future__ import annotations

import pytest

from streamstate.settings import Settings
from streamstate.stack import EmbeddedStack
from tests.checkpoints import CheckpointFiles
from tests.scenario import Scenario, build_scenario, differences, produce_scenario, run_jobs_in_process

pytestmark = pytest.mark.spark

EVENTS, METRICS = 600, 400


def one_run(spark, tmp_path, run: int, seed: int) -> tuple[EmbeddedStack, str, Scenario, list[str]]:
    """A run as `streamstate up` makes it: a new broker, the checkpoints prepared, the jobs
    on the default topics; returns the stopped stack, its start-up message and the problems."""
    settings = Settings(checkpoint_root=str(tmp_path / "var" / "checkpoints"), shuffle_partitions=2, trigger_interval="1 second")
    stack = EmbeddedStack(settings=settings, workdir=tmp_path / f"run{run}", quiet=True)
    try:
        bootstrap = stack.start_broker()
        message = stack.prepare_checkpoints()
        scenario = build_scenario(seed, events=EVENTS, metrics=METRICS)
        produce_scenario(bootstrap, scenario, stack.settings)
        outputs = run_jobs_in_process(spark, bootstrap, stack.settings, scenario, timeout_s=240)
        expected = scenario.expected(stack.settings)
        assert expected.sessions and expected.alerts and expected.metric_state, "the scenario must produce outputs"
        return stack, message, scenario, differences(expected, outputs)
    finally:
        stack.stop()


def test_a_second_run_processes_every_record_it_produces(spark, tmp_path):
    _, first_message, _, first_problems = one_run(spark, tmp_path, 1, seed=31)
    assert not first_problems, first_problems
    assert "start empty" in first_message

    # What the second run would resume from: offsets into topics of a broker that is gone.
    checkpoint = tmp_path / "var" / "checkpoints"
    left = CheckpointFiles(str(checkpoint / "sessions")).planned_offsets()
    assert left and any(offset > 0 for source in left for parts in source.values() for offset in parts.values())

    _, second_message, second, second_problems = one_run(spark, tmp_path, 2, seed=32)
    assert "previous run's were moved" in second_message, second_message
    assert (checkpoint.parent / "checkpoints.previous" / "sessions" / "commits").is_dir()
    assert not second_problems, "the second run lost records:\n" + "\n".join(second_problems)
    assert len(second.produced) == EVENTS + METRICS
