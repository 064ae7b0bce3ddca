"""The jobs' restart budget (streamstate_jobs.runner.RestartBudget): failures in a row with
backoff; a committed batch renews it, so a long-running job outlives many outages. A fenced
output restarts once (a budget of one) unless the checkpoint holds another copy's batch
(QueriesRun.committed_by_another)."""

from __future__ import annotations

from streamstate_jobs.runner import QueriesRun, RestartBudget


def test_backoff_doubles_up_to_a_minute_then_the_budget_is_spent():
    budget = RestartBudget(max_restarts=6)
    assert [budget.next_delay() for _ in range(7)] == [5.0, 10.0, 20.0, 40.0, 60.0, 60.0, None]
    assert budget.used == 6


def test_no_budget_means_the_first_failure_ends_the_job():
    assert RestartBudget(max_restarts=0).next_delay() is None


def test_progress_between_failures_renews_the_budget():
    budget = RestartBudget(max_restarts=2)
    for _ in range(10):  # ten outages, each after the job committed again
        assert budget.next_delay() == 5.0
        budget.renew()
    budget.next_delay()
    budget.next_delay()
    assert budget.next_delay() is None, "two failures in a row without a commit spend a budget of two"


def run_that_completed(*batches: int) -> QueriesRun:
    return QueriesRun(failures=[], new_jvm=False, completed=list(batches))


def test_a_batch_in_the_checkpoint_that_the_run_did_not_complete_is_another_copys():
    assert run_that_completed(-1).committed_by_another(before=[4], now=[5])
    assert run_that_completed(7, 3).committed_by_another(before=[4, 3], now=[7, 4]), "the extra query's checkpoint gained one"


def test_the_runs_own_batches_are_not_another_copys():
    assert not run_that_completed(7).committed_by_another(before=[4], now=[7])
    assert not run_that_completed(-1).committed_by_another(before=[4], now=[4]), "nothing committed by anyone"
    assert not run_that_completed(-1).committed_by_another(before=[-1], now=[-1]), "a new checkpoint"
