"""User session tracking with updateStateByKey (seed 000).

A login starts (or restarts) a session, page views count, a logout removes it, and a session
idle for 30 minutes of event time expires. The seed reads the wall clock in a function Spark
calls for every key in every batch; here the events' own times are used, so a replay gives the
same sessions, and the engine's event-time timeout calls an idle session once, instead of every
batch (``every_batch=False``).

    python -m examples.sessions --topic user-events
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from examples.runner import EVENT_TIME, main_for, read_json_topic
from streamstate.state import StateResult, update_state_by_key

SCHEMA = "user_id STRING, type STRING, ts LONG"
INACTIVITY = "30 minutes"


def update_session(events: list[dict], session: dict | None) -> dict | None:
    """New session info from the batch's events (in event-time order); None removes the session."""
    if not events:
        return None  # called without events only once idle for INACTIVITY: the session expires
    first = events[0]["ts"]
    current = session or {"login_time": first, "last_activity": first, "page_views": 0}
    for event in events:
        kind, ts = event["type"], event["ts"]
        if kind == "login":
            current = {**current, "login_time": ts, "last_activity": ts}
        elif kind in ("page_view", "pageview"):
            current = {**current, "last_activity": ts, "page_views": current["page_views"] + 1}
        elif kind == "logout":
            return None
        else:
            current = {**current, "last_activity": ts}
    return current


def track_sessions(events: DataFrame) -> StateResult:
    """Per-user sessions; ``events`` needs the ``event_time`` column with a watermark."""
    return update_state_by_key(
        events, key="user_id", func=update_session, value=["type", "ts"], timeout=INACTIVITY, event_time=EVENT_TIME,
        every_batch=False,
    )


def build(spark: SparkSession, bootstrap_servers: str, topic: str) -> StateResult:
    return track_sessions(read_json_topic(spark, bootstrap_servers, topic, SCHEMA, event_time_ms="ts", watermark_delay="1 minute"))


if __name__ == "__main__":
    main_for("user session tracking with updateStateByKey", build)
