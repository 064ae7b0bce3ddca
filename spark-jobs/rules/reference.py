"""The plain-Python reference pipeline: what the two jobs must produce for a given input.

It runs the same pure rules as the jobs over a finished list of Kafka records, with no
Spark and no micro-batches, and is what the end-to-end, cluster and crash tests compare
the jobs' outputs against. Its only knowledge of streaming is the final watermark
(newest valid event time minus the allowed lateness), up to which the sessions job
settles events; records below the watermark when they arrive would be dropped as late,
which scenarios avoid by keeping lateness under the watermark delay.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable

from streamstate.contracts import (
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
from streamstate.jobs.rules import anomalies, sessions
from streamstate.settings import Settings


@dataclass(frozen=True)
class SourceRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int = 0
    sequence_number: str | None = None  # Kinesis input: the exact coordinate


@dataclass
class PipelineOutputs:
    alerts: dict[str, Alert] = field(default_factory=dict)  # by alert_id
    sessions: dict[str, ClosedSession] = field(default_factory=dict)  # by session_id
    dead_letters: dict[tuple[str, int, int], DeadLetter] = field(default_factory=dict)  # by source coordinates
    session_state: dict[str, SessionSnapshot] = field(default_factory=dict)  # live keys only
    metric_state: dict[str, MetricSnapshot] = field(default_factory=dict)


def session_rule(settings: Settings) -> sessions.SessionRule:
    return sessions.SessionRule(
        gap_ms=settings.session_gap_ms,
        burst_page_views=settings.burst_page_views,
        burst_window_ms=settings.burst_window_ms,
        long_session_ms=settings.long_session_ms,
    )


def anomaly_rule(settings: Settings) -> anomalies.AnomalyRule:
    return anomalies.AnomalyRule(
        window=settings.anomaly_window, threshold=settings.anomaly_threshold, min_count=settings.anomaly_min_count
    )


def dead_letter(record: SourceRecord, reason: str, stage: str = "contract") -> DeadLetter:
    return DeadLetter(
        reason=reason,
        stage=stage,
        source_topic=record.topic,
        source_partition=record.partition,
        source_offset=record.offset,
        key=dead_letter_text(record.key),
        value=dead_letter_text(record.value),
        ts=record.timestamp_ms,
        source_sequence_number=record.sequence_number,
    )


def run_reference(records: Iterable[SourceRecord], settings: Settings) -> PipelineOutputs:
    out = PipelineOutputs()
    ordered = sorted(records, key=lambda r: (r.topic, r.partition, r.offset))
    events: dict[str, list[UserEvent]] = defaultdict(list)
    seen_event_ids: set[str] = set()
    metrics: dict[str, list[Metric]] = defaultdict(list)
    for record in ordered:
        model = UserEvent if record.topic == settings.topic_user_events else Metric
        try:
            parsed = parse_input(model, record.key, record.value)
        except ContractError as exc:
            out.dead_letters[(record.topic, record.partition, record.offset)] = dead_letter(record, exc.reason)
            continue
        if isinstance(parsed, UserEvent):
            if parsed.event_id in seen_event_ids:
                continue
            seen_event_ids.add(parsed.event_id)
            events[parsed.user_id].append(parsed)
        else:
            metrics[parsed.series_id].append(parsed)

    _run_sessions(events, settings, out)
    _run_anomalies(metrics, settings, out)
    return out


def _run_sessions(events: dict[str, list[UserEvent]], settings: Settings, out: PipelineOutputs) -> None:
    if not events:
        return
    rule = session_rule(settings)
    watermark = max(e.ts for user_events in events.values() for e in user_events) - settings.watermark_delay_ms
    for user_id, user_events in events.items():
        state, result = sessions.fold_all(
            ((e.ts, e.event_id, e.type, e.amount) for e in user_events), user_id, watermark, rule
        )
        for alert in result.alerts:
            out.alerts[alert.alert_id] = alert
        for closed in result.closed:
            out.sessions[closed.session_id] = closed
        out.session_state[user_id] = sessions.snapshot(user_id, state, rule)


def _run_anomalies(metrics: dict[str, list[Metric]], settings: Settings, out: PipelineOutputs) -> None:
    if not metrics:
        return
    rule = anomaly_rule(settings)
    watermark = max(m.ts for points in metrics.values() for m in points) - settings.watermark_delay_ms
    for series_id, points in metrics.items():
        state = anomalies.new_state()
        for point in points:
            alert = anomalies.observe(state, series_id, point.ts, point.value, rule)
            if alert is not None:
                out.alerts[alert.alert_id] = alert
        if state["ts"] + settings.series_idle_timeout_ms <= watermark:
            continue  # expired: the job tombstones it
        out.metric_state[series_id] = anomalies.snapshot(series_id, state, rule)
