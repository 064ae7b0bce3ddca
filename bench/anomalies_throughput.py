"""Anomalies throughput: the anomalies job vs Quix Streams on the same metrics topic.

Same protocol as :mod:`bench.sessions_throughput`: one fresh ``availableNow`` batch per Spark
run in the shared SparkSession, a fresh consumer group and state per Quix run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.dataset import Dataset
from bench.measure import fresh_outputs, query_figures, ratio_by_round, rounds, run_quix
from bench.phases import RunPhases
from streamstate_jobs.anomalies import job as anomalies_job
from streamstate_jobs.runner import start_query
from streamstate_pipeline.settings import Settings


def anomalies_job_once(spark, settings: Settings, dataset: Dataset, checkpoint: Path) -> dict[str, Any]:
    run_settings = fresh_outputs(settings.model_copy(update={"topic_metrics": dataset.topic}), "anomalies")
    phases = RunPhases(spark)
    return query_figures(start_query(spark, run_settings, anomalies_job.JOB, str(checkpoint), available_now=True), dataset.records, phases)


def quix_once(settings: Settings, dataset: Dataset) -> dict[str, Any]:
    output = fresh_outputs(settings, "quix-anomalies").topic_alerts
    return run_quix("quix_anomalies", settings, dataset.topic, output, dataset.records)


def measure(spark, settings: Settings, dataset: Dataset, workdir: Path, runs: int) -> dict[str, Any]:
    """Median points/s of the job and of Quix over ``runs`` rounds (the two take turns), the
    ratio of the medians and the ratios round by round."""
    measured = rounds(runs, {
        "anomalies job": lambda i: anomalies_job_once(spark, settings, dataset, workdir / f"anomalies-{i}"),
        "Quix Streams anomalies": lambda _i: quix_once(settings, dataset),
    })
    job, quix = measured["anomalies job"], measured["Quix Streams anomalies"]
    return {
        "dataset": vars(dataset),
        "anomalies_job": job,
        "quixstreams": quix,
        "ratio_job_vs_quix": round(job["median_rows_per_s"] / quix["median_rows_per_s"], 2),
        "ratio_job_vs_quix_by_round": ratio_by_round(job, quix),
    }
