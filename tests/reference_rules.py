"""The plain-Python reference pipeline: what the two jobs must produce for a given input.

It runs the same pure rules as the jobs over a finished list of Kafka records, with no
Spark and no micro-batches, and is what the end-to-end, cluster and crash tests compare
the jobs' outputs against. Records are taken in offset order per partition (a user's or a
series' records share a partition, so that is their arrival order). Its only knowledge of
streaming is the final watermark (newest valid event time minus the allowed lateness), up
to which the sessions job settles events; records behind the watermark when they arrive
are dead-lettered as late by the job, which scenarios avoid by keeping lateness under the
watermark delay. De-duplication assumes re-sends come within ``dedupe_retention_ms``, and
idle users expire only at the end (``session_state_ttl_ms`` before the final watermark).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable

from streamstate_pipeline.contracts import (
    Alert,
    ClosedSession,
    ContractError,
    DeadLetter,
    Metric,
    MetricSnapshot,
    SessionSnapshot,
    UserEvent,
    dead_letter_text,
    parse_input,
)
from streamstate_jobs.anomalies import rules as anomalies
from streamstate_jobs.sessions import rules as sessions
from streamstate_jobs.rules.dead_letters import refused_event, refused_point
from streamstate_jobs.rules.event_time import STAGE as CLOCK_SKEW, clock_skew_reason
from streamstate_pipeline.settings import Settings


@dataclass(frozen=True)
class SourceRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int | None = None  # the Kafka timestamp; None: unknown (no clock-skew check)
    sequence_number: str | None = None  # Kinesis input: the exact coordinate


@dataclass
class PipelineOutputs:
    alerts: dict[str, Alert] = field(default_factory=dict)  # by alert_id
    sessions: dict[str, ClosedSession] = field(default_factory=dict)  # by session_id
    dead_letters: dict[tuple[str, int, int], DeadLetter] = field(default_factory=dict)  # by source coordinates
    session_state: dict[str, SessionSnapshot] = field(default_factory=dict)  # live keys only
    metric_state: dict[str, MetricSnapshot] = field(default_factory=dict)

    def add_dead_letter(self, letter: DeadLetter) -> None:
        self.dead_letters[(letter.source_topic, letter.source_partition, letter.source_offset)] = letter


def dead_letter(record: SourceRecord, reason: str, stage: str = "contract") -> DeadLetter:
    return DeadLetter(
        reason=reason,
        stage=stage,
        source_topic=record.topic,
        source_partition=record.partition,
        source_offset=record.offset,
        key=dead_letter_text(record.key),
        value=dead_letter_text(record.value),
        ts=record.timestamp_ms if record.timestamp_ms is not None else 0,
        source_sequence_number=record.sequence_number,
    )


def run_reference(records: Iterable[SourceRecord], settings: Settings) -> PipelineOutputs:
    out = PipelineOutputs()
    ordered = sorted(records, key=lambda r: (r.topic, r.partition, r.offset))
    events: dict[str, list[tuple]] = defaultdict(list)
    metrics: dict[str, list[tuple[Metric, tuple]]] = defaultdict(list)
    for record in ordered:
        model = UserEvent if record.topic == settings.topic_user_events else Metric
        try:
            parsed = parse_input(model, record.key, record.value)
        except ContractError as exc:
            out.add_dead_letter(dead_letter(record, exc.reason))
            continue
        skew = clock_skew_reason(parsed.ts, record.timestamp_ms, settings.max_clock_skew_ms)
        if skew is not None:
            out.add_dead_letter(dead_letter(record, skew, CLOCK_SKEW))
            continue
        source = (record.topic, record.partition, record.offset, record.timestamp_ms)
        if isinstance(parsed, UserEvent):
            events[parsed.user_id].append((parsed.ts, parsed.event_id, parsed.type, parsed.amount, source))
        else:
            metrics[parsed.series_id].append((parsed, source))

    _run_sessions(events, settings, out)
    _run_anomalies(metrics, settings, out)
    return out


def _run_sessions(events: dict[str, list[tuple]], settings: Settings, out: PipelineOutputs) -> None:
    if not events:
        return
    rule = sessions.SessionRule.from_settings(settings)
    watermark = max(e[0] for user_events in events.values() for e in user_events) - settings.watermark_delay_ms
    for user_id, user_events in events.items():
        state, result = sessions.fold_all(user_events, user_id, watermark, rule)
        for alert in result.alerts:
            out.alerts[alert.alert_id] = alert
        for closed in result.closed:
            out.sessions[closed.session_id] = closed
        for rejected in result.rejected:
            out.add_dead_letter(refused_event(rejected.stage, rejected.reason, user_id, rejected.event))
        if not sessions.expired(state, watermark, rule):
            out.session_state[user_id] = sessions.snapshot(user_id, state, rule)


def _run_anomalies(metrics: dict[str, list[tuple[Metric, tuple]]], settings: Settings, out: PipelineOutputs) -> None:
    if not metrics:
        return
    rule = anomalies.AnomalyRule.from_settings(settings)
    watermark = max(m.ts for points in metrics.values() for m, _ in points) - settings.watermark_delay_ms
    for series_id, points in metrics.items():
        state = anomalies.new_state()
        for point, source in points:
            try:
                alert = anomalies.observe(state, series_id, point.ts, point.value, rule)
            except anomalies.Rejected as rejected:
                out.add_dead_letter(refused_point(str(rejected), series_id, point.ts, point.value, source))
                continue
            if alert is not None:
                out.alerts[alert.alert_id] = alert
        if state["ts"] is None or state["ts"] + settings.series_idle_timeout_ms <= watermark:
            continue  # expired (or never applied a value): the job tombstones it
        out.metric_state[series_id] = anomalies.snapshot(series_id, state, rule)
