"""Rolling z-score anomalies in Quix Streams with the project's anomaly rule, for the throughput peer.

    .venv/peers/quix/bin/python -m bench.peers.quix_anomalies --bootstrap H:P --input T --output T --records N

The rule (docs/architecture.md, "Anomalies"; seed 000): per series, a window of the last 100 values including
the new one; mean and population standard deviation over it; once it holds more than 10
values, the value is an anomaly when |value - mean| / std > 3 (std = 0: when value != mean).
A stateful ``apply`` keeps the window in the series' state, in arrival order.
"""

from __future__ import annotations

import math

from bench.peers.quix_app import run_pipeline

WINDOW = 100
MIN_COUNT = 10
THRESHOLD = 3.0


def on_point(point: dict, state) -> list[dict]:
    """One metric point -> the alert it raises, if any."""
    window = state.get("window") or []
    window.append(point["value"])
    if len(window) > WINDOW:
        del window[0]
    state.set("window", window)
    if len(window) <= MIN_COUNT:
        return []
    mean = sum(window) / len(window)
    std = math.sqrt(sum((v - mean) ** 2 for v in window) / len(window))
    value = point["value"]
    anomalous = value != mean if std == 0 else abs(value - mean) / std > THRESHOLD
    if not anomalous:
        return []
    z = None if std == 0 else (value - mean) / std
    return [{"kind": "anomaly", "entity": point["series_id"], "ts": point["ts"], "value": value, "mean": mean, "std": std, "z": z}]


def pipeline(sdf):
    return sdf.apply(on_point, stateful=True, expand=True)


if __name__ == "__main__":
    run_pipeline("anomalies", pipeline)
