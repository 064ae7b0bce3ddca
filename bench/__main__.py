"""``make bench`` (``python -m bench``): every benchmark of the README in one run, side by side.

    .venv/bin/python -m bench [--quick] [--runs 3] [--only sessions,latency ...]

One Apache Kafka broker (KRaft, started by the stack), one fixed-seed dataset produced once
per topic, one SparkSession for every Spark figure, reading and writing Kafka with Spark's
built-in connector (spark-sql-kafka-0-10); fresh checkpoints, consumer groups and output
topics per run. Figures:

1. ceiling: raw confluent-kafka ``assign()`` consume of the user-events topic;
2. sessions throughput: the sessions job vs Spark's native ``session_window`` vs Quix Streams;
3. anomalies throughput: the anomalies job vs Quix Streams;
4. latency: produce-to-alert p50/p99 at a steady 5,000 points/s, per batch phase, and its
   floors under the same input: the job with a rule that keeps no state, and Spark's own
   minimum Python stateful query (``bench.latency_floor``);
5. state scale: batch time with many vs few keys in state, same batch (``bench.state_scale``);
6. API, for 1,000,000 and 10,000,000 users: RSS, cold rebuild, restart to ready with the
   store present, p50/p99 at 1,000, 2,500 and 5,000 requests/s from a second process (``bench.api_latency``);
7. production: figures 2-4's jobs under the production profile, next to the embedded rows:
   the same Apache Kafka and connector, with s3a:// checkpoints in MinIO instead of the
   local disk (``bench.production``);
8. transactions: the sessions job's throughput and the latency with exactly-once output on and
   off, side by side (``bench.transactions_cost``);
9. windows: ``reduce_by_key_and_window`` vs Spark's ``groupBy(window(...), key).agg`` on the same
   input files, 10-minute windows sliding every minute (``bench.windows_throughput``);
10. cluster (only with ``--only cluster``): the sessions job on local[2] vs a 2-worker
    standalone cluster (``bench.cluster_throughput``).

Each figure is the median of ``--runs`` runs, at the issue's sizes (1,000,000 events over
100,000 users, 1,000,000 points over 10,000 series, 1,000,000 keys in state, 1,000,000 and
10,000,000 users in the API); ``--quick`` divides them by ten for a look in a few minutes. Before the measured Spark
runs, one run of each Spark query over the measured datasets is discarded, as the Quix peers' start-up is.
The throughput comparisons (sessions, anomalies) run their engines in turns, one run each per
round, so that the host's drift falls on all of them; their ratio rows list each round's ratio.
A run starts once the machine has been quiet for 10 s (``--start-busy``: at once).
Writes ``bench/results.json`` and ``bench/results.md`` (after every figure, so a failure keeps
what was measured) and prints the table. Nothing is asserted.

``--only validation`` measures the validation step in-process, no broker or Spark: µs per
record of the per-record pydantic path vs the contracts' fast path (``bench.validation``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from bench.report import write_results

if TYPE_CHECKING:
    from bench.dataset import Dataset

HERE = Path(__file__).resolve().parent
FIGURES = ("ceiling", "sessions", "anomalies", "latency", "state", "production", "transactions", "api", "windows", "cluster")
DEFAULT_FIGURES = FIGURES[:-1]  # the cluster figure starts a second Spark: only when asked for
SIZES = {  # name -> (default: the issue's, --quick)
    "events": (1_000_000, 100_000),
    "users": (100_000, 10_000),
    "metrics": (1_000_000, 100_000),
    "series": (10_000, 1_000),
    "state_large": (1_000_000, 100_000),
    "state_small": (10_000, 10_000),
    "api_sessions": (1_000_000, 100_000),
    "api_sessions_large": (10_000_000, 1_000_000),
    "validation_records": (100_000, 20_000),
    # Small enough for the figure to take about two minutes on 2 cores.
    "window_events": (200_000, 20_000),
    "window_keys": (1_000, 100),
}
# Seconds of load before the latency figure's measured periods: (default, --quick). The job keeps
# getting faster for about a minute under load (bench/latency.py).
LATENCY_LEAD_IN_S = (60.0, 10.0)
# In-process and CPU-bound: only when asked for (--only validation), like the cluster figure.
FIGURES += ("validation",)
# The production figure's warm-up, on its own broker and MinIO (its rows are no goal's): small.
PRODUCTION_WARM_UP_EVENTS = 20_000
SEED = 20_261_122
NOTES = [
    "Quix Streams 3.28.0 runs in its own venv (.venv/peers/quix): its pins (confluent-kafka<2.13, pydantic<2.14) "
    "conflict with the project's. The peers read and write the same Apache Kafka broker as the Spark figures; "
    "changelog topics stay on.",
    "Sessions rule in the peers: Quix session_window cannot end a session on logout, so the Quix peer is a stateful "
    "apply with the project's rule (30-minute gap, logout ends the session) that closes a timed-out session on the "
    "user's next event (no timers). Spark's native session_window has no logout rule, no de-duplication, no dead "
    "letters, no alerts and no state snapshots; it runs in complete mode (session windows support no update mode).",
    "Spark throughput = input records / the summed triggerExecution of the availableNow run's batches, the batch "
    "without data that ends it included (planning, first read, state, delivery-checked Kafka writes); "
    "source_rows_read in results.json counts every scan of the topic. Before the first figure, each Spark query "
    "runs once over the measured dataset, discarded: with a small warm-up the first round of every Spark engine "
    "was 10-20 % slower than the later ones (JIT compilation and the topic's first full read).",
    "Quix throughput = input records / (first record processed -> producer flushed after the last); its consumer "
    "group rebalance before the first record is not counted.",
    "Production-path rows: the production profile, i.e. the same Apache Kafka (KRaft) and Spark's built-in connector "
    "as every other row, plus s3a:// checkpoints in a native MinIO: the same fixed-seed datasets, produced to a broker "
    "of the same build started for the figure, in the same SparkSession; one discarded warm-up run each. Their ratio "
    "to the embedded rows (checkpoints on the local disk) is the cost of the checkpoint store.",
    "Latency phases (bench/phases.py): each batch of the measured periods is split into driver (its time outside "
    "Spark's stages: planning, offsets, scheduling), source (the stage that reads Kafka, "
    "with its Arrow exchange and shuffle write), validation (contract validation, layout and packing, timed inside "
    "that stage's Python function; none in Spark's floor), state (the stateful operator's allUpdatesTimeMs and "
    "allRemovalsTimeMs), write (the rest of the stateful stage: the Kafka write runs in the same tasks as the "
    "operator, its transaction's commit included, with the shuffle read) and commit (the offset and commit logs, "
    "and the state store's commitTimeMs). Steps that share a stage's tasks are not timed apart by Spark: a stage's "
    "wall time is split by each step's share of its summed task time, so a batch's phases add up to its "
    "triggerExecution; each phase's figure is its median over the batches, and the medians need not add up. "
    "The stage and task times come from Spark's event log, written to a scratch file; results.json keeps every "
    "batch's phases and the log's cost (listener time and size per batch). The Spark engines' throughput rows give "
    "the same phases for the run nearest their median, each phase summed over all the run's batches (the batch "
    "without data that ends an availableNow run, where the sessions job writes its sessions and alerts, is in the "
    "rate and in its phases).",
]


# A run waits for this long a quiet machine before it starts: a run begun as a test suite ended
# (load average 5.9) measured its first sessions round at 1.09x native, against 1.29x two rounds on.
START_QUIET_FOR_S = 10.0
START_QUIET_TIMEOUT_S = 300.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the issue's sizes: a look in a few minutes")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure; the figure is their median")
    parser.add_argument("--only", default=",".join(DEFAULT_FIGURES), help=f"comma-separated figures out of {','.join(FIGURES)}")
    for name, (default, quick) in SIZES.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, help=f"default {default:,}, --quick {quick:,}")
    parser.add_argument("--latency-rate", type=int, default=5_000, help="points/s of the latency figure")
    parser.add_argument("--latency-seconds", type=float, default=10.0, help="seconds of load per latency run")
    parser.add_argument("--latency-lead-in", type=float,
                        help="seconds of load before the latency runs (default {:.0f}, --quick {:.0f})".format(*LATENCY_LEAD_IN_S))
    parser.add_argument("--api-rates", default="1000,2500,5000", help="comma-separated requests/s of the API figure")
    parser.add_argument("--api-seconds", type=float, default=10.0, help="seconds of load per API run")
    parser.add_argument("--out", type=Path, default=HERE / "results.json", help="JSON results (the .md goes next to it)")
    parser.add_argument("--start-busy", action="store_true",
                        help=f"start at once instead of waiting (at most {START_QUIET_TIMEOUT_S / 60:.0f} min) for a quiet machine")
    args = parser.parse_args(argv)
    for name, (default, quick) in SIZES.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else default)
    if args.latency_lead_in is None:
        args.latency_lead_in = LATENCY_LEAD_IN_S[1] if args.quick else LATENCY_LEAD_IN_S[0]
    args.only = [f.strip() for f in args.only.split(",") if f.strip()]
    unknown = set(args.only) - set(FIGURES)
    if unknown:
        parser.error(f"unknown figures {sorted(unknown)}; choose from {', '.join(FIGURES)}")
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    return args


def java_version(stderr: str) -> str:
    """The version line of ``java -version`` (with JAVA_TOOL_OPTIONS set the JVM first prints "Picked up ...")."""
    return next((line for line in stderr.splitlines() if " version " in line), "unknown")


def machine() -> dict[str, Any]:
    import pyspark

    return {
        "cores": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "pyspark": pyspark.__version__,
        "java": java_version(subprocess.run(["java", "-version"], capture_output=True, text=True).stderr),
        # They reach the broker's and Spark's JVMs, and C1 only (`make run`'s options) moves the figures.
        "jvm_options": os.environ.get("JAVA_TOOL_OPTIONS", ""),
        "platform": platform.platform(),
    }


class Run:
    """The results document, saved after every figure."""

    def __init__(self, args: argparse.Namespace, settings):
        from bench.measure import broker_description, connector_description

        self.args = args
        self.doc: dict[str, Any] = {
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "machine": machine(),
            "setup": {
                "broker": broker_description(),
                "input_partitions": 4,
                "spark_master": settings.spark_master,
                "shuffle_partitions": settings.shuffle_partitions or "one per core",
                "state_store": settings.state_store,
                # The session's source (V1 or V2) is filled in once the SparkSession is built.
                "kafka_connector": connector_description(),
                "checkpoints": "the local disk (the production rows: s3a:// in MinIO)",
                "throughput_trigger": "availableNow (every batch of the run counted)",
                "runs_per_figure": args.runs,
                "seed": SEED,
            },
            "notes": NOTES
            + [f"sizes: {', '.join(f'{n}={getattr(args, n):,}' for n in SIZES)}" + (" (--quick: a tenth of the issue's)" if args.quick else " (the issue's)")],
            "figures": self._kept_figures(),
        }
        self.failed: list[str] = []

    @property
    def partial(self) -> bool:
        """Whether ``--only`` left out some of the figures a whole ``make bench`` measures."""
        return not set(DEFAULT_FIGURES) <= set(self.args.only)

    def _kept_figures(self) -> dict[str, Any]:
        """A partial run (``--only``) updates its figures in the last results and keeps the others."""
        if not self.partial or not self.args.out.exists():
            return {}
        return json.loads(self.args.out.read_text()).get("figures", {})

    def figure(self, name: str, measure: Callable[[], dict[str, Any]]) -> None:
        if name not in self.args.only:
            return
        print(f"\n== {name} ==", flush=True)
        started = time.perf_counter()
        try:
            result = measure()
        except Exception as error:  # noqa: BLE001 - one failed figure must not lose the others
            traceback.print_exc()
            result = {"error": " ".join(str(error).split())[:500]}
            self.failed.append(name)
        result["measured_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        result["run_started_at"] = self.doc["date"]  # ratios across figures only within one run (bench.report)
        result["wall_s"] = round(time.perf_counter() - started, 1)
        result["load_average_1m_after"] = round(os.getloadavg()[0], 2)
        self.doc["figures"][name] = result
        self.save()

    def save(self) -> None:
        self.doc["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
        write_results(self.doc, self.args.out)


def ceiling(bootstrap: str, dataset, runs: int) -> dict[str, Any]:
    from bench.dataset import consume_all
    from bench.measure import median_runs

    raw = []
    for _ in range(runs):
        rows, seconds = consume_all(bootstrap, dataset.topic, dataset.partitions, dataset.records)
        raw.append({"rows": rows, "seconds": round(seconds, 2), "rows_per_s": round(rows / seconds)})
    return {"topic": dataset.topic, "records": dataset.records, "confluent_kafka_assign": median_runs(raw)}


def state_scale(spark, workdir: Path, small: int, large: int, repeats: int) -> dict[str, Any]:
    from bench import state_scale as scale

    touched = min(10_000, small)
    low = scale.run(spark, workdir / "state-scale", small, touched, repeats)
    high = scale.run(spark, workdir / "state-scale", large, touched, repeats)
    # updateStateByKey's semantics visit the whole state every batch: the same runs, for the cost next to it.
    every_low = scale.run(spark, workdir / "state-scale", small, touched, repeats, every_batch=True)
    every_high = scale.run(spark, workdir / "state-scale", large, touched, repeats, every_batch=True)
    return {
        "touched": touched, "small": low, "large": high, "ratio": round(high["median_ms"] / low["median_ms"], 3),
        "update_state_by_key": {
            "small": every_low, "large": every_high, "ratio": round(every_high["median_ms"] / every_low["median_ms"], 3),
        },
    }


def api(args: argparse.Namespace) -> dict[str, Any]:
    import statistics

    from bench import api_latency

    rates = [float(r) for r in args.api_rates.split(",") if r]
    # Per size: one cold rebuild, then --runs periods of load at each rate, then two restarts.
    result = api_latency.run(argparse.Namespace(
        sizes=[args.api_sessions, args.api_sessions_large], rates=rates, duration=args.api_seconds, connections=32, runs=args.runs,
    ))
    sizes = {}
    for size, figures in result["sizes"].items():
        at = {}
        for rate, runs in figures["loads"].items():
            at[rate] = {
                "median_p50_ms": statistics.median(r["overall"]["p50_ms"] for r in runs),
                "median_p99_ms": statistics.median(r["overall"]["p99_ms"] for r in runs),
                "median_api_cpu_ms_per_request": statistics.median(r["api_cpu_ms_per_request"] for r in runs),
            }
            print(f"  API {int(size):,} users at {rate} req/s: p50 {at[rate]['median_p50_ms']} ms, p99 {at[rate]['median_p99_ms']} ms", flush=True)
        sizes[size] = {**figures, "at_rate": at}
    return {"seconds_per_run": args.api_seconds, "rates": rates, "sizes": sizes}


def cluster(events: int) -> dict[str, Any]:
    if importlib.util.find_spec("bench.cluster_throughput") is None:
        return {"skipped": "bench/cluster_throughput.py (run(events, seed) -> dict) is not in this checkout yet"}
    from bench import cluster_throughput

    return cluster_throughput.run(events, SEED)


def validation_figure(args: argparse.Namespace) -> dict[str, Any]:
    from bench import validation

    return validation.measure(args.validation_records, args.runs)


def warm_up(spark, settings, workdir: Path, events: Dataset, points: Dataset) -> float:
    """One discarded run of each measured Spark query over the measured datasets themselves:
    JIT compilation, the first Python workers and the first full read of each topic are paid
    here, not by the first round of whichever figure runs first. (A warm-up of 20,000 records
    left each query's first round 10-20 % slower than its later ones: docs/profile.md.)"""
    from bench.anomalies_throughput import anomalies_job_once
    from bench.sessions_throughput import native_once, sessions_job_once, stateless_once

    started = time.perf_counter()
    stateless_once(spark, settings, events, workdir / "warm-up-stateless")
    sessions_job_once(spark, settings, events, workdir / "warm-up-sessions")
    native_once(spark, settings, events, workdir / "warm-up-native")
    anomalies_job_once(spark, settings, points, workdir / "warm-up-anomalies")
    seconds = time.perf_counter() - started
    print(f"warm-up: the datasets through each Spark query once in {seconds:.0f}s (discarded)", flush=True)
    return round(seconds, 1)


def _measure(args: argparse.Namespace, workdir: Path) -> Run:
    """The figures that share one embedded broker and one SparkSession."""
    from bench import anomalies_throughput, latency, production, sessions_throughput, transactions_cost, windows_throughput
    from bench.dataset import produce_metrics, produce_user_events
    from bench.measure import connector_description, driver_heap_description
    from bench.phases import event_log_conf
    from streamstate_jobs.spark import build_spark
    from streamstate_pipeline.settings import Settings
    from streamstate_stack.launcher import EmbeddedStack

    settings = Settings(checkpoint_root=str(workdir / "checkpoints"))
    run = Run(args, settings)
    needs_spark = {"sessions", "anomalies", "latency", "state", "production", "transactions", "windows"} & set(args.only)
    if needs_spark:
        from streamstate_jobs.runner import fork_python_processes

        # The queries' Python processes (the daemon, each query start's pre-init process) come
        # forked, as in a job's process: before the broker's and the producers' threads start.
        forked = fork_python_processes(settings)
        run.doc["setup"]["python_processes"] = "forked from the benchmark's process" if forked else "new interpreters"
    # The Kafka datasets and the warm-up of the jobs' queries serve these figures only.
    needs_datasets = {"ceiling", "sessions", "anomalies", "latency", "production", "transactions"} & set(args.only)
    with EmbeddedStack(settings=settings, workdir=workdir, quiet=True) as stack:
        # Apache Kafka (KRaft); the settings get Spark's connector and S3A jars, so the one
        # SparkSession serves every figure, the production one's s3a:// checkpoints included.
        bootstrap = stack.start_broker()
        settings = stack.settings
        if needs_datasets:
            print(f"broker at {bootstrap}; producing {args.events:,} user events over {args.users:,} users "
                  f"and {args.metrics:,} metric points over {args.series:,} series (seed {SEED}) ...", flush=True)
            started = time.perf_counter()
            events = produce_user_events(bootstrap, "bench-user-events", args.events, args.users, SEED)
            points = produce_metrics(bootstrap, "bench-metrics", args.metrics, args.series, SEED)
            run.doc["setup"]["dataset_s"] = round(time.perf_counter() - started, 1)
        run.figure("ceiling", lambda: ceiling(bootstrap, events, args.runs))
        # Python workers connect back to the JVM within a timeout (15 s by default) that a machine
        # loaded by other engineers' Spark runs exceeded; a slow start must not fail a figure.
        # The event log (a scratch file under workdir) gives each latency batch's stage and task
        # times, for its phases (bench.phases).
        spark = build_spark(settings, "bench", spark__ui__enabled="false", spark__python__authenticate__socketTimeout="120s",
                            **event_log_conf(workdir / "event-log")) if needs_spark else None
        try:
            if spark is not None:
                run.doc["setup"]["kafka_connector"] = connector_description(spark)
                run.doc["setup"]["driver_heap"] = driver_heap_description(spark)
            if spark is not None and needs_datasets:
                run.doc["setup"]["warm_up_s"] = warm_up(spark, settings, workdir, events, points)
            run.figure("sessions", lambda: sessions_throughput.measure(spark, settings, events, workdir, args.runs))
            run.figure("anomalies", lambda: anomalies_throughput.measure(spark, settings, points, workdir, args.runs))
            run.figure("latency", lambda: latency.measure_with_floors(
                spark, settings, workdir, args.runs, args.latency_rate, args.latency_seconds, args.latency_lead_in))
            run.figure("state", lambda: state_scale(spark, workdir, args.state_small, args.state_large, args.runs))
            run.figure("production", lambda: production.measure(spark, settings, workdir, args, SEED, PRODUCTION_WARM_UP_EVENTS))
            run.figure("transactions", lambda: transactions_cost.measure(
                spark, settings, events, workdir, args.runs, args.latency_rate, args.latency_seconds, args.latency_lead_in))
            run.figure("windows", lambda: windows_throughput.measure(spark, workdir, args.window_events, args.window_keys, args.runs, SEED))
        finally:
            if spark is not None:
                # Spark's pool of Kafka producers outlives the session in this process's JVM: once
                # the broker stops, each producer warned of a refused connection every second
                # through the API figure (about 300 lines a run).
                spark.sparkContext.setLogLevel("ERROR")
                spark.stop()
    return run


def main(argv: list[str] | None = None) -> int:
    from bench.measure import stop_on_signals, wait_until_quiet

    bench_started = time.perf_counter()
    args = parse_args(argv)
    stop_on_signals()
    quiet_after_s = None
    if not args.start_busy:
        print(f"waiting for a quiet machine (cores under 10 % busy for {START_QUIET_FOR_S:.0f} s in a row; "
              f"at most {START_QUIET_TIMEOUT_S / 60:.0f} min, --start-busy skips it) ...", flush=True)
        quiet_after_s = wait_until_quiet(quiet_for_s=START_QUIET_FOR_S, timeout_s=START_QUIET_TIMEOUT_S)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # The broker's data and the checkpoints (0.4-1.7 GB a run) are scratch, removed however the run ends.
    workdir = Path(tempfile.mkdtemp(prefix="bench-"))
    try:
        run = _measure(args, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    # These two start their own processes (API + load generator, a Spark cluster).
    run.figure("api", lambda: api(args))
    run.figure("cluster", lambda: cluster(args.events))
    run.figure("validation", lambda: validation_figure(args))  # in-process, no broker or Spark
    from bench.report import markdown, update_readme

    run.doc["setup"]["quiet_after_s"] = None if quiet_after_s is None else round(quiet_after_s, 1)
    run.doc["setup"]["bench_wall_s"] = round(time.perf_counter() - bench_started, 1)
    run.doc["setup"]["bench_partial"] = args.only if run.partial else None
    run.save()
    table = markdown(run.doc)
    print("\n" + table, flush=True)
    print(f"written: {args.out} and {args.out.with_suffix('.md')}; the whole run took {run.doc['setup']['bench_wall_s'] / 60:.1f} min", flush=True)
    if args.out == HERE / "results.json" and not run.failed and update_readme(table):
        print("README.md: Benchmarks table updated", flush=True)
    if run.failed:
        print(f"failed figures: {', '.join(run.failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    if sys.flags.hash_randomization and "PYTHONHASHSEED" not in os.environ:
        # Spark's Python workers hash with seed 0: so must the process they are forked from.
        os.execve(sys.executable, [sys.executable, "-m", "bench", *sys.argv[1:]], {**os.environ, "PYTHONHASHSEED": "0"})
    try:
        sys.exit(main())
    except KeyboardInterrupt as interrupt:  # the broker and the SparkSession were stopped on the way out
        print(f"bench: interrupted{f' ({interrupt})' if str(interrupt) else ''}; the figures measured before it are in "
              "the --out file", file=sys.stderr)
        sys.exit(130)
