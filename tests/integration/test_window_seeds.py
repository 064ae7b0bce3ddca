"""The seeds' window examples (examples/windowed.py) on a real streaming query fed from the
embedded broker, compared with the window tester running the same operations over the same
lines, and with the plain-Python reference's windows."""

from __future__ import annotations

import json
import random

import pytest
from pyspark.sql import functions as F

from examples import windowed
from examples.runner import read_json_topic
from streamstate.state.tester import by_key
from streamstate.state.window_tester import WindowTester
from streamstate.state.windows import Duration, WindowOp
from tests.state_queries import RowCollector, produce_json
from library.tests.window_reference import Record, ReferenceWindows

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

SECOND = 1000
BASE = 1_800_000_000_000
DELAY = 10 * SECOND
VOCABULARY = ["spark", "kafka", "state", "window", "slide"]


def line_batches() -> list[list[dict]]:
    """Two batches of lines over three minutes of event time, out of order within each."""
    rng = random.Random(11)

    def lines(count: int, start_s: int, span_s: int) -> list[dict]:
        def text() -> str:
            return " ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(1, 4)))

        return [{"line": text(), "ts": BASE + rng.randrange(start_s * SECOND, (start_s + span_s) * SECOND)} for _ in range(count)]

    return [lines(40, 0, 90), lines(30, 80, 100)]


def seconds(duration: Duration) -> int:
    return int(str(duration).split()[0]) * SECOND


# name -> (the example's function over lines or words, its operation for the tester, records per line, reference)
SEEDS = {
    "windowed_word_counts": (
        lambda lines: windowed.windowed_word_counts(windowed.words(lines)),
        WindowOp.reduce_by_key_and_window(windowed.add, windowed.subtract, windowed.SIX_BATCHES, windowed.TWO_BATCHES),
        lambda line: [(word, 1, line["ts"]) for word in line["line"].split()],
        lambda: ReferenceWindows(seconds(windowed.SIX_BATCHES), seconds(windowed.TWO_BATCHES), windowed.add, watermark_delay_ms=DELAY),
    ),
    "word_frequencies": (
        lambda lines: windowed.word_frequencies(windowed.words(lines)),
        WindowOp.count_by_value_and_window(windowed.SIX_BATCHES, windowed.TWO_BATCHES),
        lambda line: [(word, line["ts"]) for word in line["line"].split()],
        lambda: ReferenceWindows(seconds(windowed.SIX_BATCHES), seconds(windowed.TWO_BATCHES), windowed.add, watermark_delay_ms=DELAY),
    ),
    "line_counts": (
        windowed.line_counts,
        WindowOp.count_by_window(windowed.THREE_BATCHES, windowed.TWO_BATCHES),
        lambda line: [(line, line["ts"])],
        lambda: ReferenceWindows(seconds(windowed.THREE_BATCHES), seconds(windowed.TWO_BATCHES), windowed.add, watermark_delay_ms=DELAY),
    ),
    "characters": (
        windowed.characters,
        WindowOp.reduce_by_window(windowed.add, windowed.subtract, windowed.THREE_BATCHES, windowed.TWO_BATCHES),
        lambda line: [(len(line["line"]), line["ts"])],
        lambda: ReferenceWindows(seconds(windowed.THREE_BATCHES), seconds(windowed.TWO_BATCHES), windowed.add, watermark_delay_ms=DELAY),
    ),
}


def reference_records(name: str, line: dict) -> list[Record]:
    if name in ("windowed_word_counts", "word_frequencies"):
        return [Record(word, 1, line["ts"]) for word in line["line"].split()]
    if name == "line_counts":
        return [Record("", 1, line["ts"])]
    return [Record("", len(line["line"]), line["ts"])]


def test_the_seed_window_examples_on_a_streaming_query(spark, settings, bootstrap, new_topic, tmp_path):
    topic = new_topic()
    lines = read_json_topic(spark, settings.bootstrap_servers, topic, windowed.SCHEMA, event_time_ms="ts", watermark_delay=windowed.WATERMARK_DELAY)
    results = {name: build(lines) for name, (build, *_) in SEEDS.items()}
    results["sliding_lines"] = windowed.sliding_lines(lines)
    streams = [result.all.withColumn("operator", F.lit(name)) for name, result in results.items()]
    union = streams[0]
    for stream in streams[1:]:
        union = union.unionByName(stream)
    # windowed_word_counts and word_frequencies lay out the same rows (word, {t, v=1}): Spark
    # would reuse one shuffle for both operators, and on Spark 4.2 the second one's timers then
    # did not fire in the no-data batch. Each operator packs through its own function, so this
    # query, run with Spark's defaults, checks that they do.
    collector = RowCollector(union.select("operator", "kind", "key", "payload", "reason"), str(tmp_path / "checkpoint"))
    batches = line_batches()
    steps = []
    try:
        for batch in batches:
            produce_json(bootstrap, topic, batch)
            seen = len(collector.rows)
            collector.settle()
            steps.append(collector.rows[seen:])
    finally:
        collector.finish()

    for name, (_, op, tester_records, make_reference) in SEEDS.items():
        tester, reference = WindowTester(op, watermark_delay_ms=DELAY), make_reference()
        emitted = 0
        for index, batch in enumerate(batches):
            on_spark = [row[1:] for row in steps[index] if row[0] == name]
            on_tester = tester.run_batch([record for line in batch for record in tester_records(line)])
            assert by_key(on_spark) == by_key(on_tester), f"{name}: batch {index} differs from the tester"
            expected, late = reference.batch([record for line in batch for record in reference_records(name, line)])
            assert [tuple(w) for w in WindowTester.windows(on_spark)] == [tuple(w) for w in expected], f"{name}: batch {index}"
            assert late == []
            emitted += len(expected)
        assert emitted > 0, f"{name}: no window closed"

    # window(3, 2): every line of each closed window, the window on the line's own columns.
    reference = ReferenceWindows(seconds(windowed.THREE_BATCHES), seconds(windowed.TWO_BATCHES), lambda a, b: a + b, watermark_delay_ms=DELAY)
    for index, batch in enumerate(batches):
        expected, _ = reference.batch([Record("", [line["line"]], line["ts"]) for line in batch])
        got = [(w.start, w.end, json.loads(w.value)["line"]) for w in WindowTester.windows([row[1:] for row in steps[index] if row[0] == "sliding_lines"])]
        assert sorted(got) == sorted((start, end, text) for _, start, end, texts in expected for text in texts), f"window: batch {index}"
