"""Running word count with an initial state (seeds 000 and 001).

Lines of text arrive as ``{"line": "..."}``; words are counted across batches, starting from
``dummy=100, source=32`` as in the seed's ``initialRDD``.

    python -m examples.word_count --topic lines
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from examples.runner import main_for, read_json_topic
from streamstate.state import State, StateResult, StateSpec, map_with_state, update_state_by_key

SCHEMA = "line STRING"
INITIAL_STATE = [("dummy", 100), ("source", 32)]


def track_state(word: str, count: int | None, state: State) -> tuple[str, int]:
    """The seed's ``trackStateFunc``: add the word's count to its running total, emit (word, total)."""
    total = (count or 0) + state.get_option(0)
    state.update(total)
    return (word, total)


def update_count(new_values: list[int], running_count: int | None) -> int:
    """The seed's ``updateFunction`` for ``updateStateByKey``: previous count plus the new ones."""
    return sum(new_values) + (running_count or 0)


def words(lines: DataFrame) -> DataFrame:
    """``(word, count=1)`` for each whitespace-separated word of each line."""
    return (
        lines.select(F.explode(F.split(F.col("line"), r"\s+")).alias("word"), "topic", "partition", "offset")
        .where(F.col("word") != "")
        .withColumn("count", F.lit(1))
    )


def running_counts(word_df: DataFrame, timeout: str | None = None) -> StateResult:
    """mapWithState word count starting from :data:`INITIAL_STATE`."""
    spec = StateSpec.function(track_state).initial_state(INITIAL_STATE)
    if timeout is not None:
        spec = spec.timeout(timeout)
    return map_with_state(word_df, key="word", spec=spec, value="count")


def running_counts_by_key(word_df: DataFrame) -> StateResult:
    """The updateStateByKey variant (no initial state)."""
    return update_state_by_key(word_df, key="word", func=update_count, value="count")


def build(spark: SparkSession, bootstrap_servers: str, topic: str) -> StateResult:
    return running_counts(words(read_json_topic(spark, bootstrap_servers, topic, SCHEMA)), timeout="60 seconds")


if __name__ == "__main__":
    main_for("running word count with mapWithState", build)
