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
from collections.abc import Iterable
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
    if not state["window"] or state["scale"] is None:
        return 0.0, 0.0
    return _stats(len(state["window"]), state["scale"], state["s1"], _spread(state))


def _stats(n: int, scale: int, s1: int, spread: int) -> tuple[float, float]:
    mean = _times_power(s1, scale, n)
    # std = sqrt(n^2 var) / n, in units of 2**scale
    std = _times_power(_root(spread), scale - _ROOT_BITS, n) if spread else 0.0
    return mean, std


def _z(deviation: int, spread: int) -> float:
    """z = n|value - mean| / sqrt(n^2 var), from the exact integers."""
    return (deviation << _ROOT_BITS) / _root(spread)


def running_sum_overflow_reason(total: float, value: float) -> str:
    return (
        f"value {value!r} would take the series' running sum {total!r} out of the range of a double; "
        "the value was not applied"
    )


def observe(state: dict[str, Any], series_id: str, ts: int, value: float, rule: AnomalyRule) -> Alert | None:
    """Fold one value into the series' state (in place); return an anomaly alert or None.

    Raises :class:`Rejected`, with the state untouched, when the value cannot be applied."""
    for _, outcome in fold(state, series_id, ((ts, value),), rule):
        if isinstance(outcome, Rejected):
            raise outcome
        return outcome
    return None


def fold(
    state: dict[str, Any], series_id: str, points: Iterable[tuple[int, float]], rule: AnomalyRule
) -> list[tuple[int, Alert | Rejected]]:
    """Fold ``(ts, value)`` points into the series' state in order (in place); return the alerts
    raised and the values refused (:class:`Rejected`, the state as if they never came), each with
    its position in ``points``.

    The same as :func:`observe` one value at a time, bit for bit, at a fraction of its cost
    (a batch's values are most of the job's work): the state's fields live in locals until the
    end, and z, an integer square root, is computed only where it is seen, for an alert and for
    the last value applied (``last_z``); whether a value is an anomaly never needs it."""
    outcomes: list[tuple[int, Alert | Rejected]] = []
    window = state["window"]
    scale, s1, s2 = state["scale"], state["s1"], state["s2"]
    count, total, low, high, newest = state["count"], state["sum"], state["min"], state["max"], state["ts"]
    last_value, last_z, last_anomaly = state["last_value"], state["last_z"], state["last_anomaly"]
    pending: tuple[int, int] | None = None  # (deviation, spread) of the last value, its z not yet computed
    size, min_count = rule.window, rule.min_count
    num, den = rule.threshold_ratio
    isfinite = math.isfinite
    for position, (ts, value) in enumerate(points):
        value = float(value)
        if not isfinite(total + value):
            outcomes.append((position, Rejected(running_sum_overflow_reason(total, value))))
            continue
        m, d = value.as_integer_ratio()  # value == m * 2**e exactly
        e = 1 - d.bit_length()
        if m and (scale is None or e < scale):
            if scale is not None:  # a finer value: the sums move to its unit
                s1 <<= scale - e
                s2 <<= 2 * (scale - e)
            scale = e
        units = m << (e - scale) if m else 0
        window.append(value)
        s1 += units
        s2 += units * units
        n = len(window)
        if n > size:
            old_m, old_d = window.pop(0).as_integer_ratio()
            n -= 1
            if old_m:
                evicted = old_m << (1 - old_d.bit_length() - scale)
                s1 -= evicted
                s2 -= evicted * evicted
        count += 1
        total += value
        # min() and max() without their calls: the same choice (the first of equals, -0.0 or 0.0 as it came).
        if low is None or value < low:
            low = value
        if high is None or value > high:
            high = value
        if newest is None or ts > newest:
            newest = ts
        last_value = value
        pending = None
        if n <= min_count:
            last_z = None
            continue
        spread = n * s2 - s1 * s1
        deviation = abs(n * units - s1)
        if spread == 0:
            last_z = None  # a constant window: the value equals the mean
            if deviation == 0:
                continue
        else:
            # Anomalous when z > threshold, compared squared and exactly.
            if deviation * deviation * den * den <= num * num * spread:
                pending = (deviation, spread)
                continue
            last_z = _z(deviation, spread)
        z = last_z
        mean, std = _stats(n, scale, s1, spread)
        last_anomaly = {"ts": ts, "value": value, "z": z}
        z_text = "inf (window is constant)" if z is None else f"{z:.2f}"
        outcomes.append((position, Alert.build(
            "anomaly",
            series_id,
            ts,
            f"{series_id}: value {value:g} is {z_text} standard deviations from the window mean {mean:g}",
            value=value,
            mean=mean,
            std=std,
            z=z,
            window_size=n,
        )))
    if pending is not None:
        last_z = _z(*pending)
    state.update(
        scale=scale, s1=s1, s2=s2, count=count, sum=total, min=low, max=high, ts=newest,
        last_value=last_value, last_z=last_z, last_anomaly=last_anomaly,
    )
    return outcomes


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
