"""Spark's own DStream state suites (library/tests/dstream_suites.py) on the in-memory tester, and the
``State`` contract of Spark's ``MapWithStateSuite`` ("state - get, exists, update, remove")."""

from __future__ import annotations

import pytest

from streamstate.state import StateSpec, StateUsageError
from streamstate.state.state import StateDriver
from streamstate.state.tester import StateTester, by_key
from library.tests.dstream_suites import CASES, assert_meets_suite, run_on_tester


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_spark_suite_case_on_the_tester(case):
    times = case.processing_times_ms or [0] * len(case.batches)
    assert_meets_suite(case, run_on_tester(case, case.batches, times))


def test_state_get_exists_update_remove_as_spark_defines_them():
    def check(state, value, updated=False, removed=False, timing_out=False):
        if value is None:
            assert not state.exists() and state.get_option() is None and state.get_option(-1) == -1
            with pytest.raises(StateUsageError):
                state.get()
        else:
            assert state.exists() and state.get() == value and state.get_option(-1) == value
        assert state.is_timing_out() == timing_out
        if timing_out or removed:
            for write in (state.remove, lambda: state.update(-1)):
                with pytest.raises(StateUsageError):
                    write()
        assert driver.touched == (updated or removed)

    driver = StateDriver("k")
    state = driver.begin_call()
    check(state, None)
    driver = StateDriver("k", 1)
    state = driver.begin_call()
    check(state, 1)
    state.update(2)
    check(state, 2, updated=True)
    state.remove()
    check(state, None, removed=True)
    driver = StateDriver("k", 3, idle_timeout=True)
    state = driver.begin_call(timer=True)
    check(state, 3, timing_out=True)


def test_a_timing_out_call_that_writes_is_dead_lettered_and_the_key_still_goes():
    def keep_forever(key, value, state):
        state.update(state.get_option(0) + 1)  # also while timing out: refused

    tester = StateTester(StateSpec.function(keep_forever).timeout(10))
    tester.run_batch([("a", 1)], processing_time_ms=0)
    rows = tester.tick(processing_time_ms=10)
    assert [row.kind for row in rows] == ["dead_letter", "snapshot"]
    assert "is timing out" in rows[0].reason and rows[1].payload is None
    assert tester.state_of("a") is None and tester.deadline_of("a") is None
    assert tester.tick(processing_time_ms=1_000) == []


def test_an_idle_timeout_removes_the_key_whatever_the_call_returns():
    def report(key, value, state):
        if state.is_timing_out():
            return ("bye", state.get())
        state.update(value)
        return None

    tester = StateTester(StateSpec.function(report).timeout(10))
    tester.run_batch([("a", 7)], processing_time_ms=0)
    rows = tester.tick(processing_time_ms=10)
    assert [(row.kind, row.payload) for row in rows] == [("output", '["bye",7]'), ("snapshot", None)]
    assert tester.state_of("a") is None


def test_a_timer_the_function_set_fires_a_call_that_may_keep_the_key():
    def renew_twice(key, value, state):
        if state.has_timed_out():
            assert not state.is_timing_out()
            renewals = state.get() + 1
            if renewals == 3:
                state.remove()
                return "gone"
            state.update(renewals)
        else:
            state.update(0)
        state.set_timeout_timestamp(state.processing_time_ms + 10)
        return None

    tester = StateTester(StateSpec.function(renew_twice))
    tester.run_batch([("a", 1)], processing_time_ms=0)
    for now in (10, 20):
        tester.tick(processing_time_ms=now)
        assert tester.state_of("a") == now // 10 and tester.deadline_of("a") == now + 10
    assert [row.payload for row in tester.tick(processing_time_ms=30) if row.kind == "output"] == ['"gone"']
    assert tester.state_of("a") is None


def test_idle_timeouts_and_own_timers_do_not_mix():
    def set_timer(key, value, state):
        state.set_timeout_timestamp(5)

    tester = StateTester(StateSpec.function(set_timer).timeout(10))
    rows = tester.run_batch([("a", 1)])
    assert rows[0].kind == "dead_letter" and "specs without timeout()" in rows[0].reason


def test_update_state_by_key_on_every_batch_refuses_a_timeout_or_event_time():
    with pytest.raises(ValueError, match="every_batch=False"):
        StateSpec.updater(lambda values, state: state).timeout("1 minute")
    with pytest.raises(ValueError, match="every_batch=False"):
        StateSpec.updater(lambda values, state: state).event_time("ts")
    StateSpec.updater(lambda values, state: state, every_batch=False).timeout("1 minute").event_time("ts")


def test_every_batch_calls_a_raising_function_again_next_batch_with_the_state_kept():
    def fragile(values, state):
        if not values and state == 1:
            raise RuntimeError("no data")
        return (state or 0) + len(values)

    tester = StateTester(StateSpec.updater(fragile))
    tester.run_batch([("a", 1)])
    for _ in range(2):
        rows = tester.tick(processing_time_ms=0)
        assert [(row.kind, row.reason) for row in rows] == [("dead_letter", "RuntimeError: no data")]
        assert tester.state_of("a") == 1
    assert by_key(tester.run_batch([("a", 1)]))["a"][0] == ("output", "2", None)
