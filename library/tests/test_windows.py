"""The window operations on the in-memory tester against the plain-Python reference
(library/tests/window_reference.py), for any window and slide (dividing it or not), out-of-order and
late records, empty windows, both output modes, both clocks, and func/inv_func pairs that are
exact (integers) and inexact (floats)."""

from __future__ import annotations

import json
import operator
import re
import textwrap

import pytest
from hypothesis import given, settings as hsettings, strategies as st

import streamstate.state.window_tester as window_tester_module
from streamstate.state.window_tester import WindowTester
from streamstate.state.windows import Slides, WindowError, WindowOp
from library.tests.window_reference import Record, ReferenceWindows

KEYS = ["a", "b", "c"]


def slides_and_delay():
    """(window, slide, watermark delay) in ms: the slide at most the window, dividing it or not."""
    return st.integers(1, 12).flatmap(lambda w: st.tuples(st.just(w), st.integers(1, w), st.integers(0, 8)))


def keyed_batches(values=None):
    values = st.integers(-20, 20) if values is None else values
    record = st.tuples(st.sampled_from(KEYS), values, st.integers(1, 60))
    return st.lists(st.lists(record, max_size=8), min_size=1, max_size=6)


def run_both(op: WindowOp, reference: ReferenceWindows, batches, delay: int, as_record, processing_times=None):
    """Each batch through the tester and the reference: ``[(tester windows, reference windows)]``,
    each as sorted ``(key text, start, end, value)``; also checks the late records' dead letters."""
    tester = WindowTester(op, watermark_delay_ms=delay)
    pairs = []
    for index, batch in enumerate(batches):
        now = processing_times[index] if processing_times else 0
        rows = tester.run_batch(batch, processing_time_ms=now)
        expected, late = reference.batch([as_record(r) for r in batch], processing_time_ms=now)
        dead = [row for row in rows if row.kind == "dead_letter"]
        assert sorted(row.key for row in dead) == sorted(_text(r.key) for r in late)
        assert all(row.reason.startswith("late record") for row in dead)
        pairs.append(([tuple(w) for w in tester.windows(rows)], [(_text(k), s, e, v) for k, s, e, v in expected]))
    return pairs, tester


def _text(key) -> str:
    return key if isinstance(key, str) else json.dumps(key)


def ordered(windows):
    return sorted(windows, key=lambda w: (w[0], w[1]))


@given(slides_and_delay(), keyed_batches(), st.sampled_from(["append", "update"]),
       st.sampled_from([(operator.add, operator.sub), (operator.add, None), (operator.xor, operator.xor)]))
@hsettings(max_examples=300, deadline=None)
def test_reduce_by_key_and_window_matches_the_reference_exactly_on_integers(sizes, batches, mode, functions):
    window, slide, delay = sizes
    func, inv = functions
    op = WindowOp.reduce_by_key_and_window(func, inv, window, slide, output_mode=mode)
    reference = ReferenceWindows(window, slide, func, mode, delay)
    pairs, tester = run_both(op, reference, batches, delay, lambda r: Record(*r))
    for got, expected in pairs:
        assert ordered(got) == ordered(expected)
    assert_state_bounded(op, tester)


def assert_state_bounded(op: WindowOp, tester: WindowTester) -> None:
    """Every pane a key keeps still belongs to an open window; a key with none has no state."""
    slides = op.step.slides
    for key, stored in tester.state.store.items():
        panes = tester.state.codec.decode(key, stored)["panes"]
        assert panes, f"key {key!r} kept an empty state"
        assert all(slides.end_ms(slides.last_window_of(pane)) > tester.watermark_ms for pane in panes)
        assert max(panes) - min(panes) < slides.panes_per_window + 60 // slides.pane_ms  # bounded by the data's spread


@given(slides_and_delay(), keyed_batches(st.floats(-1e6, 1e6, allow_nan=False)), st.sampled_from([True, False]))
@hsettings(max_examples=200, deadline=None)
def test_floats_with_an_inverse_drift_only_by_rounding(sizes, batches, inverse):
    window, slide, delay = sizes
    op = WindowOp.reduce_by_key_and_window(operator.add, operator.sub if inverse else None, window, slide)
    reference = ReferenceWindows(window, slide, operator.add, "append", delay)
    pairs, _ = run_both(op, reference, batches, delay, lambda r: Record(*r))
    # Each slide adds and subtracts: the error grows with the magnitudes that went through the running value.
    total = sum(abs(r[1]) for batch in batches for r in batch)
    for got, expected in pairs:
        assert [w[:3] for w in ordered(got)] == [w[:3] for w in ordered(expected)]
        for mine, theirs in zip(ordered(got), ordered(expected)):
            assert mine[3] == pytest.approx(theirs[3], abs=1e-12 * total + 1e-9)


def test_float_drift_as_the_docs_show_it():
    op = WindowOp.reduce_by_key_and_window(operator.add, operator.sub, 2, 1)
    tester = WindowTester(op)
    tester.run_batch([("k", 1e16, 1), ("k", 1.0, 2), ("k", 1.0, 3)])
    tester.run_batch([("k", 0.0, 5)])
    # [1, 3) is 1e16 + 1.0, which is 1e16 in floats: the 1.0 is lost, and stays lost once 1e16 is
    # subtracted again, until the window empties. Exactly, [2, 4) is 2.0 and [3, 5) is 1.0.
    assert [w.value for w in tester.windows(tester.rows)] == [1e16, 1e16, 1.0, 0.0]
    exact = WindowTester(WindowOp.reduce_by_key_and_window(operator.add, None, 2, 1))
    exact.run_batch([("k", 1e16, 1), ("k", 1.0, 2), ("k", 1.0, 3)])
    exact.run_batch([("k", 0.0, 5)])
    assert [w.value for w in exact.windows(exact.rows)] == [1e16, 1e16, 2.0, 1.0]


@given(slides_and_delay(), st.lists(st.lists(st.tuples(st.sampled_from([1, 2, 3, "x"]), st.integers(1, 60)), max_size=8), min_size=1, max_size=6),
       st.sampled_from(["append", "update"]))
@hsettings(max_examples=200, deadline=None)
def test_global_and_by_value_operations_match_the_reference(sizes, batches, mode):
    window, slide, delay = sizes
    concat = lambda a, b: f"{a}{b}"  # noqa: E731
    as_text = [[(str(value), time) for value, time in batch] for batch in batches]
    cases = [
        (WindowOp.count_by_window(window, slide, output_mode=mode), batches, lambda r: Record("", 1, r[1])),
        (WindowOp.count_by_value_and_window(window, slide, output_mode=mode), batches, lambda r: Record(r[0], 1, r[1])),
        (WindowOp.reduce_by_window(concat, None, window, slide, output_mode=mode), as_text, lambda r: Record("", r[0], r[1])),
    ]
    for op, op_batches, as_record in cases:
        reference = ReferenceWindows(window, slide, operator.add if op.counts else concat, mode, delay)
        pairs, _ = run_both(op, reference, op_batches, delay, as_record)
        for got, expected in pairs:
            if not op.counts:  # concatenation: the order inside a window is not defined
                got, expected = [(*w[:3], sorted(w[3])) for w in got], [(*w[:3], sorted(w[3])) for w in expected]
            assert ordered(got) == ordered(expected)


@given(slides_and_delay(), st.lists(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 60)), max_size=8), min_size=1, max_size=6),
       st.sampled_from(["append", "update"]))
@hsettings(max_examples=200, deadline=None)
def test_window_emits_every_record_of_each_window(sizes, batches, mode):
    window, slide, delay = sizes
    op = WindowOp.window(window, slide, output_mode=mode)
    # The reference collects each window's records; update mode emits only the batch's new ones.
    reference = ReferenceWindows(window, slide, operator.add, "append", delay)
    tester = WindowTester(op, watermark_delay_ms=delay)
    accepted: list[tuple] = []
    for batch in batches:
        rows = tester.run_batch([({"n": n}, time) for n, time in batch])
        got = sorted((w.start, w.end, w.value["n"]) for w in tester.windows(rows))
        if mode == "append":
            expected_windows, late = reference.batch([Record("", [n], time) for n, time in batch])
            expected = sorted((start, end, n) for _, start, end, values in expected_windows for n in values)
        else:
            watermark = reference.watermark_ms
            _, late = reference.batch([Record("", [n], time) for n, time in batch])
            on_time = [(n, time) for n, time in batch if time > watermark]
            accepted += on_time
            expected = sorted((start, start + window, n) for n, time in on_time for start in _starts(time, window, slide))
        assert got == expected
        assert sum(row.kind == "dead_letter" for row in rows) == len(late)


def _starts(time, window, slide):
    return [k * slide for k in range((time - window) // slide + 1, time // slide + 1)]


@given(slides_and_delay(), keyed_batches(), st.sampled_from(["append", "update"]))
@hsettings(max_examples=150, deadline=None)
def test_processing_time_windows_match_the_reference(sizes, batches, mode):
    window, slide, _ = sizes
    op = WindowOp.reduce_by_key_and_window(operator.add, operator.sub, window, slide, output_mode=mode).on_processing_time()
    reference = ReferenceWindows(window, slide, operator.add, mode, event_time=False)
    times = [3 * index + 1 for index in range(len(batches))]
    pairs, _ = run_both(op, reference, [[(k, v) for k, v, _ in batch] for batch in batches], 0, lambda r: Record(*r), times)
    for got, expected in pairs:
        assert ordered(got) == ordered(expected)


@given(slides_and_delay(), keyed_batches(st.integers(0, 3)))
@hsettings(max_examples=150, deadline=None)
def test_a_filter_drops_windows_as_filter_func_does(sizes, batches):
    window, slide, delay = sizes
    keep = lambda key, value: value % 2 == 1  # noqa: E731
    op = WindowOp.reduce_by_key_and_window(operator.add, operator.sub, window, slide, keep)
    reference = ReferenceWindows(window, slide, operator.add, "append", delay, filter_func=keep)
    pairs, _ = run_both(op, reference, batches, delay, lambda r: Record(*r))
    for got, expected in pairs:
        assert ordered(got) == ordered(expected)


def test_a_slide_costs_the_panes_of_one_slide_not_the_records_of_a_window():
    calls = {"func": 0, "inv": 0}

    def add(a, b):
        calls["func"] += 1
        return a + b

    def sub(a, b):
        calls["inv"] += 1
        return a - b

    op = WindowOp.reduce_by_key_and_window(add, sub, 100, 10)
    tester = WindowTester(op, watermark_delay_ms=700)
    tester.run_batch([("k", 1, time) for time in range(1, 300)])  # 299 records over 30 slides, none closes
    calls.update(func=0, inv=0)
    rows = tester.run_batch([("k", 0, 1_100)])  # the watermark passes 400: 39 windows close
    assert len(tester.windows(rows)) == 39
    assert calls["inv"] <= 39 and calls["func"] <= 2 * 39
    assert [w.value for w in tester.windows(rows)][:12] == [9, 19, 29, 39, 49, 59, 69, 79, 89, 99, 100, 100]


def test_a_raising_func_dead_letters_its_record_and_a_raising_inverse_its_close():
    def fussy_add(a, b):
        if b == 13:
            raise ValueError("unlucky")
        return a + b

    broken = {"now": True}

    def sub(a, b):
        if broken["now"]:
            raise RuntimeError("cannot subtract")
        return a - b

    tester = WindowTester(WindowOp.reduce_by_key_and_window(fussy_add, sub, 10, 5), watermark_delay_ms=10)
    rows = tester.run_batch([("k", 1, 1), ("k", 13, 2), ("k", 2, 7)])
    assert [(row.kind, row.reason) for row in rows if row.kind == "dead_letter"] == [("dead_letter", "ValueError: unlucky")]
    rows = tester.run_batch([("k", 4, 30)])  # closes up to 20: moving on from [0, 10) needs sub, which raises
    assert [row.reason for row in rows if row.kind == "dead_letter"] == ["RuntimeError: cannot subtract"]
    assert tester.windows(rows) == [] and tester.state.state_of("k")["panes"]  # kept as it was
    broken["now"] = False
    rows = tester.run_batch([("k", 1, 31)])  # the watermark moves on: the close is tried again
    assert tester.windows(rows) == [("k", -5, 5, 1), ("k", 0, 10, 3), ("k", 5, 15, 2)]


def test_typed_state_is_validated_and_a_value_of_another_type_is_dead_lettered():
    op = WindowOp.reduce_by_key_and_window(operator.add, operator.sub, 10, 5, state_type=int)
    tester = WindowTester(op)
    rows = tester.run_batch([("k", 1, 1), ("k", "many", 2)])
    assert [row.kind for row in rows if row.key == "k" and row.kind == "dead_letter"] == ["dead_letter"]
    assert tester.state.state_of("k") == {"panes": {0: 1}, "window": -1, "value": 1, "next": None}


def test_empty_windows_emit_nothing_and_an_emptied_key_is_dropped():
    op = WindowOp.count_by_value_and_window(10, 5)
    tester = WindowTester(op)
    tester.run_batch([("x", 1), ("x", 100)])
    rows = tester.run_batch([("y", 200)])
    assert [w[:3] for w in tester.windows(rows)] == [("x", 95, 105), ("x", 100, 110)]
    assert tester.state.state_of("x") is None and tester.state.state_of("y") is not None
    assert [row.payload for row in rows if row.kind == "snapshot" and row.key == "x"] == [None]


def test_window_arguments_are_checked():
    with pytest.raises(WindowError, match="longer than the window"):
        Slides.of("1 minute", "2 minutes")
    with pytest.raises(WindowError, match="complete mode"):
        WindowOp.count_by_window("1 minute", output_mode="complete")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="inv_func must be callable"):
        WindowOp.reduce_by_window(operator.add, 3, "1 minute")  # type: ignore[arg-type]
    assert Slides.of("10 minutes", "4 minutes").pane_ms == 120_000 and Slides.of("10 seconds").slide_ms == 10_000


def test_the_window_tester_module_example_runs():
    code = re.search(r"Example::\n\n(.*?)\n\n", window_tester_module.__doc__, re.S).group(1)
    exec(compile(textwrap.dedent(code), window_tester_module.__file__, "exec"), {})


@pytest.mark.parametrize("window, slide, named", [
    (0, None, "window length"), ("0 seconds", None, "window length"), ("10 seconds", 0, "slide interval"),
    (-5, None, "window length"),
])
def test_a_zero_or_negative_length_is_named_as_what_it_is(window, slide, named):
    with pytest.raises(WindowError, match=f"{named} must be positive"):
        WindowOp.window(window, slide)


def test_a_dstream_style_one_argument_filter_is_refused_when_the_operation_is_defined():
    """DStream's filterFunc takes one (key, value) tuple; ours takes key and value. A one-argument
    filter would raise at every close (each dead-lettered, the key's panes never cleared): refused
    at once, with the fix."""
    with pytest.raises(WindowError, match=r"filter_func\(key, value\)"):
        WindowOp.reduce_by_key_and_window(operator.add, operator.sub, "10 seconds", "5 seconds", filter_func=lambda pair: pair[1] > 0)
    WindowOp.reduce_by_key_and_window(operator.add, operator.sub, "10 seconds", "5 seconds", filter_func=lambda key, value: value > 0)
    WindowOp.reduce_by_key_and_window(operator.add, operator.sub, "10 seconds", "5 seconds", filter_func=lambda *args: True)
