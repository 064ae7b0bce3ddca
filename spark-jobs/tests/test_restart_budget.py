"""The jobs' restart budget (streamstate_jobs.runner.RestartBudget): failures in a row with
backoff; a committed batch renews it, so a long-running job outlives many outages."""

from __future__ import annotations

from streamstate_jobs.runner import RestartBudget


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
