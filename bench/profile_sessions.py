"""Where the sessions job spends its time: Spark's own metrics plus py-spy on the Python workers.

    .venv/bin/python -m bench.profile_sessions [--events 200000] [--users 20000] [--out bench/runs/profile.json]

Produces the benchmark's fixed-seed user events to Apache Kafka (KRaft, started by the stack),
runs the sessions job in-process (one ``availableNow`` batch) while ``py-spy record --subprocesses``
samples this process and every Python process under it (Spark's Python workers: the contract
validation, the stateful processor; the Kafka read itself runs in the JVM, in Spark's built-in
connector), then prints and writes:

- the batch's phase durations and the state operator's metrics (Spark's view);
- the Python functions with the most samples, own and inclusive (py-spy's view).

docs/profile.md is written from this output.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent


def summarize(collapsed: Path, top: int = 25) -> dict:
    """Own and inclusive sample counts per function from py-spy's collapsed stacks."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    processes: Counter[str] = Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        frames = stack.split(";")
        total += count
        processes[frames[0]] += count
        own[frames[-1]] += count
        for frame in set(frames[1:]):
            inclusive[frame] += count

    def share(counter: Counter[str]) -> list[dict]:
        return [{"frame": f, "samples": n, "share": round(n / total, 3)} for f, n in counter.most_common(top)]

    return {"samples": total, "by_process": share(processes), "own": share(own), "inclusive": share(inclusive)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--users", type=int, default=20_000)
    parser.add_argument("--rate", type=int, default=50, help="py-spy samples per second")
    parser.add_argument("--out", type=Path, default=HERE / "runs" / "profile.json")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    workdir = Path(tempfile.mkdtemp(prefix="bench-profile-"))
    # workdir holds the broker's data and the checkpoints (0.4-1.7 GB), scratch; the stacks go beside --out.
    args.out.parent.mkdir(parents=True, exist_ok=True)
    collapsed = args.out.with_suffix(".collapsed")
    collapsed.unlink(missing_ok=True)
    try:
        figures, errors = _profiled_run(args, py_spy, workdir, collapsed)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if not collapsed.exists():
        raise SystemExit(f"py-spy wrote nothing: {errors[-1000:]}")
    result = {"events": args.events, "users": args.users, "spark": figures, "py_spy": summarize(collapsed), "collapsed_stacks": str(collapsed)}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result["spark"][k] for k in ("rows_per_s", "seconds", "source_rows_read", "duration_ms")}, indent=2))
    print(json.dumps(result["spark"]["state_operators"], indent=2)[:3000])
    for view in ("by_process", "own", "inclusive"):
        print(f"\n-- py-spy {view} --")
        for row in result["py_spy"][view]:
            print(f"{row['share']:6.1%} {row['frame'][:160]}")
    print(f"\nwritten {args.out}")


def _profiled_run(args: argparse.Namespace, py_spy: str, workdir: Path, collapsed: Path) -> tuple[dict, str]:
    from bench.__main__ import SEED
    from bench.dataset import produce_user_events
    from bench.sessions_throughput import sessions_job_once
    from streamstate_jobs.spark import build_spark
    from streamstate_pipeline.settings import Settings
    from streamstate_stack.launcher import EmbeddedStack

    with EmbeddedStack(settings=Settings(checkpoint_root=str(workdir / "cp")), workdir=workdir, quiet=True) as stack:
        stack.start_broker()
        settings = stack.settings
        dataset = produce_user_events(settings.bootstrap_servers, "profile-user-events", args.events, args.users, SEED)
        spark = build_spark(settings, "bench-profile", spark__ui__enabled="false")
        recorder = subprocess.Popen(
            [py_spy, "record", "--pid", str(os.getpid()), "--subprocesses", "--idle", "--rate", str(args.rate),
             "--format", "raw", "--output", str(collapsed)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        try:
            time.sleep(1)
            figures = sessions_job_once(spark, settings, dataset, workdir / "checkpoint")
        finally:
            recorder.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
            _, errors = recorder.communicate(timeout=120)
            spark.stop()
    return figures, errors


if __name__ == "__main__":
    main()
