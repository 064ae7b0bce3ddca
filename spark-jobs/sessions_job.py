"""The sessions job: user-events -> sessions, alerts, session-state, dead-letters.

    streamstate-sessions-job --help

One streaming query: Kafka source -> contract validation (bad records become dead
letters) -> event-time watermark -> ``dropDuplicatesWithinWatermark(event_id)`` ->
``map_with_state`` per user running :mod:`streamstate.jobs.rules.sessions` -> routed to
the output topics by ``foreachBatch``. The rule itself lives in the rules module; this
file is only the wiring.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streamstate.contracts import UserEvent
from streamstate.jobs.kafka import read_kafka
from streamstate.jobs.routing import state_rows
from streamstate.jobs.rules import sessions
from streamstate.jobs.rules.reference import session_rule
from streamstate.jobs.runner import main_for
from streamstate.jobs.state import State, StateSpec, map_with_state
from streamstate.jobs.validation import dead_letters, good_rows, validate
from streamstate.settings import Settings

DESCRIPTION = "Sessions job: per-user sessions, behaviour and alerts from the user-events topic."


def on_user(rule: sessions.SessionRule, user_id: str, events: list[dict[str, Any]], state: State):
    """Batch function: hold the user's new events, settle what the watermark allows."""
    current = state.get() if state.exists() else sessions.new_state()
    for event in events:
        sessions.add_event(current, event["ts"], event["event_id"], event["type"], event["amount"])
    watermark = state.watermark_ms if state.watermark_ms >= 0 else None
    result = sessions.settle(current, user_id, watermark, rule)
    state.update(current)
    state.set_timeout_timestamp(sessions.next_deadline(current, rule))
    for alert in result.alerts:
        yield {"kind": "alert", "key": alert.alert_id, "payload": alert.model_dump_json()}
    for closed in result.closed:
        yield {"kind": "session", "key": user_id, "payload": closed.model_dump_json()}


def user_snapshot(rule: sessions.SessionRule, user_id: str, state: Any) -> str | None:
    return None if state is None else sessions.snapshot(user_id, state, rule).model_dump_json()


def build(spark: SparkSession, settings: Settings) -> DataFrame:
    raw = read_kafka(spark, settings, subscribe=settings.topic_user_events, startingOffsets="earliest")
    checked = validate(raw, UserEvent)
    events = (
        good_rows(checked)
        .withColumn("event_time", F.timestamp_millis("ts"))
        .withWatermark("event_time", f"{settings.watermark_delay_ms} milliseconds")
        .dropDuplicatesWithinWatermark(["event_id"])
    )
    rule = session_rule(settings)
    spec = (
        StateSpec.batch_function(partial(on_user, rule))
        .event_time("ts")
        .snapshots(partial(user_snapshot, rule))
    )
    result = map_with_state(
        events.select("user_id", "ts", "event_id", "type", "amount", "topic", "partition", "offset"),
        key="user_id",
        spec=spec,
    )
    return state_rows(result, "session_state").unionByName(dead_letters(checked))


main = main_for("sessions", DESCRIPTION, build)

if __name__ == "__main__":
    main()
