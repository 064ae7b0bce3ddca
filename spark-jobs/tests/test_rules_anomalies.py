"""The rolling-window anomaly rule against a naive two-pass implementation."""

from __future__ import annotations

import decimal
import math
import statistics
from fractions import Fraction

import pytest

from hypothesis import given, settings as hsettings, strategies as st

from streamstate_jobs.anomalies import rules as anomalies

RULE = anomalies.AnomalyRule(window=20, threshold=3.0, min_count=10)

values_strategy = st.lists(
    st.one_of(
        st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False),
        st.sampled_from([0.0, 1.0, 5.0, 5.0, 5.0]),
    ),
    min_size=1,
    max_size=120,
)


def naive(values, rule):
    decisions, window = [], []
    for v in values:
        window = (window + [v])[-rule.window :]
        if len(window) <= rule.min_count:
            decisions.append(False)
            continue
        mean, std = statistics.fmean(window), statistics.pstdev(window)
        decisions.append(v != mean if std == 0 else abs(v - mean) / std > rule.threshold)
    return decisions


@given(values_strategy)
@hsettings(max_examples=300, deadline=None)
def test_window_statistics_are_exact(values):
    state = anomalies.new_state()
    for i, v in enumerate(values):
        anomalies.observe(state, "s", i, v, RULE)
        window = values[max(0, i + 1 - RULE.window) : i + 1]
        mean, std = anomalies.window_stats(state)
        assert math.isclose(mean, statistics.fmean(window), rel_tol=1e-12, abs_tol=1e-9)
        assert math.isclose(std, statistics.pstdev(window), rel_tol=1e-9, abs_tol=1e-6)
        if len(set(window)) == 1:
            assert std == 0.0 and mean == window[0]
    assert state["count"] == len(values)
    assert state["min"] == min(values) and state["max"] == max(values)


@given(values_strategy)
@hsettings(max_examples=300, deadline=None)
def test_anomaly_decisions_match_the_two_pass_rule(values):
    state = anomalies.new_state()
    got = [anomalies.observe(state, "s", i, v, RULE) is not None for i, v in enumerate(values)]
    expected = naive(values, RULE)
    # Only a z within rounding of the threshold may differ between exact and two-pass maths.
    for i, (a, b) in enumerate(zip(got, expected)):
        if a != b:
            window = values[max(0, i + 1 - RULE.window) : i + 1]
            z = abs(values[i] - statistics.fmean(window)) / statistics.pstdev(window)
            assert math.isclose(z, RULE.threshold, rel_tol=1e-9)


def test_learning_period_then_anomaly_alert_carries_the_figures():
    state = anomalies.new_state()
    alerts = [anomalies.observe(state, "cpu", i, 10.0 + (i % 2), RULE) for i in range(15)]
    assert alerts == [None] * 15
    alert = anomalies.observe(state, "cpu", 99, 50.0, RULE)
    assert alert.kind == "anomaly" and alert.entity == "cpu" and alert.ts == 99
    assert set(alert.details) == {"value", "mean", "std", "z", "window_size"}
    assert alert.details["z"] > 3 and alert.details["window_size"] == 16
    assert alert.alert_id == anomalies.Alert.make_id("anomaly", "cpu", 99)


def test_constant_window_never_alerts_and_any_deviation_does():
    """Exact sums: a constant window has std 0 and mean equal to its value, so no false alarm."""
    state = anomalies.new_state()
    for i in range(30):
        assert anomalies.observe(state, "c", i, 7.1, RULE) is None
    assert anomalies.window_stats(state) == (7.1, 0.0)
    alert = anomalies.observe(state, "c", 30, 7.11, RULE)
    assert alert is not None and alert.details["z"] > RULE.threshold
    snap = anomalies.snapshot("c", state, RULE)
    assert snap.last_anomaly.ts == 30 and snap.window_count == 20 and snap.count == 31


# Valid extremes: the largest and smallest doubles, subnormals, signed zeros.
extreme_values = st.lists(
    st.one_of(
        st.sampled_from([1e308, -1e308, 1.7976931348623157e308, 1e200, -1e200, 5e-324, -5e-324, 0.0, -0.0, 1.0]),
        st.floats(allow_nan=False, allow_infinity=False),
    ),
    min_size=1,
    max_size=40,
)


def exact_sqrt(value: Fraction) -> float:
    """sqrt of a non-negative rational, to 60 significant digits, as the nearest double."""
    context = decimal.Context(prec=60, Emax=10**6, Emin=-(10**6))
    return float(context.divide(context.sqrt(decimal.Decimal(value.numerator)), context.sqrt(decimal.Decimal(value.denominator))))


def exact_figures(window: list[float], value: float) -> tuple[Fraction, Fraction, Fraction]:
    """(mean, variance, squared z of value) of the window in exact rational arithmetic."""
    exact = [Fraction(v) for v in window]
    mean = sum(exact) / len(exact)
    variance = sum((v - mean) ** 2 for v in exact) / len(exact)
    z_squared = (Fraction(value) - mean) ** 2 / variance if variance else Fraction(0)
    return mean, variance, z_squared


@given(extreme_values)
@hsettings(max_examples=300, deadline=None)
def test_extreme_values_never_overflow_and_decisions_are_exact(values):
    state = anomalies.new_state()
    applied: list[float] = []
    for i, v in enumerate(values):
        try:
            alert = anomalies.observe(state, "x", i, v, RULE)
        except anomalies.Rejected as rejected:
            # Only a value that would push the all-time running sum out of range is refused,
            # and the refusal leaves the state as it was.
            assert not math.isfinite(state["sum"] + v), rejected
            assert state["count"] == len(applied)
            continue
        applied.append(v)
        window = applied[-RULE.window :]
        mean, std = anomalies.window_stats(state)
        exact_mean, exact_variance, z_squared = exact_figures(window, v)
        assert mean == float(exact_mean)  # correctly rounded
        assert math.isfinite(std) and math.isclose(std, exact_sqrt(exact_variance), rel_tol=1e-15, abs_tol=5e-324)
        expected = len(window) > RULE.min_count and exact_variance > 0 and z_squared > Fraction(RULE.threshold) ** 2
        assert (alert is not None) == expected
        if alert is not None:
            assert all(math.isfinite(x) for x in alert.details.values() if x is not None)
        anomalies.snapshot("x", state, RULE).model_dump_json()  # every snapshot is writable


def test_the_series_from_the_issue_is_exact_and_the_overflowing_sum_is_rejected():
    state = anomalies.new_state()
    for i, v in enumerate([1e200, 0.0] * 6):
        anomalies.observe(state, "big", i, v, RULE)
    assert anomalies.window_stats(state) == (5e199, 5e199)
    state = anomalies.new_state()
    anomalies.observe(state, "huge", 0, 1e308, RULE)
    with pytest.raises(anomalies.Rejected, match="running sum 1e[+]308 out of the range of a double"):
        anomalies.observe(state, "huge", 1, 1e308, RULE)
    assert state["count"] == 1 and state["window"] == [1e308]
    anomalies.observe(state, "huge", 2, -1e308, RULE)
    assert state["sum"] == 0.0
