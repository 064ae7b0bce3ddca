"""First and last time of a user's current activity with updateStateByKey (seeds 001 and 002).

For each user: the current activity and when it started and last happened. An event of the
same activity widens the span; an event of another activity after the span starts a new one.

    python -m examples.first_last --topic activities
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from examples.runner import main_for, read_json_topic
from streamstate.state import StateResult, update_state_by_key

SCHEMA = "user STRING, timestamp LONG, activity STRING"
# The seed starts from dates that any real event falls between.
FAR_FUTURE = 6_284_160_000_000
FAR_PAST = 6_284_160


def update_user_state(events: list[dict], state: dict | None) -> dict:
    """Fold the batch's ``{"timestamp", "activity"}`` events into the user's span."""
    current = dict(state) if state else {"activity": "", "start": FAR_FUTURE, "end": FAR_PAST}
    for event in events:
        if event["timestamp"] is None:
            continue  # no timestamp, nothing to place
        if current["activity"] == event["activity"]:
            current["end"] = max(current["end"], event["timestamp"])
            current["start"] = min(current["start"], event["timestamp"])
        elif event["timestamp"] > current["end"]:
            current = {"activity": event["activity"], "start": event["timestamp"], "end": event["timestamp"]}
    return current


def first_and_last(events: DataFrame) -> StateResult:
    return update_state_by_key(events, key="user", func=update_user_state, value=["timestamp", "activity"])


def build(spark: SparkSession, bootstrap_servers: str, topic: str) -> StateResult:
    return first_and_last(read_json_topic(spark, bootstrap_servers, topic, SCHEMA))


if __name__ == "__main__":
    main_for("first and last activity per user with updateStateByKey", build)
