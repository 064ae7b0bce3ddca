"""State scale of ``map_with_state``: does a batch cost the keys it touches, or the keys in state?
And, next to it, of ``update_state_by_key`` (``--every-batch``), which calls every key every batch.

    .venv/bin/python bench/state_scale.py [--large 1000000] [--small 10000] [--touched 10000] [--repeats 3] [--buckets N] [--out PATH]

For each state size (small, then large):

1. a query starts with that many keys as initial state (``StateSpec.initial_state`` on a
   DataFrame; loading runs in the first batch and is timed separately);
2. then ``--repeats`` batches of the SAME input, ``--touched`` records on as many existing keys,
   each arrive as one file of a JSON file source (the source is not what is measured, so the
   simplest deterministic one is used; it costs the same in both runs);
3. the median ``triggerExecution`` time of those batches is the batch time.

Prints both batch times and their ratio (the goal: under 1.5x, since only touched keys cost),
and writes them as JSON. Nothing is asserted: figures depend on the machine. With
``--every-batch`` the same runs use ``update_state_by_key``, whose batch visits and writes out
the whole state (Spark's DStream semantics): its batch time grows with the state, which is
what the figure shows (no goal; Spark documents the same cost).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_OUT = Path(__file__).resolve().parent / "runs" / "state_scale.json"


def count(key, value, state):
    total = state.get_option(0) + value
    state.update(total)
    return None


def add(values, state):
    return (state or 0) + sum(values)


def write_batch(directory: Path, index: int, keys: range) -> None:
    lines = "".join(f'{{"key":"k{k}","n":1}}\n' for k in keys)
    staged = directory.parent / f".batch-{index}.json"
    staged.write_text(lines)
    staged.rename(directory / f"batch-{index:04d}.json")  # atomic: the source never sees half a file


def run(
    spark, workdir: Path, keys_in_state: int, touched: int, repeats: int, every_batch: bool = False, buckets: int | None = None
) -> dict:
    from pyspark.sql import functions as F

    from streamstate.state import StateSpec, map_with_state, update_state_by_key
    from streamstate.state.placement import balanced_labels

    name = f"{'every-batch-' if every_batch else ''}{keys_in_state}"
    source = workdir / f"in-{name}"
    source.mkdir(parents=True)
    initial = spark.range(keys_in_state).select(
        F.concat(F.lit("k"), F.col("id").cast("string")).alias("key"), (F.col("id") % 1000).alias("state")
    )
    df = spark.readStream.schema("key STRING, n INT").option("maxFilesPerTrigger", 1).json(str(source))
    if every_batch:
        result = update_state_by_key(df, key="key", func=add, value="n", initial_state=initial)
    else:
        spec = StateSpec.function(count).initial_state(initial)
        if buckets is not None:  # placed as the jobs place a new checkpoint's buckets
            spec = spec.buckets(buckets, balanced_labels(buckets, int(spark.conf.get("spark.sql.shuffle.partitions"))))
        result = map_with_state(df, key="key", spec=spec, value="n")
    query = (
        result.all.writeStream.format("noop")
        .option("checkpointLocation", str(workdir / f"cp-{name}"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        seen: dict[int, dict] = {}  # batch id -> progress, kept as they come (recentProgress keeps the last 100)
        write_batch(source, 0, range(1))
        started = time.perf_counter()
        _wait_for_batches(query, seen, rows=1, count=1)
        load_s = time.perf_counter() - started
        for index in range(1, repeats + 1):
            write_batch(source, index, range(touched))
            _wait_for_batches(query, seen, rows=touched, count=index)
        progress = [p for _, p in sorted(seen.items()) if p["numInputRows"] == touched]
    finally:
        query.stop()
    batch_ms = [p["durationMs"]["triggerExecution"] for p in progress]
    return {"keys_in_state": keys_in_state, "load_s": round(load_s, 1), "batch_ms": batch_ms, "median_ms": statistics.median(batch_ms)}


def _wait_for_batches(query, seen: dict[int, dict], rows: int, count: int, limit_s: float = 1800) -> None:
    """Wait until ``count`` batches of ``rows`` rows are among the query's progress reports,
    gathered into ``seen`` by batch id. Not processAllAvailable: over every-batch state it never
    returns (each batch asks for another)."""
    deadline = time.monotonic() + limit_s
    while True:
        seen.update((p["batchId"], p) for p in query.recentProgress)
        if sum(p["numInputRows"] == rows for p in seen.values()) >= count:
            return
        if query.exception() is not None:
            raise query.exception()
        if time.monotonic() > deadline:
            raise TimeoutError(f"no batch of {rows} rows within {limit_s} s")
        time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--touched", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--every-batch", action="store_true", help="update_state_by_key instead of map_with_state")
    parser.add_argument("--buckets", type=int, help="state buckets, placed as a job's new checkpoint (default: StateSpec's 64)")
    args = parser.parse_args()
    if args.touched > args.small:
        parser.error("--touched must not exceed --small: the batch touches existing keys")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from streamstate_jobs.spark import build_spark
    from streamstate_pipeline.settings import Settings

    with tempfile.TemporaryDirectory(prefix="state-scale-") as tmp:
        workdir = Path(tmp)
        spark = build_spark(Settings(checkpoint_root=str(workdir / "checkpoints")), app_name="bench-state-scale", spark__ui__enabled="false")
        try:
            small = run(spark, workdir, args.small, args.touched, args.repeats, args.every_batch, args.buckets)
            large = run(spark, workdir, args.large, args.touched, args.repeats, args.every_batch, args.buckets)
        finally:
            spark.stop()
    ratio = large["median_ms"] / small["median_ms"]
    print(f"{'keys in state':>14} {'load s':>8} {'batch ms (median)':>18}  batches ms")
    for row in (small, large):
        print(f"{row['keys_in_state']:>14,} {row['load_s']:>8} {row['median_ms']:>18,.0f}  {row['batch_ms']}")
    # The goal is map_with_state's; update_state_by_key's cost follows the state by definition.
    verdict = "no goal" if args.every_batch else ("goal met: < 1.5x" if ratio < 1.5 else "goal missed: < 1.5x")
    print(f"batch time with {args.large:,} keys vs {args.small:,}, same {args.touched:,}-record batch: {ratio:.2f}x ({verdict})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"small": small, "large": large, "ratio": round(ratio, 3), "touched": args.touched}, indent=2))


if __name__ == "__main__":
    main()
