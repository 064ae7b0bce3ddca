"""What every throughput figure shares: fresh output topics per run, timing a Spark query
from its progress, running a Quix peer in its own venv, medians over runs, the words
for the broker and connector every figure runs on, and how a run is stopped."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable

from bench.phases import RunPhases, phases_line
from streamstate_pipeline.settings import REPO_ROOT, Settings
from streamstate_pipeline.topics import TopicSpec, create_topics, load_topics

# Inside the project venv directory: ignored by git, kept by `make clean`, gone with the venv.
QUIX_VENV = REPO_ROOT / ".venv" / "peers" / "quix"
QUIX_REQUIREMENTS = Path(__file__).resolve().parent / "peers" / "quix-requirements.txt"
OUTPUT_TOPICS = ("topic_alerts", "topic_sessions", "topic_session_state", "topic_metric_state", "topic_dead_letters", "topic_event_counts")


def stop_on_signals() -> None:
    """Have Ctrl-C, ``kill -INT`` and ``kill -TERM`` stop a benchmark through its ``with`` and
    ``finally`` blocks, so that the broker, the queries and the producers it started stop with it.
    A shell starts a background command with SIGINT ignored, and Python keeps what it inherits:
    a run started with ``&`` would not stop on ``kill -INT``, and SIGTERM would end it at once."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)


def broker_description() -> str:
    """The broker every figure runs on: Apache Kafka as a native KRaft broker (:meth:`streamstate_stack.launcher.EmbeddedStack.start_broker`)."""
    from streamstate_pipeline.binaries import versions

    return f"Apache Kafka {versions()['KAFKA_VERSION']} (KRaft, native, data on disk), loopback"


def connector_description(spark=None) -> str:
    """Spark's built-in Kafka connector, and which of its sources the session reads with
    (its V1 source when ``spark.sql.streaming.disabledV2MicroBatchReaders`` names its provider)."""
    text = "Spark's built-in connector (spark-sql-kafka-0-10"
    if spark is None:
        return text + ")"
    from streamstate_jobs.kafka import BUILTIN_PROVIDER

    disabled = spark.conf.get("spark.sql.streaming.disabledV2MicroBatchReaders", "") or ""
    return text + (", V1 source)" if BUILTIN_PROVIDER in {c.strip() for c in disabled.split(",")} else ", V2 source)")


def driver_heap_description(spark) -> str:
    """The Spark JVM's heap: in local mode every engine's state, shuffle and collector share it,
    and Spark's own queries are the ones a larger heap speeds most (docs/profile.md, 2026-12-07)."""
    configured = spark.sparkContext.getConf().get("spark.driver.memory", None)
    max_mib = spark.sparkContext._jvm.java.lang.Runtime.getRuntime().maxMemory() // 2**20
    return f"{configured or '1g (Spark default)'}, {max_mib:,} MiB usable"


def fresh_outputs(settings: Settings, label: str) -> Settings:
    """A copy of ``settings`` whose output topics are new (2 partitions each), so runs never share outputs."""
    run_id = uuid.uuid4().hex[:6]
    names = {field: f"bench-{label}-{run_id}-{field.removeprefix('topic_')}" for field in OUTPUT_TOPICS}
    create_topics(settings.kafka, [TopicSpec(name, 2) for name in names.values()])
    return settings.model_copy(update=names)


def bounded_input_topic(settings: Settings, name: str, partitions: int) -> TopicSpec:
    """A fresh input topic with the timestamp bounds infra/kafka/topics.toml gives the input
    topics (the broker then refuses a timestamp Spark's source cannot convert, and the jobs'
    start-up check has nothing to warn about)."""
    template = next((t for t in load_topics(settings.topics_file) if t.name == settings.topic_metrics), None)
    config = {k: v for k, v in (template.config if template else {}).items() if k.startswith("message.timestamp.")}
    return TopicSpec(name, partitions, config)


def query_figures(query, records: int, phases: RunPhases | None = None) -> dict[str, Any]:
    """Wait for an ``availableNow`` query over ``records`` input records and sum its batches
    (:func:`run_figures`); with ``phases``, marked before the query started, also where the ms
    went by phase, from the event log (the driver, the source's stage, the state, the write, the commit)."""
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"query {query.name} failed: {query.exception()}")
    figures = run_figures(query.recentProgress, records)
    by_phase = None if phases is None else phases.of(str(query.id))
    if by_phase:
        figures["phases_ms"] = by_phase
    return figures


def run_figures(progress: list[dict[str, Any]], records: int) -> dict[str, Any]:
    """A run's rate from its batches' progress: ``records`` over the summed ``triggerExecution``
    of every batch, from planning the first (the source's first read follows) to the writer's
    delivery-checked flush of the last, so the rate runs from the first record read to the last
    output written. An ``availableNow`` run of a stateful job ends with a batch without data once
    its watermark has moved on: the sessions job folds its users' held events there and writes
    their sessions and alerts, so that batch is the run's work as much as the first, and an
    engine that writes everything in its batch of data has no such batch to count."""
    with_data = [p for p in progress if p["numInputRows"] > 0]
    if not with_data:
        raise RuntimeError("the run read nothing")
    # numInputRows counts every scan of the source: a plan reading the topic twice shows 2x records.
    source_rows = sum(p["numInputRows"] for p in with_data)
    durations: dict[str, int] = {}
    for batch in progress:
        for phase, ms in batch["durationMs"].items():
            durations[phase] = durations.get(phase, 0) + ms
    seconds = durations["triggerExecution"] / 1000
    operators = [
        {
            name: op[name]
            for name in (
                "operatorName", "numRowsTotal", "numRowsUpdated", "allUpdatesTimeMs", "allRemovalsTimeMs", "commitTimeMs", "memoryUsedBytes", "customMetrics"
            )
            if name in op
        }
        for op in with_data[-1]["stateOperators"]
    ]
    return {
        "rows": records, "seconds": round(seconds, 2), "rows_per_s": round(records / seconds), "source_rows_read": source_rows,
        "batches": len(progress), "batches_without_data": len(progress) - len(with_data),
        "without_data_ms": sum(p["durationMs"]["triggerExecution"] for p in progress if p["numInputRows"] == 0),
        "duration_ms": durations, "state_operators": operators,
    }


def quix_python() -> Path:
    """The Quix venv's interpreter, creating the venv from the pinned requirements on first use."""
    python = QUIX_VENV / "bin" / "python"
    if not python.exists():
        print(f"creating the Quix Streams venv {QUIX_VENV} ...", flush=True)
        subprocess.run(["python3.11", "-m", "venv", str(QUIX_VENV)], check=True)
        subprocess.run([str(QUIX_VENV / "bin" / "pip"), "install", "-q", "-r", str(QUIX_REQUIREMENTS)], check=True)
    return python


def run_quix(peer: str, settings: Settings, input_topic: str, output_topic: str, records: int, timeout_s: float = 900) -> dict[str, Any]:
    """Run ``bench.peers.<peer>`` in the Quix venv over a whole input topic; its JSON figures."""
    done = subprocess.run(
        [str(quix_python()), "-m", f"bench.peers.{peer}", "--bootstrap", settings.bootstrap_servers,
         "--input", input_topic, "--output", output_topic, "--records", str(records)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout_s, env={**os.environ, "PYTHONPATH": ""},
    )
    if done.returncode != 0:
        raise RuntimeError(f"Quix peer {peer} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def median_runs(runs: list[dict[str, Any]], key: str = "rows_per_s") -> dict[str, Any]:
    """The runs and the median of ``key`` over them."""
    return {"median_" + key: round(statistics.median(r[key] for r in runs), 1), "runs": runs}


def repeat(times: int, label: str, once: Callable[[int], dict[str, Any]]) -> dict[str, Any]:
    """Run ``once(run_index)`` ``times`` times, printing each rate; the median rows/s and the runs."""
    return rounds(times, {label: once})[label]


def machine_busy_seconds() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, every core summed (/proc/stat)."""
    fields = [int(n) for n in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle and iowait
    ticks = os.sysconf("SC_CLK_TCK")
    return (sum(fields) - idle) / ticks, sum(fields) / ticks


def wait_until_quiet(quiet_for_s: float, timeout_s: float, busy_share: float = 0.1, window_s: float = 3.0) -> float | None:
    """Seconds until the machine's cores have been busy less than ``busy_share`` of each
    ``window_s`` for ``quiet_for_s`` in a row; None (after a line saying so) when that has not
    happened within ``timeout_s``. Other processes' work, a broker's background work included,
    would otherwise fall on the figure measured next."""
    started = time.perf_counter()
    quiet_since = started
    busy, total = machine_busy_seconds()
    while time.perf_counter() - started < timeout_s:
        time.sleep(window_s)
        now_busy, now_total = machine_busy_seconds()
        now = time.perf_counter()
        if now_busy - busy >= busy_share * (now_total - total):
            quiet_since = now
        elif now - quiet_since >= quiet_for_s:
            return now - started
        busy, total = now_busy, now_total
    print(f"the machine is still busy after {timeout_s:.0f}s (load average {os.getloadavg()[0]:.1f}); measuring all the same", flush=True)
    return None


def rounds(times: int, arms: dict[str, Callable[[int], dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Run every arm once per round, ``times`` rounds, printing each rate; per arm the median
    rows/s and the runs.

    The arms take turns rather than each running all its runs in a block: the host's speed
    drifts over minutes (native ``session_window`` ran 24% faster in one late block than in
    any earlier one), and in turns a drift falls on every arm alike, so a ratio of two arms'
    medians, or their ratio within a round (:func:`ratio_by_round`), compares like with like."""
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in arms}
    for index in range(times):
        for label, once in arms.items():
            result = once(index)
            runs[label].append(result)
            phases = f" ({phases_line(result['phases_ms'])})" if result.get("phases_ms") else ""
            print(f"  {label} run {index + 1}/{times}: {result['rows']:,} rows in {result['seconds']}s = {result['rows_per_s']:,} rows/s{phases}",
                  flush=True)
    return {label: median_runs(arm_runs) for label, arm_runs in runs.items()}


def ratio_by_round(numerator: dict[str, Any], denominator: dict[str, Any]) -> list[float]:
    """Two arms' rates divided round by round (arms measured with :func:`rounds`)."""
    return [round(a["rows_per_s"] / b["rows_per_s"], 2) for a, b in zip(numerator["runs"], denominator["runs"], strict=True)]
