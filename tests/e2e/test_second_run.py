"""`make run`, stop, `make run` again: the second run resumes and loses nothing.

The broker keeps its data in ``var/kafka`` and the checkpoints stay in ``var/checkpoints``,
so a second run resumes: its jobs go on from the first run's offsets and state, and the
outputs of both runs together equal the reference over both runs' records, with nothing
processed twice or skipped. The test does what two runs do (a broker started again on the
same data directory, the same topic names, the same checkpoint root, the start-up message of
:meth:`EmbeddedStack.prepare_checkpoints`), with both jobs in the shared SparkSession to stay
cheap. The other case, a broker whose storage is new under old checkpoints, is below
without Spark: the run starts over and the old checkpoints are moved aside.
"""

from __future__ import annotations

import pytest

from streamstate_pipeline.settings import Settings
from streamstate_stack.launcher import EmbeddedStack
from tests.scenario import Scenario, build_scenario, differences, produce_scenario, run_jobs_in_process

EVENTS, METRICS = 600, 400


def one_run(spark, workdir, part: Scenario, produced_before: list) -> tuple[str, Scenario, list[str]]:
    """A run as `streamstate up` makes it on ``workdir`` (var/): the broker started on its data,
    the checkpoints prepared, ``part`` produced, the jobs run until the outputs of every run so
    far equal the reference over every record so far; returns the start-up message, that
    cumulative scenario and the differences."""
    settings = Settings(checkpoint_root=str(workdir / "checkpoints"), shuffle_partitions=2, trigger_interval="1 second")
    stack = EmbeddedStack(settings=settings, workdir=workdir, quiet=True)
    try:
        bootstrap = stack.start_broker()
        message = stack.prepare_checkpoints()
        produce_scenario(bootstrap, part, stack.settings)
        so_far = Scenario(part.seed, part.records, produced=produced_before + part.produced)
        outputs = run_jobs_in_process(spark, bootstrap, stack.settings, so_far, timeout_s=240)
        return message, so_far, differences(so_far.expected(stack.settings), outputs)
    finally:
        stack.stop()


@pytest.mark.spark
def test_a_second_run_resumes_and_loses_nothing(spark, tmp_path):
    scenario = build_scenario(31, events=EVENTS, metrics=METRICS)
    half = len(scenario.records) // 2
    first, second = Scenario(31, scenario.records[:half]), Scenario(31, scenario.records[half:])
    var = tmp_path / "var"

    first_message, so_far, first_problems = one_run(spark, var, first, [])
    assert "start empty" in first_message, first_message
    assert not first_problems, first_problems

    second_message, both, second_problems = one_run(spark, var, second, so_far.produced)
    assert second_message.startswith("resuming"), second_message
    assert len(both.produced) == EVENTS + METRICS
    expected = both.expected(Settings())
    assert expected.sessions and expected.alerts and expected.metric_state, "the scenario must produce outputs"
    assert not second_problems, "the two runs together differ from the reference:\n" + "\n".join(second_problems)


def test_a_new_broker_storage_under_old_checkpoints_starts_over(tmp_path):
    checkpoints = tmp_path / "var" / "checkpoints"
    (checkpoints / "sessions" / "commits").mkdir(parents=True)
    stack = EmbeddedStack(settings=Settings(checkpoint_root=str(checkpoints)), workdir=tmp_path / "var", quiet=True)

    assert stack.prepare_checkpoints().startswith("resuming")  # a broker that kept its data
    assert (checkpoints / "sessions" / "commits").is_dir()

    stack.broker_storage_new = True  # what start_broker records when it formats the storage
    message = stack.prepare_checkpoints()
    assert message.startswith("starting over") and "moved to" in message, message
    assert not checkpoints.exists()
    assert (tmp_path / "var" / "checkpoints.previous" / "sessions" / "commits").is_dir()
    assert "start empty" in stack.prepare_checkpoints()
