"""Handling errors in state updates (seed 000): a bad number keeps the previous state.

``robust_sum`` is the seed's function: it catches the bad number itself and emits the
unchanged sum. ``strict_sum`` does not catch: the state API then sends the record with its
error to the dead letters and keeps the key's previous state, and the query keeps running.

    python -m examples.robust --topic numbers
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from examples.runner import main_for, read_json_topic
from streamstate.state import State, StateResult, StateSpec, map_with_state

SCHEMA = "key STRING, number STRING"


def robust_sum(key: str, number: str | None, state: State) -> tuple[str, int]:
    """Add ``number``; a value that is not an integer leaves the sum as it was."""
    current = state.get_option(0)
    try:
        new_value = current + (int(number) if number is not None else 0)
    except ValueError:
        return (key, current)  # the seed logs "Invalid number" and keeps the previous state
    state.update(new_value)
    return (key, new_value)


def strict_sum(key: str, number: str | None, state: State) -> tuple[str, int]:
    """Add ``number``; a bad one raises, and the state API dead-letters that record."""
    new_value = state.get_option(0) + int(number)
    state.update(new_value)
    return (key, new_value)


def sums(numbers: DataFrame, strict: bool = False) -> StateResult:
    spec = StateSpec.function(strict_sum if strict else robust_sum)
    return map_with_state(numbers, key="key", spec=spec, value="number")


def build(spark: SparkSession, bootstrap_servers: str, topic: str) -> StateResult:
    return sums(read_json_topic(spark, bootstrap_servers, topic, SCHEMA))


if __name__ == "__main__":
    main_for("error handling in state updates", build)
