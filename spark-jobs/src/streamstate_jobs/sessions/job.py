"""The sessions job: user-events -> sessions, alerts, session-state, dead-letters.

    streamstate-sessions-job --help

One streaming query: Kafka source -> contract validation -> event-time watermark ->
``map_with_state`` running :mod:`streamstate_jobs.sessions.rules` over each bucket's users as
columns (:mod:`~streamstate_jobs.sessions.bucket`; per user in
:mod:`~streamstate_jobs.sessions.per_user`, its reference), which also drops duplicates and
refuses late or overflowing events, dead-lettered here -> written to
the output topics by its tasks (:func:`~streamstate_jobs.routing.routed`). Bad records pass the same operator under a reserved
key and come out as dead letters, so the topic is read and validated once per batch. The
rule itself lives in the rules module; this file is the wiring and the job's declaration
(:data:`JOB`), including the counters and gauges only this job feeds.
"""

from __future__ import annotations

import typing
from functools import partial
from typing import Any, Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from streamstate_pipeline.contracts import ClosedSession, UserEvent
from streamstate_jobs.context import JobContext
from streamstate_jobs.declaration import Counter, ExtraQuery, Gauge, JobSpec
from streamstate_jobs.sessions import bucket, rules as sessions
from streamstate_jobs.sessions.columns import SessionColumns
from streamstate_jobs.sessions.per_user import on_user, user_snapshot
from streamstate_jobs.runner import job_main
from streamstate_jobs.validation import good_rows, validate
from streamstate_jobs.kinds import Kind
from streamstate_pipeline.settings import Settings
from streamstate.state import StateSpec

# What the rule reads of a validated event (map_validated adds the dead-letter columns).
STATE_COLUMNS = ("user_id", "ts", "event_id", "type", "amount", "topic", "partition", "offset")


def state_spec(settings: Settings) -> StateSpec:
    rule = sessions.SessionRule.from_settings(settings)
    return (
        StateSpec.columnar_function(partial(on_user, rule))
        .event_time("ts")
        .snapshots(partial(user_snapshot, rule))
        .buckets(settings.bucket_count)
        .hot_keys(settings.state_hot_keys)
        # The rule over each bucket's users as columns; the per-user function stays its reference,
        # and a checkpoint the per-user engine wrote is carried on from its users' states.
        .over_buckets(partial(bucket.on_bucket, rule), from_keys=partial(SessionColumns.of_user_states, rule=rule))
    )


def build(ctx: JobContext) -> DataFrame:
    return ctx.keyed_state_rows(UserEvent, "user_id", STATE_COLUMNS, state_spec(ctx.settings), snapshots=Kind.SESSION_STATE)


def event_counts(ctx: JobContext) -> DataFrame:
    """Events by type over a sliding event-time window (the seeds' countByValueAndWindow),
    as (kind, key, payload) rows in update mode: each batch re-emits the windows it changed."""
    settings = ctx.settings
    counts = (
        good_rows(validate(ctx.read_input(), UserEvent, settings.max_clock_skew_ms))
        .withColumn("event_time", F.timestamp_millis("ts"))
        .withWatermark("event_time", f"{settings.watermark_delay_ms} milliseconds")
        .groupBy(F.window("event_time", settings.event_count_window, settings.event_count_slide), "type")
        .count()
    )
    start, end = F.unix_millis(F.col("window.start")), F.unix_millis(F.col("window.end"))
    return counts.select(
        F.lit(Kind.EVENT_COUNT.value).alias("kind"),
        F.concat_ws("@", "type", start.cast("string")).alias("key"),
        F.to_json(F.struct("type", start.alias("window_start"), end.alias("window_end"), "count", end.alias("ts"))).alias("payload"),
    )


def latest_window_counts(windows: list[dict[str, Any]]) -> Mapping[str, float]:
    """Events per type in the newest window a batch of ``event_count`` rows updated."""
    newest = max(w["window_end"] for w in windows)
    return {w["type"]: w["count"] for w in windows if w["window_end"] == newest}


SESSION_END_REASONS: tuple[str, ...] = typing.get_args(ClosedSession.model_fields["ended_by"].annotation)

JOB = JobSpec(
    name="sessions",
    description="Sessions job: per-user sessions, behaviour and alerts from the user-events topic.",
    build=build,
    inputs=("topic_user_events",),
    outputs={
        "alert": "topic_alerts",
        "session": "topic_sessions",
        "session_state": "topic_session_state",
        "dead_letter": "topic_dead_letters",
        "event_count": "topic_event_counts",
    },
    metrics_port="sessions_metrics_port",
    alert_kinds=("bot_burst", "purchase_without_view", "long_session"),
    extra_queries=(ExtraQuery("event-counts", event_counts, "update"),),
    counters=(
        Counter("late_events", "Valid events at or behind the watermark when they arrived (dead-lettered with stage late)."),
        Counter("duplicate_events", "Events dropped as re-sent copies of an event_id already seen."),
        Counter(
            "sessions_closed", "Sessions closed, by what ended them.",
            metric="streamstate_sessions_closed", job_label=False, label="ended_by", label_values=SESSION_END_REASONS,
        ),
    ),
    gauges=(
        # Opened minus closed since this process started: what was open before a restart is
        # not known without scanning every key's state.
        Gauge("sessions_open", "Sessions open now.", metric="streamstate_sessions_open", job_label=False,
              adds=("sessions_opened",), subtracts=("sessions_closed",)),
        Gauge("events_in_window", "Events per type in the latest sliding window.", metric="streamstate_events_in_window",
              job_label=False, label="type", reads=(Kind.EVENT_COUNT, latest_window_counts)),
    ),
)

main = job_main(JOB)

if __name__ == "__main__":
    main()
