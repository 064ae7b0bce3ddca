"""A long run of the anomalies job at a steady rate: latency and resources, minute by minute.

    .venv/bin/python -m bench.soak [--minutes 60] [--rate 5000] [--socket-budget N] [--out bench/results/soak.json]

``make soak`` runs it for an hour. One Apache Kafka broker, the anomalies job as a process
as ``make run`` starts it (the latency figure's 250 ms trigger), and the project's producer
sending wall-clock metric points at ``--rate`` for the whole run. Every minute it prints and
records: the alerts of the points produced in the minute before (count, p50, p99), the
batches committed, and what the job's Spark JVM (driver and executor in one, local mode),
its Python workers and the job's own Python process hold: open file descriptors, sockets
(and among them connections their other end closed), threads, RSS; and how many times the
job moved to a new JVM (``streamstate_jobs.jvm_recycle``).

Nothing is asserted: the end of the run says how each resource moved between the first
and the last quarter of the run (per hour), which is where a leak shows. Spark 4.2.0's
Python ``transformWithState`` keeps one connection open per stateful task (SPARK-58932,
fixed in 4.2.1, whose Kafka connector is not on Maven Central): ``--socket-budget`` sets
how many the job lets its JVM hold before it moves to a new one.
"""

from __future__ import annotations

import argparse
import atexit
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.api_latency import percentiles
from streamstate_jobs.jvm_recycle import abandoned_sockets, descendants, fd_targets, java_descendants

HERE = Path(__file__).resolve().parent
SAMPLE_S = 60.0


def _status(pid: int) -> dict[str, int]:
    fields = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            name, _, value = line.partition(":")
            if name in ("VmRSS", "Threads"):
                fields[name] = int(value.split()[0])
    except OSError:
        pass
    return fields


def last_batch(commits: Path) -> int:
    """The last batch in a commit log (Spark keeps only the last 100 files), -1 for none."""
    names = [p.name for p in commits.iterdir()] if commits.is_dir() else []
    return max((int(n) for n in names if n.isdigit()), default=-1)


def resources(job_pid: int) -> dict[str, Any]:
    """What the job process, its Spark JVM and the JVM's Python workers hold right now."""
    jvm_pid = next(iter(java_descendants(job_pid)), None)
    jvm = _status(jvm_pid) if jvm_pid else {}
    targets = fd_targets(jvm_pid) if jvm_pid else []
    workers = [_status(pid) for pid in descendants(jvm_pid)] if jvm_pid else []
    job = _status(job_pid)
    return {
        "jvm_pid": jvm_pid,
        "jvm_fds": len(targets),
        "jvm_sockets": sum(target.startswith("socket:") for target in targets),
        "jvm_abandoned_sockets": abandoned_sockets(jvm_pid) if jvm_pid else 0,
        "jvm_threads": jvm.get("Threads", 0),
        "jvm_rss_mb": round(jvm.get("VmRSS", 0) / 1024, 1),
        "python_workers": len(workers),
        "python_workers_rss_mb": round(sum(w.get("VmRSS", 0) for w in workers) / 1024, 1),
        "job_python_rss_mb": round(job.get("VmRSS", 0) / 1024, 1),
        "job_python_threads": job.get("Threads", 0),
    }


def per_hour_drift(minutes: list[dict[str, Any]], key: str) -> float | None:
    """How ``key`` moved from the run's first quarter to its last, per hour (medians of each quarter)."""
    if len(minutes) < 8:
        return None
    quarter = len(minutes) // 4
    first = statistics.median(m[key] for m in minutes[:quarter])
    last = statistics.median(m[key] for m in minutes[-quarter:])
    hours_apart = (len(minutes) - quarter) / 60
    return round((last - first) / hours_apart, 1)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=60.0, help="minutes of load (default 60)")
    parser.add_argument("--rate", type=int, default=5_000, help="metric points/s (default 5,000)")
    parser.add_argument("--trigger", default="250 milliseconds", help="the job's processing-time trigger")
    parser.add_argument("--socket-budget", type=int, help="the job's STREAMSTATE_JOB_JVM_SOCKET_BUDGET (default: the setting's)")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "soak.json", help="JSON results, written every minute")
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.rate <= 0:
        parser.error("--minutes and --rate must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from bench.measure import bounded_input_topic, fresh_outputs, stop_on_signals

    stop_on_signals()  # an hour's run started with `&` stops on kill -INT, its producer and job with it
    from bench.latency import SERIES, AlertClock, producer_command
    from streamstate_pipeline.settings import Settings
    from streamstate_stack.launcher import EmbeddedStack
    from streamstate_pipeline.topics import create_topics

    workdir = Path(tempfile.mkdtemp(prefix="soak-"))
    atexit.register(shutil.rmtree, workdir, True)  # the broker's data and the checkpoints: scratch
    args.out.parent.mkdir(parents=True, exist_ok=True)
    job_log = args.out.with_suffix(".job.log")
    doc: dict[str, Any] = {
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "rate_per_s": args.rate, "trigger": args.trigger, "series": SERIES, "minutes": [],
    }
    with EmbeddedStack(settings=Settings(checkpoint_root=str(workdir / "checkpoints")), workdir=workdir, quiet=True) as stack:
        bootstrap = stack.start_broker()
        input_topic = f"soak-metrics-{int(time.time())}"
        create_topics(stack.settings.kafka, [bounded_input_topic(stack.settings, input_topic, 4)])
        settings = fresh_outputs(stack.settings.model_copy(update={
            "topic_metrics": input_topic, "trigger_interval": args.trigger, "anomalies_metrics_port": 0,
            **({"job_jvm_socket_budget": args.socket_budget} if args.socket_budget is not None else {}),
        }), "soak")
        doc["jvm_socket_budget"] = settings.job_jvm_socket_budget
        clock = AlertClock(bootstrap, settings.topic_alerts, 2)
        clock.start()
        job = stack.sibling(settings, workdir / "job").start_job("anomalies")
        commits = Path(settings.checkpoint("anomalies")) / "commits"
        producer = subprocess.Popen(producer_command(bootstrap, input_topic, args.rate, args.minutes * 60, seed=7),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        print(f"soak: {args.minutes:g} min at {args.rate:,} points/s, the anomalies job (pid {job.pid}, log {job.log_path}, "
              f"copied to {job_log} at the end); one line a minute", flush=True)
        try:
            started = time.time()
            for index in range(int(args.minutes)):
                window_start = int((started + index * SAMPLE_S) * 1000)
                time.sleep(max(0.0, started + (index + 1) * SAMPLE_S - time.time()))
                if not job.alive():
                    raise RuntimeError(f"the anomalies job exited after {index} min:\n{job.tail(40)}")
                # The points of the minute before last: their alerts have had a minute to arrive.
                latencies = clock.between(window_start - int(SAMPLE_S * 1000), window_start) if index else []
                minute = {
                    "minute": index + 1,
                    **{f"alerts_{k}": v for k, v in percentiles(latencies).items()},
                    "batches": last_batch(commits) + 1,
                    "new_jvms": job.log_path.read_text(errors="replace").count("moving to a new JVM"),
                    **resources(job.pid),
                }
                doc["minutes"].append(minute)
                print(
                    f"  min {minute['minute']:>3}: p50 {minute.get('alerts_p50_ms', '-')} ms, p99 {minute.get('alerts_p99_ms', '-')} ms, "
                    f"{minute['batches']} batches; JVM {minute['jvm_fds']} fds, {minute['jvm_sockets']} sockets "
                    f"({minute['jvm_abandoned_sockets']} abandoned), {minute['jvm_threads']} threads, {minute['jvm_rss_mb']:.0f} MB; "
                    f"{minute['python_workers']} Python workers {minute['python_workers_rss_mb']:.0f} MB; "
                    f"{minute['new_jvms']} new JVMs",
                    flush=True,
                )
                args.out.write_text(json.dumps(doc, indent=1) + "\n")
        finally:
            producer.terminate()
            producer.wait(30)
            job.stop()
            clock.stopping.set()
            clock.join(10)
            shutil.copyfile(job.log_path, job_log)  # after the clean-up: a failed copy leaves nothing running
    keys = ("jvm_fds", "jvm_sockets", "jvm_abandoned_sockets", "jvm_threads", "jvm_rss_mb", "python_workers",
            "python_workers_rss_mb", "job_python_rss_mb", "job_python_threads")
    doc["drift_per_hour"] = {key: per_hour_drift(doc["minutes"], key) for key in keys}
    measured = [m for m in doc["minutes"] if "alerts_p99_ms" in m]
    if measured:
        doc["p99_ms_median_of_minutes"] = statistics.median(m["alerts_p99_ms"] for m in measured)
        doc["p99_ms_worst_minute"] = max(m["alerts_p99_ms"] for m in measured)
    doc["ended"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print("drift from the first quarter of the run to the last, per hour: "
          + ", ".join(f"{k} {v:+g}" for k, v in doc["drift_per_hour"].items() if v is not None), flush=True)
    print(f"written: {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
