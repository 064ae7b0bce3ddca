"""Sessions throughput: the sessions job vs Spark's native ``session_window`` vs Quix Streams,
next to the same source and validation without state (the pipeline's floor).

All three read the same produced user-events topic on the same broker, from the first
offset, with fresh state each run (new checkpoint / consumer group, new output topics).
The Spark runs share the one SparkSession of the benchmark and run one ``availableNow`` batch
(rate = rows / the batch's ``triggerExecution``); the Quix run is timed from its first record
to the flush after its last (see :mod:`bench.peers.quix_app`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.dataset import Dataset
from bench.measure import fresh_outputs, query_figures, ratio_by_round, rounds, run_quix
from bench.peers import native_sessions
from bench.phases import RunPhases
from streamstate_pipeline.contracts import UserEvent
from streamstate_jobs.sessions import job as sessions_job
from streamstate_jobs.inputs import read_input
from streamstate_jobs.runner import start_query
from streamstate_jobs.validation import validate
from streamstate_pipeline.settings import Settings


def sessions_job_once(spark, settings: Settings, dataset: Dataset, checkpoint: Path) -> dict[str, Any]:
    """One fresh ``availableNow`` run of the sessions job over the whole topic."""
    run_settings = fresh_outputs(settings.model_copy(update={"topic_user_events": dataset.topic}), "sessions")
    phases = RunPhases(spark)
    return query_figures(start_query(spark, run_settings, sessions_job.JOB, str(checkpoint), available_now=True), dataset.records, phases)


def stateless_once(spark, settings: Settings, dataset: Dataset, checkpoint: Path) -> dict[str, Any]:
    """The pipeline without state: the job's source and contract validation into Spark's
    ``noop`` sink, one ``availableNow`` batch (what every record costs before the state engine)."""
    phases = RunPhases(spark)
    validated = validate(read_input(spark, settings, dataset.topic), UserEvent, settings.max_clock_skew_ms)
    query = (
        validated.writeStream.queryName("source-and-validation").format("noop")
        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    )
    return query_figures(query, dataset.records, phases)


def native_once(spark, settings: Settings, dataset: Dataset, checkpoint: Path) -> dict[str, Any]:
    """One fresh ``availableNow`` run of the native ``session_window`` aggregation."""
    run_settings = fresh_outputs(settings.model_copy(update={"topic_user_events": dataset.topic}), "native")
    phases = RunPhases(spark)
    return query_figures(native_sessions.start(spark, run_settings, str(checkpoint)), dataset.records, phases)


def quix_once(settings: Settings, dataset: Dataset) -> dict[str, Any]:
    output = fresh_outputs(settings, "quix-sessions").topic_sessions
    return run_quix("quix_sessions", settings, dataset.topic, output, dataset.records)


def measure(spark, settings: Settings, dataset: Dataset, workdir: Path, runs: int) -> dict[str, Any]:
    """Median events/s of the three engines and the floor over ``runs`` rounds (the engines take
    turns), the ratios of the medians and the ratios round by round."""
    measured = rounds(runs, {
        "source + validation, no state": lambda i: stateless_once(spark, settings, dataset, workdir / f"stateless-{i}"),
        "sessions job": lambda i: sessions_job_once(spark, settings, dataset, workdir / f"sessions-{i}"),
        "native session_window": lambda i: native_once(spark, settings, dataset, workdir / f"native-{i}"),
        "Quix Streams sessions": lambda _i: quix_once(settings, dataset),
    })
    job, native, quix = measured["sessions job"], measured["native session_window"], measured["Quix Streams sessions"]
    rate = job["median_rows_per_s"]
    return {
        "dataset": vars(dataset),
        "source_and_validation": measured["source + validation, no state"],
        "sessions_job": job,
        "native_session_window": native,
        "quixstreams": quix,
        "ratio_job_vs_native": round(rate / native["median_rows_per_s"], 2),
        "ratio_job_vs_quix": round(rate / quix["median_rows_per_s"], 2),
        "ratio_job_vs_native_by_round": ratio_by_round(job, native),
        "ratio_job_vs_quix_by_round": ratio_by_round(job, quix),
    }
