"""Per-user sessions, behaviour and alerts: pure Python, no Spark.

The session rule (ARCHITECTURE.md): a session is a user's run of de-duplicated events in
event-time order with gaps shorter than the inactivity gap; a ``logout`` ends it
(inclusive); the next event after a logout or a gap starts a new session.

Events arrive out of order (within the allowed lateness), so the rule is applied in
event-time order by holding each user's recent events in ``pending`` until the
watermark passes them: no event at or below the watermark can arrive any more, so the
events up to it are *settled* and are folded in (ts, event_id) order. A session is
closed by inactivity once ``last_activity + gap <= watermark``. The outcome depends
only on the set of events and the final watermark, never on how they were split into
micro-batches, which is what makes the job replayable and checkable against a
plain-Python reference.

Alerts (each at most once per session, id derived from kind, user and event time):
- ``bot_burst``: ``burst_page_views`` page views within ``burst_window_ms`` (bot-like).
- ``purchase_without_view``: a purchase in a session with no page view before it.
- ``long_session``: the session has lasted longer than ``long_session_ms``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from streamstate.contracts import (
    ActivitySpan,
    Alert,
    Behaviour,
    ClosedSession,
    OpenSession,
    SessionSnapshot,
)


@dataclass(frozen=True)
class SessionRule:
    gap_ms: int = 30 * 60 * 1000
    burst_page_views: int = 50
    burst_window_ms: int = 60 * 1000
    long_session_ms: int = 4 * 60 * 60 * 1000


# An event as held in state: [ts, event_id, type, amount]
PendingEvent = list


def new_state() -> dict[str, Any]:
    return {
        "pending": [],
        "open": None,
        "behaviour": {"total_sessions": 0, "total_page_views": 0, "total_events": 0, "total_session_ms": 0},
        "activities": {},
        "ts": None,  # latest event time seen, settled or not
    }


def add_event(state: dict[str, Any], ts: int, event_id: str, event_type: str, amount: float | None) -> None:
    """Hold an accepted (de-duplicated, not late) event until the watermark settles it."""
    state["pending"].append([ts, event_id, event_type, amount])
    state["ts"] = ts if state["ts"] is None else max(state["ts"], ts)


@dataclass
class Admitted:
    accepted: int = 0
    duplicates: int = 0
    late: int = 0


def admit(state: dict[str, Any], events: Iterable[tuple[int, str, str, float | None]], watermark_ms: int | None) -> Admitted:
    """Add a user's newly arrived events, dropping duplicates and late events.

    De-duplication needs no store of its own: a re-sent event keeps its id and its user, so
    its original is either still pending in this state (same id: a duplicate) or already
    settled, i.e. at or below the watermark, which makes the re-sent copy late. Late events
    are dropped because the events around them are already folded; folding them now would
    make the outcome depend on how records were cut into micro-batches.
    """
    counts = Admitted()
    pending_ids = {event[1] for event in state["pending"]}
    for ts, event_id, event_type, amount in events:
        if watermark_ms is not None and ts <= watermark_ms:
            counts.late += 1
        elif event_id in pending_ids:
            counts.duplicates += 1
        else:
            pending_ids.add(event_id)
            add_event(state, ts, event_id, event_type, amount)
            counts.accepted += 1
    return counts


@dataclass
class Outputs:
    alerts: list[Alert]
    closed: list[ClosedSession]
    opened: int = 0


def settle(state: dict[str, Any], user_id: str, watermark_ms: int | None, rule: SessionRule) -> Outputs:
    """Fold every pending event with ts <= watermark in event-time order; close idle sessions."""
    out = Outputs([], [])
    if watermark_ms is None:
        return out
    pending = state["pending"]
    pending.sort(key=lambda e: (e[0], e[1]))
    due = 0
    while due < len(pending) and pending[due][0] <= watermark_ms:
        due += 1
    for event in pending[:due]:
        _fold(state, user_id, event, rule, out)
    del pending[:due]
    opened = state["open"]
    if opened is not None and opened["last_activity"] + rule.gap_ms <= watermark_ms:
        out.closed.append(_close(state, user_id, "timeout"))
    return out


def next_deadline(state: dict[str, Any], rule: SessionRule) -> int | None:
    """The watermark at which settle() has work to do, or None when nothing waits."""
    candidates = [e[0] for e in state["pending"]]
    if state["open"] is not None:
        candidates.append(state["open"]["last_activity"] + rule.gap_ms)
    return min(candidates) if candidates else None


def _fold(state: dict[str, Any], user_id: str, event: PendingEvent, rule: SessionRule, out: Outputs) -> None:
    ts, _event_id, event_type, amount = event
    session = state["open"]
    if session is not None and ts - session["last_activity"] >= rule.gap_ms:
        out.closed.append(_close(state, user_id, "timeout"))
        session = None
    if session is None:
        out.opened += 1
        session = state["open"] = {
            "start": ts,
            "last_activity": ts,
            "events": 0,
            "page_views": 0,
            "clicks": 0,
            "purchases": 0,
            "purchase_total": 0.0,
            "current_activity": event_type,
            "activity_start": ts,
            "recent_views": [],
            "alerted": [],
        }
    session["events"] += 1
    session["last_activity"] = ts
    if event_type != session["current_activity"]:
        session["current_activity"] = event_type
        session["activity_start"] = ts

    behaviour = state["behaviour"]
    behaviour["total_events"] += 1
    span = state["activities"].get(event_type)
    if span is None:
        state["activities"][event_type] = {"first": ts, "last": ts}
    else:
        span["first"] = min(span["first"], ts)
        span["last"] = max(span["last"], ts)

    if event_type == "page_view":
        session["page_views"] += 1
        behaviour["total_page_views"] += 1
        recent = session["recent_views"]
        recent.append(ts)
        while recent and recent[0] <= ts - rule.burst_window_ms:
            recent.pop(0)
        if len(recent) >= rule.burst_page_views:
            _alert_once(session, out, "bot_burst", user_id, ts,
                        f"{user_id}: {len(recent)} page views within {rule.burst_window_ms // 1000}s",
                        page_views=len(recent), window_ms=rule.burst_window_ms)
    elif event_type == "click":
        session["clicks"] += 1
    elif event_type == "purchase":
        if session["page_views"] == 0:
            _alert_once(session, out, "purchase_without_view", user_id, ts,
                        f"{user_id}: purchase with no page view before it in the session",
                        amount=amount)
        session["purchases"] += 1
        session["purchase_total"] += float(amount or 0.0)

    if ts - session["start"] > rule.long_session_ms:
        _alert_once(session, out, "long_session", user_id, ts,
                    f"{user_id}: session running for {(ts - session['start']) // 60000} minutes",
                    duration_ms=ts - session["start"], limit_ms=rule.long_session_ms)
    if event_type == "logout":
        out.closed.append(_close(state, user_id, "logout"))


def _alert_once(session: dict, out: Outputs, kind: str, user_id: str, ts: int, message: str, **details) -> None:
    if kind in session["alerted"]:
        return
    session["alerted"].append(kind)
    out.alerts.append(Alert.build(kind, user_id, ts, message, **details))


def _close(state: dict[str, Any], user_id: str, ended_by: str) -> ClosedSession:
    session = state["open"]
    state["open"] = None
    duration = session["last_activity"] - session["start"]
    behaviour = state["behaviour"]
    behaviour["total_sessions"] += 1
    behaviour["total_session_ms"] += duration
    return ClosedSession(
        session_id=f"{user_id}:{session['start']}",
        user_id=user_id,
        start=session["start"],
        end=session["last_activity"],
        duration_ms=duration,
        events=session["events"],
        page_views=session["page_views"],
        clicks=session["clicks"],
        purchases=session["purchases"],
        purchase_total=session["purchase_total"],
        ended_by=ended_by,
        ts=session["last_activity"],
    )


def _copy_json(value: Any) -> Any:
    """A deep copy of JSON-shaped data (dicts, lists, scalars): what state is. copy.deepcopy's
    generality (memo, reducers) made it two thirds of a snapshot's cost."""
    if isinstance(value, dict):
        return {key: _copy_json(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy_json(item) for item in value]
    return value


def snapshot(user_id: str, state: dict[str, Any], rule: SessionRule) -> SessionSnapshot:
    """What the user looks like now: settled state with the pending events folded in provisionally."""
    view = state
    if state["pending"]:
        view = _copy_json(state)
        # Folding up to the newest pending event applies every gap and logout among them;
        # the open session it leaves ends at that event, so no inactivity close happens.
        settle(view, user_id, max(e[0] for e in view["pending"]), rule)
    b = view["behaviour"]
    session = view["open"]
    return SessionSnapshot(
        user_id=user_id,
        ts=state["ts"],
        open_session=None if session is None else OpenSession(
            **{k: session[k] for k in OpenSession.model_fields}
        ),
        behaviour=Behaviour(
            total_sessions=b["total_sessions"],
            total_page_views=b["total_page_views"],
            total_events=b["total_events"],
            total_session_ms=b["total_session_ms"],
            avg_session_ms=b["total_session_ms"] / b["total_sessions"] if b["total_sessions"] else 0.0,
        ),
        activities={k: ActivitySpan(**v) for k, v in sorted(view["activities"].items())},
    )


def fold_all(events: Iterable[tuple[int, str, str, float | None]], user_id: str, watermark_ms: int, rule: SessionRule):
    """Reference helper: one user's accepted events through the rule up to a final watermark."""
    state = new_state()
    for ts, event_id, event_type, amount in events:
        add_event(state, ts, event_id, event_type, amount)
    return state, settle(state, user_id, watermark_ms, rule)
