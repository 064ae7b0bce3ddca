"""The anomalies job's columnar function against the rule applied one value at a time.

The job folds a series' values of a batch at once (``anomalies.fold``); ``anomalies.observe``
folds one. Over hostile-but-valid values (subnormals, both zeros, constant runs, values that
take the running sum out of a double and are refused) the two must leave the same state, bit
for bit, and give the same alerts and dead letters in the same order.
"""

from __future__ import annotations

import math
import pickle
import random
from fractions import Fraction

from hypothesis import given, settings as hsettings, strategies as st

from streamstate.state import Emit, State
from streamstate.state.columns import ROW_VALUES, Columns
from streamstate_jobs.anomalies import job as anomalies_job
from streamstate_jobs.anomalies import rules as anomalies
from streamstate_jobs.kinds import Kind
from streamstate_jobs.rules.dead_letters import refused_point
from streamstate_jobs.validation import dead_letter_row

RULE = anomalies.AnomalyRule(window=12, threshold=2.5, min_count=4)

hostile_values = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(min_value=-1e3, max_value=1e3, allow_nan=False),
    st.sampled_from([0.0, -0.0, 5.0, 5.0, 5.0, 5e-324, -5e-324, 1.7e308, -1.7e308, 1e-300]),
)
points_strategy = st.lists(st.tuples(st.integers(min_value=0, max_value=10**13), hostile_values), min_size=1, max_size=60)


def points_of(values: list[tuple[int, float]], shuffle_seed: int) -> list[dict]:
    """Points as validation leaves them, in no particular order (the function sorts them by offset)."""
    points = [
        {"series_id": "s", "ts": ts, "value": value, "topic": "metrics", "partition": i % 3, "offset": i, "kafka_ts": ts}
        for i, (ts, value) in enumerate(values)
    ]
    random.Random(shuffle_seed).shuffle(points)
    return points


def exact_z(window: list[float]) -> float | None:
    """|last - mean| / std of the window, from exact rationals: what ``last_z`` must be."""
    if len(window) <= RULE.min_count:
        return None
    exact = [Fraction(v) for v in window]
    mean = sum(exact) / len(exact)
    variance = sum((v - mean) ** 2 for v in exact) / len(exact)
    return None if variance == 0 else math.sqrt((exact[-1] - mean) ** 2 / variance)


def one_at_a_time(state: dict, points: list[dict]) -> list:
    rows = []
    for point in sorted(points, key=lambda p: (p["partition"], p["offset"])):
        try:
            alert = anomalies.observe(state, "s", point["ts"], point["value"], RULE)
        except anomalies.Rejected as rejected:
            source = (point["topic"], point["partition"], point["offset"], point["kafka_ts"])
            rows.append(dead_letter_row(refused_point(str(rejected), "s", point["ts"], point["value"], source)))
            continue
        if alert is not None:
            rows.append(Emit(Kind.ALERT, alert.alert_id, alert.model_dump_json()))
    return rows


@given(st.lists(points_strategy, min_size=1, max_size=3), st.integers(min_value=0, max_value=2**16))
@hsettings(max_examples=400, deadline=None)
def test_the_job_function_equals_the_rule_one_value_at_a_time(batches, shuffle_seed):
    expected_state = anomalies.new_state()
    state = State("s")
    for values in batches:
        points = points_of(values, shuffle_seed)
        expected_rows = one_at_a_time(expected_state, points)
        rows = list(anomalies_job.on_series(RULE, "s", Columns(ROW_VALUES, points), state))
        assert rows == expected_rows
        if expected_state["count"]:
            assert pickle.dumps(state.get()) == pickle.dumps(expected_state)
            z, expected_z = state.get()["last_z"], exact_z(state.get()["window"])
            assert (z is None and expected_z is None) or math.isclose(z, expected_z, rel_tol=1e-9, abs_tol=1e-12)
            assert anomalies_job.series_snapshot(RULE, "s", state.get()) == anomalies_job.series_snapshot(RULE, "s", expected_state)
        else:
            assert not state.exists()


def test_a_refused_last_value_leaves_the_z_of_the_value_before_it():
    state = anomalies.new_state()
    values = [(i, 10.0 + (i % 3)) for i in range(8)] + [(8, 1.7e308), (9, 1.7e308)]
    points = points_of(values, 0)
    rows = list(anomalies_job.on_series(RULE, "s", Columns(ROW_VALUES, points), holder := State("s")))
    expected_rows = one_at_a_time(state, points)
    assert rows == expected_rows and [r.kind for r in rows].count(Kind.DEAD_LETTER) == 1
    assert holder.get()["last_z"] == state["last_z"] is not None


@given(st.lists(st.one_of(st.sampled_from([0.0, -0.0, 1.0, -1.0]), st.floats(min_value=-1e3, max_value=1e3)), min_size=1, max_size=40))
@hsettings(max_examples=200, deadline=None)
def test_min_and_max_are_the_first_of_equal_values_as_python_gives_them(values):
    state = anomalies.new_state()
    anomalies.fold(state, "s", list(enumerate(values)), RULE)
    # repr tells -0.0 from 0.0, which == does not.
    assert (repr(state["min"]), repr(state["max"]), state["ts"]) == (repr(min(values)), repr(max(values)), len(values) - 1)
