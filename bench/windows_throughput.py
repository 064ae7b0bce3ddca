"""Window throughput: ``reduce_by_key_and_window`` against Spark's own ``groupBy(window(...), key).agg``
on the same input, in the same SparkSession.

Both read the same JSON files (``events`` records over ``keys`` keys, event times over an hour,
slightly out of order) with the same one-minute watermark, and sum an integer value per key
over 10-minute windows sliding every minute, in append mode: ``reduce_by_key_and_window``
with ``+`` and its inverse ``-`` (the state engine, incremental per slide), Spark with
``F.sum`` (one state row per window and key, updated by each of the ten windows a record
falls in). Each run is fresh (new checkpoint) and ``availableNow``: the data batch, then the
no-data batch that closes the windows the watermark passed; its time is the summed
``triggerExecution`` of its batches. The sink counts the windows each emitted, which must be
equal. The figure is the median of ``runs`` runs each, after one small discarded run each.

    .venv/bin/python -m bench --only windows [--window-events 200000] [--runs 3]
"""

from __future__ import annotations

import json
import operator
import random
import statistics
from pathlib import Path
from typing import Any, Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streamstate.state import reduce_by_key_and_window

WINDOW, SLIDE, WATERMARK = "10 minutes", "1 minute", "1 minute"
SCHEMA = "key STRING, v LONG, ts LONG"
SPAN_MS = 60 * 60_000
FILES = 4


def write_input(folder: Path, events: int, keys: int, seed: int) -> Path:
    """``events`` records in ``FILES`` JSON files, in event-time order but for a few seconds of jitter."""
    folder.mkdir(parents=True)
    rng = random.Random(seed)
    per_file = -(-events // FILES)
    for index in range(FILES):
        first = index * per_file
        lines = []
        for n in range(first, min(events, first + per_file)):
            ts = n * SPAN_MS // events + rng.randrange(5_000)
            lines.append(json.dumps({"key": f"k{rng.randrange(keys)}", "v": rng.randrange(100), "ts": ts}))
        (folder / f"part-{index}.json").write_text("\n".join(lines) + "\n")
    return folder


def _events(spark: SparkSession, folder: Path) -> DataFrame:
    return (
        spark.readStream.schema(SCHEMA).json(str(folder))
        .withColumn("event_time", F.timestamp_millis("ts")).withWatermark("event_time", WATERMARK)
    )


def streamstate_windows(spark: SparkSession, folder: Path) -> tuple[DataFrame, Callable[[DataFrame], int]]:
    result = reduce_by_key_and_window(_events(spark, folder), "key", "v", operator.add, operator.sub, WINDOW, SLIDE, event_time="event_time")
    return result.all, lambda rows: rows.where(F.col("kind") == "output").count()


def native_windows(spark: SparkSession, folder: Path) -> tuple[DataFrame, Callable[[DataFrame], int]]:
    sums = _events(spark, folder).groupBy(F.window("event_time", WINDOW, SLIDE), "key").agg(F.sum("v").alias("v"))
    return sums, lambda rows: rows.count()


def run_once(spark: SparkSession, build, folder: Path, checkpoint: Path, events: int) -> dict[str, Any]:
    """One fresh ``availableNow`` run: rows/s over its batches' summed ``triggerExecution``, windows emitted."""
    rows, count = build(spark, folder)
    emitted: list[int] = []
    query = (
        rows.writeStream.outputMode("append").foreachBatch(lambda batch, _id: emitted.append(count(batch)))
        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"window query failed: {query.exception()}")
    seconds = sum(p["durationMs"].get("triggerExecution", 0) for p in query.recentProgress) / 1000
    return {"rows": events, "seconds": round(seconds, 2), "rows_per_s": round(events / seconds), "windows": sum(emitted), "batches": len(emitted)}


def measure(spark: SparkSession, workdir: Path, events: int, keys: int, runs: int, seed: int) -> dict[str, Any]:
    """Median events/s of both queries over ``runs`` runs each, their ratio, and the windows each emitted."""
    folder = write_input(workdir / "windows-input", events, keys, seed)
    warm_up_events = max(events // 20, 1_000)
    warm_up = write_input(workdir / "windows-warm-up", warm_up_events, keys, seed + 1)
    figures: dict[str, Any] = {"dataset": {"records": events, "keys": keys, "window": WINDOW, "slide": SLIDE, "watermark": WATERMARK}}
    for name, build in (("reduce_by_key_and_window", streamstate_windows), ("native_group_by_window", native_windows)):
        run_once(spark, build, warm_up, workdir / f"windows-{name}-warm-up", warm_up_events)
        results = []
        for index in range(runs):
            result = run_once(spark, build, folder, workdir / f"windows-{name}-{index}", events)
            print(f"  {name} run {index + 1}/{runs}: {events:,} events in {result['seconds']}s = {result['rows_per_s']:,}/s, "
                  f"{result['windows']:,} windows", flush=True)
            results.append(result)
        figures[name] = {"median_rows_per_s": statistics.median(r["rows_per_s"] for r in results), "runs": results}
    ours, theirs = figures["reduce_by_key_and_window"], figures["native_group_by_window"]
    figures["same_windows"] = {r["windows"] for r in ours["runs"]} == {r["windows"] for r in theirs["runs"]}
    figures["ratio_vs_native"] = round(ours["median_rows_per_s"] / theirs["median_rows_per_s"], 2)
    return figures
