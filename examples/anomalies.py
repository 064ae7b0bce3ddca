"""Real-time anomaly detection with mapWithState (seed 000).

Per series, a window of the last 100 values; while it holds 10 values or fewer the series is
LEARNING; after that a value more than 3 population standard deviations from the window's
mean (the new value included) is an ANOMALY (with a standard deviation of 0: any value other
than the mean).

    python -m examples.anomalies --topic metrics
"""

from __future__ import annotations

import math

from pyspark.sql import DataFrame, SparkSession

from examples.runner import main_for, read_json_topic
from streamstate.state import State, StateResult, StateSpec, map_with_state

SCHEMA = "series_id STRING, ts LONG, value DOUBLE"
WINDOW = 100
LEARNING = 10
THRESHOLD = 3.0


def std_dev(values: list[float], mean: float) -> float:
    if len(values) < 2:
        return 0.0
    return math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def detect_anomaly(metric: str, value: float | None, state: State) -> tuple[str, str] | None:
    """Slide the series' window by ``value`` and classify it."""
    if value is None:
        return None
    current = state.get_option() or {"values": [], "sum": 0.0, "count": 0}
    full = len(current["values"]) >= WINDOW
    oldest = current["values"][0] if full else 0.0
    window = current["values"][1:] + [value] if full else current["values"] + [value]
    new_state = {"values": window, "sum": current["sum"] - oldest + value, "count": min(current["count"] + 1, WINDOW)}
    state.update(new_state)
    if new_state["count"] <= LEARNING:
        return (metric, f"LEARNING: {value}")
    mean = new_state["sum"] / new_state["count"]
    deviation = std_dev(window, mean)
    if deviation == 0.0:
        z_score = 0.0 if value == mean else math.inf
    else:
        z_score = abs(value - mean) / deviation
    if z_score > THRESHOLD:
        return (metric, f"ANOMALY: {value} (z-score: {z_score})")
    return (metric, f"NORMAL: {value}")


def detect_anomalies(metrics: DataFrame) -> StateResult:
    return map_with_state(metrics, key="series_id", spec=StateSpec.function(detect_anomaly), value="value")


def build(spark: SparkSession, bootstrap_servers: str, topic: str) -> StateResult:
    return detect_anomalies(read_json_topic(spark, bootstrap_servers, topic, SCHEMA))


if __name__ == "__main__":
    main_for("anomaly detection with mapWithState", build)
