"""What exactly-once output costs: the sessions job's throughput and the event-to-alert latency
with the outputs written in Kafka transactions (``output_transactions=on``, the default where
the broker has them) and without (``off``, at least once), in the same run and SparkSession.

The throughput runs alternate between the two modes, so a machine that drifts during the
figure weighs on both alike; the ratio is on / off of the medians.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench import latency
from bench.dataset import Dataset
from bench.measure import median_runs
from bench.sessions_throughput import sessions_job_once
from streamstate_pipeline.settings import Settings

MODES = ("on", "off")


def measure(
    spark, settings: Settings, events: Dataset, workdir: Path, runs: int, rate: int, seconds: float, lead_in_s: float,
) -> dict[str, Any]:
    modes = {mode: settings.model_copy(update={"output_transactions": mode}) for mode in MODES}
    throughput: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    for index in range(runs):
        for mode, mode_settings in modes.items():
            result = sessions_job_once(spark, mode_settings, events, workdir / f"transactions-{mode}-{index}")
            throughput[mode].append(result)
            print(f"  sessions job, transactions {mode}, run {index + 1}/{runs}: {result['rows_per_s']:,} rows/s", flush=True)
    sessions = {mode: median_runs(results) for mode, results in throughput.items()}
    latencies = {
        mode: latency.measure(spark, mode_settings, workdir, runs, rate, seconds, checkpoint=str(workdir / f"transactions-latency-{mode}"),
                              lead_in_s=lead_in_s)
        for mode, mode_settings in modes.items()
    }
    return {
        "sessions_job": sessions,
        "latency": latencies,
        "ratio_throughput_on_vs_off": round(sessions["on"]["median_rows_per_s"] / sessions["off"]["median_rows_per_s"], 2),
        "p99_ms_on_minus_off": round(latencies["on"]["median_p99_ms"] - latencies["off"]["median_p99_ms"]),
    }

