"""The seeds' window operations (seed 003) on a stream of text lines.

Lines arrive as ``{"line": "...", "ts": epoch ms}``. The seed's DStream counts words with
``reduceByKeyAndWindow(func, invFunc, 6, 2)`` over batches of 10 seconds: a window of 60
seconds computed every 20, incremental (``func`` adds the words that entered, ``invFunc``
subtracts those that left). The other operations of the seed's table are here too, each one
call: ``window(3, 2)``, ``countByWindow``, ``reduceByWindow`` and ``countByValueAndWindow``.
Windows are of event time (``ts``, watermark 10 seconds behind), or of processing time with
``event_time=None``, as the seed's batches were.

    python -m examples.windowed --topic lines
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from examples.runner import EVENT_TIME, main_for, read_json_topic
from streamstate.state import (
    WindowResult,
    count_by_value_and_window,
    count_by_window,
    reduce_by_key_and_window,
    reduce_by_window,
    window,
)

SCHEMA = "line STRING, ts LONG"
WATERMARK_DELAY = "10 seconds"
# The seed's units: a batch interval of 10 seconds; windows of 3 and 6 batches, sliding every 2.
THREE_BATCHES, SIX_BATCHES, TWO_BATCHES = "30 seconds", "60 seconds", "20 seconds"


def add(x: int, y: int) -> int:
    """The seed's ``func = lambda x, y: x + y``: what entered the window."""
    return x + y


def subtract(x: int, y: int) -> int:
    """The seed's ``invFunc = lambda x, y: x - y``: what left it."""
    return x - y


def words(lines: DataFrame) -> DataFrame:
    """``(word, count=1)`` for each word of each line, with the line's event time."""
    exploded = lines.select(F.explode(F.split(F.col("line"), r"\s+")).alias("word"), *[c for c in lines.columns if c != "line"])
    return exploded.where(F.col("word") != "").withColumn("count", F.lit(1))


def windowed_word_counts(word_df: DataFrame, event_time: str | None = EVENT_TIME) -> WindowResult:
    """``dstream.reduceByKeyAndWindow(func, invFunc, 6, 2)``: word counts over a sliding window."""
    return reduce_by_key_and_window(word_df, "word", "count", add, subtract, SIX_BATCHES, TWO_BATCHES, event_time=event_time)


def sliding_lines(lines: DataFrame, event_time: str | None = EVENT_TIME) -> WindowResult:
    """``[DStream].window(3, 2)``: each window's lines, a window of 3 batches every 2."""
    return window(lines, THREE_BATCHES, TWO_BATCHES, event_time=event_time)


def line_counts(lines: DataFrame, event_time: str | None = EVENT_TIME) -> WindowResult:
    """``countByWindow(3, 2)``: how many lines each window holds."""
    return count_by_window(lines, THREE_BATCHES, TWO_BATCHES, event_time=event_time)


def characters(lines: DataFrame, event_time: str | None = EVENT_TIME) -> WindowResult:
    """``reduceByWindow(func, invFunc, 3, 2)`` over line lengths: characters per window."""
    lengths = lines.withColumn("length", F.length("line"))
    return reduce_by_window(lengths, "length", add, subtract, THREE_BATCHES, TWO_BATCHES, event_time=event_time)


def word_frequencies(word_df: DataFrame, event_time: str | None = EVENT_TIME) -> WindowResult:
    """``countByValueAndWindow(6, 2)``: how often each word occurs in each window."""
    return count_by_value_and_window(word_df, "word", SIX_BATCHES, TWO_BATCHES, event_time=event_time)


def build(spark: SparkSession, bootstrap_servers: str, topic: str) -> WindowResult:
    lines = read_json_topic(spark, bootstrap_servers, topic, SCHEMA, event_time_ms="ts", watermark_delay=WATERMARK_DELAY)
    return windowed_word_counts(words(lines))


if __name__ == "__main__":
    main_for("word counts over a sliding window with reduce_by_key_and_window", build)
