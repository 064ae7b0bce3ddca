"""Valid state and alert records for the API's tests (unit and integration)."""

from __future__ import annotations

from streamstate_pipeline.contracts import Alert, Behaviour, LastAnomaly, MetricSnapshot, OpenSession, SessionSnapshot


def session_snapshot(user_id: str, active: bool = True, ts: int = 1_000) -> SessionSnapshot:
    open_session = (
        OpenSession(
            start=ts - 500, last_activity=ts, events=3, page_views=2, clicks=1, purchases=0,
            purchase_total=0.0, current_activity="click", activity_start=ts,
        )
        if active
        else None
    )
    return SessionSnapshot(
        user_id=user_id,
        ts=ts,
        open_session=open_session,
        behaviour=Behaviour(total_sessions=1, total_page_views=4, total_events=7, total_session_ms=900, avg_session_ms=900.0),
        activities={},
    )


def metric_snapshot(series_id: str, last_z: float | None) -> MetricSnapshot:
    return MetricSnapshot(
        series_id=series_id, ts=5, window_size=100, window_count=20, mean=1.0, std=0.5, last_value=2.0,
        last_z=last_z, count=20, sum=20.0, min=0.0, max=2.0, avg=1.0,
        last_anomaly=LastAnomaly(ts=5, value=2.0, z=last_z) if last_z is not None else None,
    )


def alert(entity: str, ts: int, kind: str = "bot_burst") -> Alert:
    return Alert.build(kind, entity, ts, f"{kind} for {entity}", rate=1.0)
