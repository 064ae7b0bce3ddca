"""Failure isolation of the state API, pinned on both implementations without Spark: the
engine's per-key run (:class:`KeyRun`, what the Spark processor executes) and the in-memory
reference driver. Whatever fails (the user function, encoding its output or state, the
snapshot, an oversized output), only the record that caused it is dead-lettered and the key's
state reflects every other record."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from streamstate.state import StateSpec
from streamstate.state.keyrun import DEAD_LETTER, OUTPUT, SNAPSHOT, KeyRun, Plan
from streamstate.state.tester import StateTester, by_key
from streamstate.state.state import DEAD_LETTER_VALUE_LIMIT, REASON_LIMIT, StateCodec


def as_json(spec: StateSpec, stored: bytes | None) -> str | None:
    """A stored state as the JSON its snapshot would publish (None: no state)."""
    codec = StateCodec(spec.state_cls)
    return None if stored is None else codec.to_json(codec.decode("k", stored))


def engine_batch(spec: StateSpec, key, values):
    """One key's batch through the engine's per-key run: (rows, committed state as JSON)."""
    rows = [(key, value, None, "t", 0, offset) for offset, value in enumerate(values)]
    run = KeyRun(Plan.of(spec), key, None, None, watermark_ms=-1, processing_time_ms=0)
    run.apply_rows(rows)
    snapshot = run.snapshot_row()
    out = [(kind, payload, reason) for kind, _key, payload, reason, *_ in run.rows]
    if snapshot is not None:
        out.append((SNAPSHOT, snapshot[2], None))
    return out, as_json(spec, run.committed)


def reference_batch(spec: StateSpec, key, values):
    run = StateTester(spec)
    run.run_batch([(key, value) for value in values])
    return by_key(run.rows).get(key, []), as_json(spec, run.store.get(key))


BOTH = pytest.mark.parametrize("run_batch", [engine_batch, reference_batch], ids=["engine", "reference"])


def add_ints(key, values, state):
    total = state.get_option(0)
    for value in values:
        total += int(value)  # "x" raises
    state.update(total)
    return [total]


@BOTH
def test_a_failing_record_of_a_batch_function_is_the_only_dead_letter(run_batch):
    rows, stored = run_batch(StateSpec.batch_function(add_ints), "k", ["1", "x", "2"])
    assert stored == "3"
    assert [r for r in rows if r[0] == DEAD_LETTER] == [
        (DEAD_LETTER, '"x"', "ValueError: invalid literal for int() with base 10: 'x'")
    ]
    assert [r[1] for r in rows if r[0] == OUTPUT] == ["1", "3"]  # one call per record after the failure
    assert rows[-1] == (SNAPSHOT, "3", None)


def finite_total(key, total):
    if not math.isfinite(total):
        raise OverflowError(f"total of {key} is not finite")
    return {"total": total}


def add_floats(key, value, state):
    state.update(state.get_option(0.0) + value)


@BOTH
def test_a_snapshot_that_raises_dead_letters_only_the_record_that_caused_it(run_batch):
    spec = StateSpec.function(add_floats).snapshots(finite_total)
    rows, stored = run_batch(spec, "k", [1e308, 1e308, 5.0])
    # to_json refuses inf, so the second record fails when its state is encoded; the third applies.
    assert json.loads(stored) == 1e308 + 5.0
    dead = [r for r in rows if r[0] == DEAD_LETTER]
    assert [r[1] for r in dead] == ["1e+308"]
    assert rows[-1] == (SNAPSHOT, json.dumps({"total": 1e308 + 5.0}, separators=(",", ":")), None)


def capped_snapshot(key, state):
    if state > 10:
        raise ValueError("snapshot refuses a total over 10")
    return {"total": state}


def add_batch(key, values, state):
    state.update(state.get_option(0) + sum(values))
    return []


@BOTH
def test_snapshot_failure_in_a_batch_replays_records_one_at_a_time(run_batch):
    spec = StateSpec.batch_function(add_batch).snapshots(capped_snapshot)
    rows, stored = run_batch(spec, "k", [4, 9, 5])
    assert stored == "9"  # 4 then 5; 9 would make the snapshot raise
    assert [(r[1], r[2]) for r in rows if r[0] == DEAD_LETTER] == [("9", "ValueError: snapshot refuses a total over 10")]
    assert rows[-1] == (SNAPSHOT, '{"total":9}', None)


def echo_big(key, value, state):
    state.update(len(value))
    return value


@BOTH
def test_an_output_over_the_limit_is_dead_lettered_not_written(run_batch):
    spec = StateSpec.function(echo_big).max_output_bytes(100)
    rows, stored = run_batch(spec, "k", ["small", "x" * 200])
    assert stored == "5"
    dead = [r for r in rows if r[0] == DEAD_LETTER]
    assert len(dead) == 1 and dead[0][2].startswith("OutputTooLarge: output of 202 bytes exceeds max_output_bytes=100")


def raise_with(key, value, state):
    raise ValueError(value)


@BOTH
def test_dead_letter_value_and_reason_are_cut(run_batch):
    huge = "é" * (DEAD_LETTER_VALUE_LIMIT + 10)
    rows, stored = run_batch(StateSpec.function(raise_with), "k", [huge])
    assert stored is None
    [(kind, value, reason)] = [r for r in rows if r[0] == DEAD_LETTER]
    assert value.startswith('"' + "\\u00e9" * 100) and "[truncated:" in value
    assert len(value) < DEAD_LETTER_VALUE_LIMIT + 100
    assert len(reason) < REASON_LIMIT + 100 and reason.startswith("ValueError: éé")


def fail_on_timeout(key, value, state):
    if state.is_timing_out():
        raise RuntimeError("cannot close")
    state.update(state.get_option(0) + 1)


def test_a_timeout_call_that_raises_keeps_the_state_dead_letters_the_key_and_is_retried_a_timeout_later():
    run = StateTester(StateSpec.function(fail_on_timeout).timeout(10).event_time("t"))
    run.run_batch([("a", 1, 100)])
    run.run_batch([("b", 1, 200)])  # watermark 200 passes a's deadline 110
    assert by_key(run.rows)["a"][-1] == (DEAD_LETTER, None, "RuntimeError: cannot close")
    assert run.store["a"] == StateCodec().encode(1) and run.deadlines["a"] == 210, "never forgotten: retried at 200 + 10"
    run.run_batch([("b", 1, 205)])
    assert [r for r in by_key(run.rows)["a"] if r[0] == DEAD_LETTER] == [(DEAD_LETTER, None, "RuntimeError: cannot close")]
    run.run_batch([("b", 1, 215)])  # the watermark passes 210: tried again, and dead-lettered again
    assert len([r for r in by_key(run.rows)["a"] if r[0] == DEAD_LETTER]) == 2 and run.deadlines["a"] == 225

    engine = KeyRun(Plan.of(StateSpec.function(fail_on_timeout).timeout(10).event_time("t")), "a", StateCodec().encode(1), 110, 200, 0)
    engine.apply_timeout()
    assert engine.committed == StateCodec().encode(1) and engine.deadline == 210 and engine.snapshot_row() is None
    assert [r[0] for r in engine.rows] == [DEAD_LETTER]


def add_or_fail(key, values, state):
    total = state.get_option(0)
    for value in values:
        if value < 0:
            raise ValueError(f"negative {value}")
        total += value
    state.update(total)
    return [total]


@given(st.lists(st.integers(-3, 9), max_size=25))
@hsettings(max_examples=200, deadline=None)
def test_engine_and_reference_agree_on_any_mix_of_good_and_failing_records(values):
    spec = StateSpec.batch_function(add_or_fail)
    engine_rows, engine_state = engine_batch(spec, "k", values)
    reference_rows, reference_state = reference_batch(spec, "k", values)
    assert engine_rows == reference_rows and engine_state == reference_state
    good = [v for v in values if v >= 0]
    assert engine_state == (str(sum(good)) if good else None)
    assert sorted(json.loads(r[1]) for r in engine_rows if r[0] == DEAD_LETTER) == sorted(v for v in values if v < 0)


def fail_on_own_timer(key, value, state):
    if state.has_timed_out():
        raise RuntimeError("cannot close")
    state.update(state.get_option(0) + 1)
    state.set_timeout_timestamp(value + 10)


def test_a_call_of_an_own_timer_that_raises_keeps_the_state_and_is_retried_at_the_next_batch_past_it():
    """The function's own timer (set_timeout_timestamp) is re-armed as the idle timeout is: just past
    the failed call's clock, as it has no timeout to wait (dropping it would keep the key for ever)."""
    spec = StateSpec.function(fail_on_own_timer).event_time("t")
    run = StateTester(spec)
    run.run_batch([("a", 100, 100)])  # a's timer at 110
    run.run_batch([("b", 200, 200)])  # the watermark passes 110: the call raises
    assert by_key(run.rows)["a"][-1] == (DEAD_LETTER, None, "RuntimeError: cannot close")
    assert run.store["a"] == StateCodec().encode(1) and run.deadlines["a"] == 201, "re-armed just past 200"
    run.run_batch([("c", 200, 200)])  # the watermark stays at 200: not due
    assert len([r for r in by_key(run.rows)["a"] if r[0] == DEAD_LETTER]) == 1
    run.run_batch([("b", 215, 215)])  # the watermark passes 201: tried again, and dead-lettered again
    assert len([r for r in by_key(run.rows)["a"] if r[0] == DEAD_LETTER]) == 2 and run.deadlines["a"] == 216

    engine = KeyRun(Plan.of(spec), "a", StateCodec().encode(1), 110, 200, 0)
    engine.apply_timeout()
    assert engine.committed == StateCodec().encode(1) and engine.deadline == 201 and engine.snapshot_row() is None
    assert [r[0] for r in engine.rows] == [DEAD_LETTER]
