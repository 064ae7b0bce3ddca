"""User behaviour analysis with mapWithState, a summary emitted on timeout (seed 000).

Each session start and page view updates the user's behaviour and emits it; a user idle for
30 minutes (event time) gets a final ``user_summary`` and is removed.

    python -m examples.behaviour --topic user-events
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from examples.runner import EVENT_TIME, main_for, read_json_topic
from streamstate.state import State, StateResult, StateSpec, map_with_state

SCHEMA = "user_id STRING, type STRING, ts LONG"
IDLE = "30 minutes"
SESSION_START = ("session_start", "login")


def track_behaviour(user_id: str, action: dict | None, state: State) -> tuple | None:
    """Count sessions and page views per user; on timeout emit the final summary."""
    behaviour = state.get_option() or {
        "total_sessions": 0,
        "total_page_views": 0,
        "last_activity": action["ts"] if action else 0,
        "avg_session_duration": 0.0,
    }
    if action is not None and action["type"] in SESSION_START:
        behaviour = {**behaviour, "total_sessions": behaviour["total_sessions"] + 1, "last_activity": action["ts"]}
        state.update(behaviour)
        return (user_id, "session_started", behaviour)
    if action is not None and action["type"] in ("page_view", "pageview"):
        behaviour = {**behaviour, "total_page_views": behaviour["total_page_views"] + 1, "last_activity": action["ts"]}
        state.update(behaviour)
        return (user_id, "page_viewed", behaviour)
    if action is None and state.is_timing_out():
        return (user_id, "user_summary", behaviour)
    return None


def behaviour_spec() -> StateSpec:
    return StateSpec.function(track_behaviour).timeout(IDLE).event_time(EVENT_TIME)


def analyse_behaviour(events: DataFrame) -> StateResult:
    """``events`` needs the ``event_time`` column with a watermark."""
    return map_with_state(events, key="user_id", spec=behaviour_spec(), value=["type", "ts"])


def build(spark: SparkSession, bootstrap_servers: str, topic: str) -> StateResult:
    return analyse_behaviour(read_json_topic(spark, bootstrap_servers, topic, SCHEMA, event_time_ms="ts", watermark_delay="1 minute"))


if __name__ == "__main__":
    main_for("user behaviour analysis with mapWithState", build)
