"""The benchmark's Quix Streams peers apply the project's rules: their per-record functions,
fed a generated stream, give the reference pipeline's sessions and anomaly alerts."""

from __future__ import annotations

import json

from bench.peers import quix_anomalies, quix_sessions
from tests.reference_rules import SourceRecord, run_reference
from streamstate_producers.generators import MetricGenerator, UserEventGenerator
from streamstate_pipeline.settings import Settings


class KeyState:
    """The slice of Quix's per-key ``State`` the peers use."""

    def __init__(self) -> None:
        self.values: dict[str, object] = {}

    def get(self, name: str, default=None):
        return self.values.get(name, default)

    def set(self, name: str, value) -> None:
        self.values[name] = value

    def delete(self, name: str) -> None:
        self.values.pop(name, None)


def run_peer(on_record, records) -> list[dict]:
    states: dict[bytes, KeyState] = {}
    outputs = []
    for record in records:
        outputs += on_record(json.loads(record.value), states.setdefault(record.key, KeyState()))
    return outputs


def as_source(records, topic: str) -> list[SourceRecord]:
    return [SourceRecord(topic, 0, offset, r.key, r.value) for offset, r in enumerate(records)]


def test_quix_sessions_close_the_reference_sessions():
    settings = Settings()
    records = list(UserEventGenerator(seed=3, users=40, topic=settings.topic_user_events).take(3_000))
    expected = run_reference(as_source(records, settings.topic_user_events), settings).sessions
    # The reference settles events only once the watermark (last event time - delay) passed them.
    watermark = max(json.loads(r.value)["ts"] for r in records) - settings.watermark_delay_ms
    closed = [s for s in run_peer(quix_sessions.on_event, records) if s["end"] < watermark]

    assert {s["ended_by"] for s in closed} == {"logout", "timeout"}
    fields = ("start", "end", "events", "page_views", "clicks", "purchases", "ended_by")
    for session in closed:
        reference = expected[session["session_id"]]
        assert tuple(session[f] for f in fields) == tuple(getattr(reference, f) for f in fields)
    # The peer closes a timed-out session only on the user's next event (no timers), so the
    # reference may close more by timeout; every logout-ended session is closed by both.
    logouts = {k for k, s in expected.items() if s.ended_by == "logout" and s.end < watermark}
    assert logouts == {s["session_id"] for s in closed if s["ended_by"] == "logout"}


def test_quix_anomalies_raise_the_reference_alerts():
    settings = Settings()
    records = list(MetricGenerator(seed=5, series=6, anomaly_rate=0.02, topic=settings.topic_metrics).take(3_000))
    expected = run_reference(as_source(records, settings.topic_metrics), settings).alerts
    alerts = run_peer(quix_anomalies.on_point, records)

    assert alerts, "the input must raise anomalies, or matching proves little"
    assert {(a["entity"], a["ts"]) for a in alerts} == {(a.entity, a.ts) for a in expected.values() if a.kind == "anomaly"}
