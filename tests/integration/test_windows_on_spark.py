"""The five window operations as real streaming queries, against the in-memory tester (row for
row: outputs, snapshots, dead letters) and the plain-Python reference (the windows).

One query over a JSON file source runs every event-time operation: each step writes one file
and runs the query from its checkpoint with ``availableNow`` (the step's batch, then the
no-data batch that closes the windows its watermark passed). The processing-time query runs
one batch per step (``trigger(once=True)``: on processing time ``availableNow`` never ends)
and the tester is run at the batch times Spark used, read from the offset log.
"""

from __future__ import annotations

import json
import operator
import random
import threading
import time
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from streamstate.state import (
    WindowResult,
    count_by_value_and_window,
    count_by_window,
    reduce_by_key_and_window,
    reduce_by_window,
    window,
)
from streamstate.state.tester import by_key
from streamstate.state.window_tester import WindowTester
from streamstate.state.windows import WindowOp
from library.tests.window_reference import Record, ReferenceWindows

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

SECOND = 1000
BASE = 1_800_000_000_000  # event times: a multiple of every window and slide below
DELAY = 2 * SECOND
SCHEMA = "key STRING, n LONG, ts LONG"


def add_unless_13(a: int, b: int) -> int:
    if b == 13:
        raise ValueError("13 is refused")
    return a + b


def event_batches() -> list[list[dict]]:
    """Out of order within each batch; batch 1 has records behind the watermark (late), batch 2
    a value the reduce function refuses; the last batch moves the watermark past every window."""
    rng = random.Random(7)

    def records(count: int, low_s: int, high_s: int) -> list[dict]:
        return [
            {"key": rng.choice("abc"), "n": rng.randrange(1, 10), "ts": BASE + rng.randrange(low_s * SECOND, high_s * SECOND)}
            for _ in range(count)
        ]

    late = [{"key": "a", "n": 5, "ts": BASE + 1 * SECOND}, {"key": "b", "n": 6, "ts": BASE + 2 * SECOND}]
    # After a value of its pane, so the 13 meets the function when it arrives (a pane's first value is stored as it is).
    refused = [{"key": "c", "n": 4, "ts": BASE + 27 * SECOND}, {"key": "c", "n": 13, "ts": BASE + 27 * SECOND + 1}]
    return [records(20, 0, 10), records(15, 8, 20) + late, records(10, 20, 30) + refused, records(2, 60, 61)]


# name -> (the Spark call on the parsed input, the same operation for the tester, tester record of a row, reference)
def event_time_operations():
    keyed = lambda r: (r["key"], r["n"], r["ts"])  # noqa: E731
    return {
        "reduce_by_key_and_window": (
            lambda df: reduce_by_key_and_window(df, "key", "n", add_unless_13, operator.sub, "10 seconds", "4 seconds", event_time="event_time"),
            WindowOp.reduce_by_key_and_window(add_unless_13, operator.sub, "10 seconds", "4 seconds"),
            keyed, lambda: ReferenceWindows(10 * SECOND, 4 * SECOND, operator.add, watermark_delay_ms=DELAY),
        ),
        "reduce_by_window": (
            lambda df: reduce_by_window(df, "n", max, None, "6 seconds", "2 seconds", event_time="event_time", state_type=int),
            WindowOp.reduce_by_window(max, None, "6 seconds", "2 seconds", state_type=int),
            lambda r: (r["n"], r["ts"]), lambda: ReferenceWindows(6 * SECOND, 2 * SECOND, max, watermark_delay_ms=DELAY),
        ),
        "count_by_window": (
            lambda df: count_by_window(df, "6 seconds", "2 seconds", event_time="event_time"),
            WindowOp.count_by_window("6 seconds", "2 seconds"),
            lambda r: (r, r["ts"]), lambda: ReferenceWindows(6 * SECOND, 2 * SECOND, operator.add, watermark_delay_ms=DELAY),
        ),
        "count_by_value_and_window": (
            lambda df: count_by_value_and_window(df, "key", "10 seconds", "5 seconds", event_time="event_time", output_mode="update"),
            WindowOp.count_by_value_and_window("10 seconds", "5 seconds", output_mode="update"),
            lambda r: (r["key"], r["ts"]),
            lambda: ReferenceWindows(10 * SECOND, 5 * SECOND, operator.add, "update", watermark_delay_ms=DELAY),
        ),
        "window": (
            lambda df: window(df, "6 seconds", "3 seconds", event_time="event_time"),
            WindowOp.window("6 seconds", "3 seconds"),
            lambda r: (r, r["ts"]), lambda: ReferenceWindows(6 * SECOND, 3 * SECOND, operator.add, watermark_delay_ms=DELAY),
        ),
    }


def reference_record(name: str, record: dict) -> Record:
    if name == "reduce_by_key_and_window":
        return Record(record["key"], record["n"], record["ts"])
    if name == "reduce_by_window":
        return Record("", record["n"], record["ts"])
    if name == "count_by_value_and_window":
        return Record(record["key"], 1, record["ts"])
    if name == "window":
        return Record("", [record["n"]], record["ts"])
    return Record("", 1, record["ts"])


class StepRunner:
    """Runs one query step by step from its checkpoint; ``steps[i]`` holds step i's rows."""

    def __init__(self, stream, checkpoint: Path, trigger: dict):
        self.stream, self.checkpoint, self.trigger = stream, checkpoint, trigger
        self.steps: list[list] = []
        self._lock = threading.Lock()
        self._collected: list = []

    def _collect(self, batch, batch_id: int) -> None:
        batch.persist()
        rows = [tuple(row) for row in batch.select("operator", "kind", "key", "payload", "reason").collect()]
        decoded = self.decode(batch)
        batch.unpersist()
        with self._lock:
            self._collected.append((batch_id, rows, decoded))

    def decode(self, batch) -> list:
        return []

    def step(self) -> None:
        query = self.stream.writeStream.foreachBatch(self._collect).option("checkpointLocation", str(self.checkpoint)).trigger(**self.trigger).start()
        query.awaitTermination(300)
        assert query.exception() is None, query.exception()
        with self._lock:
            self.steps.append(self._collected)
            self._collected = []

    def batch_times(self) -> list[int]:
        offsets = sorted((self.checkpoint / "offsets").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
        return [json.loads(p.read_text().splitlines()[1])["batchTimestampMs"] for p in offsets if p.name.isdigit()]


def union_of(spark, folder: Path, operations: dict, event_time: bool) -> tuple:
    parsed = spark.readStream.schema(SCHEMA).json(str(folder))
    if event_time:
        parsed = parsed.withColumn("event_time", F.timestamp_millis("ts")).withWatermark("event_time", f"{DELAY} milliseconds")
    results = {name: build(parsed) for name, (build, *_) in operations.items()}
    streams = [result.all.withColumn("operator", F.lit(name)) for name, result in results.items()]
    union = streams[0]
    for stream in streams[1:]:
        union = union.unionByName(stream)
    return union, results


def rows_of(step: list, name: str) -> list[tuple]:
    return [row[1:] for _, rows, _ in sorted(step, key=lambda b: b[0]) for row in rows if row[0] == name]


def test_every_window_operation_in_event_time_matches_the_tester_and_the_reference(spark, tmp_path):
    operations = event_time_operations()
    folder = tmp_path / "in"
    folder.mkdir()
    union, results = union_of(spark, folder, operations, event_time=True)

    class Runner(StepRunner):
        def decode(self, batch):
            return {
                name: [tuple(r) for r in result.outputs_of(batch.where(F.col("operator") == name)).collect()]
                for name, result in results.items()
            }

    runner = Runner(union, tmp_path / "checkpoint", {"availableNow": True})
    batches = event_batches()
    for index, batch in enumerate(batches):
        (folder / f"{index:03d}.json").write_text("".join(json.dumps(r) + "\n" for r in batch))
        runner.step()

    for name, (_, op, tester_record, make_reference) in operations.items():
        tester, reference = WindowTester(op, watermark_delay_ms=DELAY), make_reference()
        for index, batch in enumerate(batches):
            on_spark = rows_of(runner.steps[index], name)
            on_tester = tester.run_batch([tester_record(r) for r in batch])
            accepted = [r for r in batch if not (name == "reduce_by_key_and_window" and r["n"] == 13)]  # dead-lettered
            expected, late = reference.batch([reference_record(name, r) for r in accepted])
            got = WindowTester.windows(on_spark)
            if name == "window":  # records: compare their windows and numbers (Spark wrote the record's JSON)
                got = sorted((w.start, w.end, json.loads(w.value)["n"]) for w in got)
                assert got == sorted((s, e, n) for _, s, e, values in expected for n in values), f"{name}: step {index}"
                assert [r[0] for r in on_spark if r[0] != "output"] == [r.kind for r in on_tester if r.kind != "output"]
            else:
                assert by_key(on_spark) == by_key(on_tester), f"{name}: step {index} differs from the tester"
                assert [tuple(w) for w in got] == [(k, s, e, v) for k, s, e, v in expected], f"{name}: step {index}"
            late_letters = [r for r in on_spark if r[0] == "dead_letter" and r[3].startswith("late record")]
            assert len(late_letters) == len(late), f"{name}: step {index}"
        assert_typed_outputs(name, results[name], runner)
    refused = [r for step in runner.steps for r in rows_of(step, "reduce_by_key_and_window") if r[0] == "dead_letter" and "13" in r[3]]
    assert [(r[1], r[3]) for r in refused] == [("c", "ValueError: 13 is refused")]


def assert_typed_outputs(name: str, result: WindowResult, runner: StepRunner) -> None:
    """``outputs_of`` gives each window as columns: its key, ``window`` as timestamps, its value or record."""
    decoded = [row for step in runner.steps for _, _, by_name in step for row in by_name[name]]
    payloads = [json.loads(r[2]) for step in runner.steps for r in rows_of(step, name) if r[0] == "output"]
    assert len(decoded) == len(payloads) > 0
    columns = result.outputs_of(runner.stream.sparkSession.createDataFrame([], "kind STRING, key STRING, payload STRING")).columns
    starts = sorted(int(row[columns.index("window")]["start"].timestamp() * 1000) for row in decoded)
    assert starts == sorted(p["start"] for p in payloads)
    if name == "window":
        assert columns == ["window", "key", "n", "ts", "event_time"]
    elif name == "reduce_by_key_and_window":
        assert columns == ["key", "window", "value"]
        assert sorted(row[2] for row in decoded) == sorted(p["value"] for p in payloads)
    elif name == "count_by_value_and_window":
        assert columns == ["key", "window", "count"]
    else:
        assert columns == ["window", "count" if name == "count_by_window" else "value"]


def test_processing_time_windows_match_the_tester_at_spark_batch_times(spark, tmp_path):
    operations = {
        "reduce_by_key_and_window": (
            lambda df: reduce_by_key_and_window(df, "key", "n", operator.add, operator.sub, "4 seconds", "2 seconds"),
            WindowOp.reduce_by_key_and_window(operator.add, operator.sub, "4 seconds", "2 seconds").on_processing_time(),
        ),
        "count_by_window": (
            lambda df: count_by_window(df, "3 seconds", output_mode="update"),
            WindowOp.count_by_window("3 seconds", output_mode="update").on_processing_time(),
        ),
    }
    folder = tmp_path / "in"
    folder.mkdir()
    union, _ = union_of(spark, folder, operations, event_time=False)
    runner = StepRunner(union, tmp_path / "checkpoint", {"once": True})
    rng = random.Random(3)
    batches = [[{"key": rng.choice("ab"), "n": rng.randrange(1, 5), "ts": 0} for _ in range(6)] for _ in range(3)] + [[], []]
    for index, batch in enumerate(batches):
        (folder / f"{index:03d}.json").write_text("".join(json.dumps(r) + "\n" for r in batch))
        runner.step()
        if not batch:
            time.sleep(4)  # let the open windows end before the next (empty) batch
    times = runner.batch_times()
    assert len(times) == len(batches)
    for name, (_, op) in operations.items():
        tester = WindowTester(op)
        reference = ReferenceWindows(op.step.slides.window_ms, op.step.slides.slide_ms, operator.add, op.step.mode, event_time=False)
        for index, (batch, now) in enumerate(zip(batches, times)):
            as_tester = [(r["key"], r["n"]) for r in batch] if name != "count_by_window" else [(r,) for r in batch]
            on_tester = tester.run_batch(as_tester, processing_time_ms=now)
            on_spark = rows_of(runner.steps[index], name)
            assert by_key(on_spark) == by_key(on_tester), f"{name}: batch {index} differs from the tester"
            as_reference = [Record(r["key"], r["n"]) if name != "count_by_window" else Record("", 1) for r in batch]
            expected, _ = reference.batch(as_reference, processing_time_ms=now)
            assert [tuple(w) for w in WindowTester.windows(on_spark)] == [(k, s, e, v) for k, s, e, v in expected]
    closed = [w for step in runner.steps for w in WindowTester.windows(rows_of(step, "reduce_by_key_and_window"))]
    assert closed, "no processing-time window closed"
