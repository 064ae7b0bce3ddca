"""Per-series rolling window and z-score test: pure Python, no Spark.

The rule (docs/architecture.md, "Anomalies"; seed 000's mapWithState example): per series a window of the
last N values including the new one; mean and population standard deviation over that
window; once it holds more than ``min_count`` values, the value is an anomaly when
|value - mean| / std > threshold (with std = 0: when value != mean).

Mean and variance are kept incrementally, without re-scanning the window, and *exactly*:
every finite double is an integer multiple of a power of two, so the window's sum and sum of
squares are kept as Python integers in units of ``2**scale``, where ``scale`` is the smallest
exponent among the values seen (it only ever moves down, shifting the sums once). Adding and
evicting a value is two integer additions, nothing drifts over millions of updates, and std
is exactly 0 when the window is constant (a floating running sum would leave a residue and
raise false alarms). Typical values keep the integers near 64 bits; a subnormal makes them
about 1,100 bits, still exact.

Every derived figure comes from those integers without a floating intermediate, so valid
extremes cannot overflow: the variance of ``[1e200, 0]`` (2.5e399) is no double, but the
standard deviation is, and it is computed as an integer square root; |value - mean| / std
is computed as one ratio of integers, and the anomaly test compares squares exactly. The
only figure that can leave the range of a double is the all-time running ``sum``: a value
that would push it out is *rejected* (:class:`Rejected`, state untouched) and the job
dead-letters it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from typing import Any

from streamstate_pipeline.contracts import Alert, LastAnomaly, MetricSnapshot
from streamstate_pipeline.errors import JobError
from streamstate_pipeline.settings import Settings, defaults

# Extra bits carried through integer square roots: the result is rounded to a double once.
_ROOT_BITS = 64


class Rejected(JobError, ValueError):
    """A valid value the rule cannot apply; the series' state is left untouched."""


def _split(value: float) -> tuple[int, int]:
    """(m, e) with value == m * 2**e exactly (m = 0 for zero)."""
    num, den = value.as_integer_ratio()
    return num, 1 - den.bit_length()


def _scaled(m: int, e: int, scale: int) -> int:
    """m * 2**e in units of 2**scale (e >= scale)."""
    return m << (e - scale)


def _times_power(x: int, exponent: int, n: int) -> float:
    """x * 2**exponent / n, correctly rounded from exact integers."""
    return (x << exponent) / n if exponent >= 0 else x / (n << -exponent)


_DEFAULTS = defaults()


@dataclass(frozen=True)
class AnomalyRule:
    """The rule's parameters: build it with :meth:`from_settings`; the defaults are the settings'."""

    window: int = _DEFAULTS.anomaly_window
    threshold: float = _DEFAULTS.anomaly_threshold
    min_count: int = _DEFAULTS.anomaly_min_count

    @cached_property
    def threshold_ratio(self) -> tuple[int, int]:
        """The threshold as an exact fraction (numerator, denominator)."""
        return Fraction(self.threshold).as_integer_ratio()

    @classmethod
    def from_settings(cls, settings: Settings) -> AnomalyRule:
        return cls(window=settings.anomaly_window, threshold=settings.anomaly_threshold, min_count=settings.anomaly_min_count)


def new_state() -> dict[str, Any]:
    return {
        "window": [],  # the last N values, oldest first
        "scale": None,  # the sums' unit is 2**scale (None until a non-zero value)
        "s1": 0,  # sum of the window in units of 2**scale
        "s2": 0,  # sum of squares in units of 2**(2 * scale)
        "count": 0,
        "sum": 0.0,
        "min": None,
        "max": None,
        "ts": None,
        "last_value": None,
        "last_z": None,
        "last_anomaly": None,
    }


def _spread(state: dict[str, Any]) -> int:
    """n^2 * variance of the window, exactly, in units of 2**(2 * scale)."""
    n = len(state["window"])
    return n * state["s2"] - state["s1"] * state["s1"]


def _root(value: int) -> int:
    """sqrt(value) * 2**_ROOT_BITS, rounded down."""
    return math.isqrt(value << (2 * _ROOT_BITS))


def window_stats(state: dict[str, Any]) -> tuple[float, float]:
    """(mean, population std) of the window from the exact sums; both are within the range of
    the window's values, so neither can overflow."""
    n = len(state["window"])
    if n == 0 or state["scale"] is None:
        return 0.0, 0.0
    scale = state["scale"]
    mean = _times_power(state["s1"], scale, n)
    spread = _spread(state)
    # std = sqrt(n^2 var) / n, in units of 2**scale
    std = _times_power(_root(spread), scale - _ROOT_BITS, n) if spread else 0.0
    return mean, std


def _deviation(state: dict[str, Any], units: int) -> int:
    """n * |value - mean| in units of 2**scale, exactly."""
    return abs(len(state["window"]) * units - state["s1"])


def running_sum_overflow_reason(total: float, value: float) -> str:
    return (
        f"value {value!r} would take the series' running sum {total!r} out of the range of a double; "
        "the value was not applied"
    )


def observe(state: dict[str, Any], series_id: str, ts: int, value: float, rule: AnomalyRule) -> Alert | None:
    """Fold one value into the series' state (in place); return an anomaly alert or None.

    Raises :class:`Rejected`, with the state untouched, when the value cannot be applied."""
    value = float(value)
    if not math.isfinite(state["sum"] + value):
        raise Rejected(running_sum_overflow_reason(state["sum"], value))
    m, e = _split(value)
    scale = state["scale"]
    if m and (scale is None or e < scale):
        if scale is not None:  # a finer value: the sums move to its unit
            state["s1"] <<= scale - e
            state["s2"] <<= 2 * (scale - e)
        state["scale"] = scale = e
    units = _scaled(m, e, scale) if m else 0
    window = state["window"]
    window.append(value)
    state["s1"] += units
    state["s2"] += units * units
    if len(window) > rule.window:
        old_m, old_e = _split(window.pop(0))
        evicted = _scaled(old_m, old_e, scale) if old_m else 0
        state["s1"] -= evicted
        state["s2"] -= evicted * evicted

    state["count"] += 1
    state["sum"] += value
    state["min"] = value if state["min"] is None else min(state["min"], value)
    state["max"] = value if state["max"] is None else max(state["max"], value)
    state["ts"] = ts if state["ts"] is None else max(state["ts"], ts)
    state["last_value"] = value

    if len(window) <= rule.min_count:
        state["last_z"] = None
        return None
    spread, deviation = _spread(state), _deviation(state, units)
    if spread == 0:
        z = None  # a constant window: the value equals the mean
        anomalous = deviation != 0
    else:
        # z = n|value - mean| / sqrt(n^2 var); anomalous when z > threshold, compared squared.
        z = (deviation << _ROOT_BITS) / _root(spread)
        num, den = rule.threshold_ratio
        anomalous = deviation * deviation * den * den > num * num * spread
    state["last_z"] = z
    if not anomalous:
        return None
    mean, std = window_stats(state)
    state["last_anomaly"] = {"ts": ts, "value": value, "z": z}
    z_text = "inf (window is constant)" if z is None else f"{z:.2f}"
    return Alert.build(
        "anomaly",
        series_id,
        ts,
        f"{series_id}: value {value:g} is {z_text} standard deviations from the window mean {mean:g}",
        value=value,
        mean=mean,
        std=std,
        z=z,
        window_size=len(window),
    )


def snapshot(series_id: str, state: dict[str, Any], rule: AnomalyRule) -> MetricSnapshot:
    mean, std = window_stats(state)
    last = state["last_anomaly"]
    return MetricSnapshot(
        series_id=series_id,
        ts=state["ts"],
        window_size=rule.window,
        window_count=len(state["window"]),
        mean=mean,
        std=std,
        last_value=state["last_value"],
        last_z=state["last_z"],
        count=state["count"],
        sum=state["sum"],
        min=state["min"],
        max=state["max"],
        avg=state["sum"] / state["count"],
        last_anomaly=None if last is None else LastAnomaly(**last),
    )
