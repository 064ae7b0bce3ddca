"""Per-user sessions, behaviour and alerts: pure Python, no Spark.

The session rule (docs/architecture.md, "Sessions"): a session is a user's run of de-duplicated events in
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

Input rules, each decided per event and independent of batching:
- De-duplication: an event whose ``event_id`` this user already had within
  ``dedupe_retention_ms`` of event time (the original's event time plus the retention is
  still ahead of the watermark) is a duplicate, whatever its ``ts``: it is dropped and
  counted. Ids are remembered as 128-bit hashes (BLAKE2b), so a hostile id costs 24 bytes of
  state, and two ids of one user within the retention collide with odds of about n^2 / 2^129
  for n ids: never in practice, and not by design either (finding a second id with a given
  hash is a 2^128 search). States written with the earlier 64-bit hashes are read as they are:
  their ids are checked in both forms until the retention has let the old ones go.
- Lateness: an event at or behind the watermark when it arrives (and not a duplicate) is
  *rejected*: the events around it are already folded, so folding it now would make the
  outcome depend on batch cuts. The job dead-letters it with the watermark in the reason.
- Overflow: a purchase whose amount would make the session's ``purchase_total`` leave the
  range of a double is rejected when it is folded (the rest of the session goes on).
- Idle expiry: once nothing is pending, no session is open and the watermark has passed
  the user's latest event by ``idle_ttl_ms``, the user's state can be removed
  (:func:`expired`; the job then publishes a tombstone), bounding state by activity.

Alerts (each at most once per session, id derived from kind, user and event time):
- ``bot_burst``: ``burst_page_views`` page views within ``burst_window_ms`` (bot-like).
- ``purchase_without_view``: a purchase in a session with no page view before it.
- ``long_session``: the session has lasted longer than ``long_session_ms``.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import operator
from dataclasses import dataclass, field
from typing import Any, Iterable

from streamstate_pipeline.contracts import Alert, ClosedSession, OpenSession, SessionSnapshot
from streamstate_pipeline.settings import Settings, defaults

_DEFAULTS = defaults()


@dataclass(frozen=True)
class SessionRule:
    """The rule's parameters: build it with :meth:`from_settings`; the defaults are the settings'."""

    gap_ms: int = _DEFAULTS.session_gap_ms
    burst_page_views: int = _DEFAULTS.burst_page_views
    burst_window_ms: int = _DEFAULTS.burst_window_ms
    long_session_ms: int = _DEFAULTS.long_session_ms
    dedupe_retention_ms: int = _DEFAULTS.dedupe_retention_ms
    idle_ttl_ms: int = _DEFAULTS.session_state_ttl_ms

    @classmethod
    def from_settings(cls, settings: Settings) -> SessionRule:
        return cls(
            gap_ms=settings.session_gap_ms,
            burst_page_views=settings.burst_page_views,
            burst_window_ms=settings.burst_window_ms,
            long_session_ms=settings.long_session_ms,
            dedupe_retention_ms=settings.dedupe_retention_ms,
            idle_ttl_ms=settings.session_state_ttl_ms,
        )


# An arriving event: (ts, event_id, type, amount) or (ts, event_id, type, amount, source), where
# source is where it came from, (topic, partition, offset, Kafka timestamp ms).
Event = tuple
# An event as held in state: [ts, event_id, type, amount, source | None]. Only a purchase with an
# amount keeps its source: it is the one event a fold can reject (overflow), and its dead letter
# names the record. Other events' sources would be a fifth of a user's state.
PendingEvent = list


def new_state() -> dict[str, Any]:
    return {
        "pending": [],
        "open": None,
        "behaviour": {"total_sessions": 0, "total_page_views": 0, "total_events": 0, "total_session_ms": 0},
        "activities": {},
        "ts": None,  # latest event time seen, settled or not
        "seen": {},  # hash of each accepted event_id -> its event time, for dedupe_retention_ms
        "seen_floor": None,  # the oldest event time in "seen" (None: empty), so pruning is O(1) until due
        "seen_bits": ID_HASH_BITS,  # absent in a state that may still hold 64-bit hashes
    }


ID_HASH_BITS = 128


def id_hash(event_id: str) -> bytes:
    """128 bits of the id: what de-duplication remembers (ids may be up to 1,024 characters)."""
    return hashlib.blake2b(event_id.encode("utf-8", "surrogatepass"), digest_size=ID_HASH_BITS // 8).digest()


def _legacy_id_hash(event_id: str) -> bytes:
    return hashlib.blake2b(event_id.encode("utf-8", "surrogatepass"), digest_size=8).digest()


@dataclass
class Rejected:
    """A valid event the rule cannot apply: the job dead-letters it with ``reason``."""

    event: PendingEvent
    reason: str
    stage: str  # "late" or "state"


@dataclass
class Admitted:
    accepted: int = 0
    duplicates: int = 0
    late: list[Rejected] = field(default_factory=list)


def late_reason(ts: int, watermark_ms: int) -> str:
    return (
        f"late event: event time {ts} ms is at or behind the watermark {watermark_ms} ms "
        f"({watermark_ms - ts} ms behind); the user's events up to the watermark were already folded"
    )


def admit(state: dict[str, Any], events: Iterable[Event], watermark_ms: int | None) -> Admitted:
    """Add a user's newly arrived events in arrival order: duplicates are dropped, late ones rejected.

    A duplicate is an id this user already had within the retention (see the module
    docstring), so the first arrival wins, even over a re-send with a changed ``ts``.
    """
    admitted = Admitted()
    seen = state["seen"]
    legacy = state.get("seen_bits") != ID_HASH_BITS
    pending = state["pending"]
    # The state's fields are kept in locals and set once: admission is a third of a user's cost
    # in the sessions job. An accepted event is held until the watermark settles it, its id
    # remembered with its time.
    floor, latest, has_floor = state.get("seen_floor"), state["ts"], "seen_floor" in state
    accepted = 0
    for event in events:
        ts, event_id, event_type, amount = event[:4]
        source = event[4] if len(event) > 4 else None
        hashed = id_hash(event_id)
        if hashed in seen or (legacy and _legacy_id_hash(event_id) in seen):
            admitted.duplicates += 1
        elif watermark_ms is not None and ts <= watermark_ms:
            late = [ts, event_id, event_type, amount, None if source is None else list(source)]
            admitted.late.append(Rejected(late, late_reason(ts, watermark_ms), "late"))
        else:
            kept = None if source is None or not (amount and event_type == "purchase") else list(source)
            pending.append([ts, event_id, event_type, amount, kept])
            seen[hashed] = ts
            if floor is None or ts < floor:
                floor = ts
            if latest is None or ts > latest:
                latest = ts
            accepted += 1
    if accepted:
        if has_floor:  # a state saved before the floor existed gets it at its next pruning
            state["seen_floor"] = floor
        state["ts"] = latest
    admitted.accepted = accepted
    return admitted


@dataclass
class Outputs:
    alerts: list[Alert]
    closed: list[ClosedSession]
    opened: int = 0
    rejected: list[Rejected] = field(default_factory=list)
    quiet: bool = False  # a preview for a snapshot: state only, no alert or session records built


_FOLD_ORDER = operator.itemgetter(0, 1)  # (ts, event_id)
_EVENT_TIME = operator.itemgetter(0)


def settle(state: dict[str, Any], user_id: str, watermark_ms: int | None, rule: SessionRule, quiet: bool = False) -> Outputs:
    """Fold every pending event with ts <= watermark in event-time order; close idle sessions."""
    out = Outputs([], [], quiet=quiet)
    if watermark_ms is None:
        return out
    pending = state["pending"]
    pending.sort(key=_FOLD_ORDER)
    due = bisect.bisect_right(pending, watermark_ms, key=_EVENT_TIME)
    if due:
        _fold(state, user_id, pending[:due], rule, out)
        del pending[:due]
    opened = state["open"]
    if opened is not None and opened["last_activity"] + rule.gap_ms <= watermark_ms:
        _close(state, user_id, "timeout", out)
    _forget_old_ids(state, watermark_ms, rule)
    return out


def _forget_old_ids(state: dict[str, Any], watermark_ms: int, rule: SessionRule) -> None:
    # Checked every batch for every touched user: comparing with the floor keeps a hot user's
    # cost independent of how many ids the retention holds; the scan runs only when some are due.
    horizon = watermark_ms - rule.dedupe_retention_ms
    floor = state.get("seen_floor", horizon - 1)
    if floor is None or floor >= horizon:
        return
    kept = {h: ts for h, ts in state["seen"].items() if ts >= horizon}
    state["seen"] = kept
    state["seen_floor"] = min(kept.values()) if kept else None
    if state.get("seen_bits") != ID_HASH_BITS and all(len(h) == ID_HASH_BITS // 8 for h in kept):
        state["seen_bits"] = ID_HASH_BITS  # the last 64-bit hash has gone


def next_deadline(state: dict[str, Any], rule: SessionRule) -> int | None:
    """The watermark at which settle() has work to do (or the state expires), or None."""
    candidates = [e[0] for e in state["pending"]]
    if state["open"] is not None:
        candidates.append(state["open"]["last_activity"] + rule.gap_ms)
    if not candidates and state["ts"] is not None:
        candidates.append(state["ts"] + rule.idle_ttl_ms)
    return min(candidates) if candidates else None


def expired(state: dict[str, Any], watermark_ms: int | None, rule: SessionRule) -> bool:
    """Nothing pending, no open session, and the user idle for ``idle_ttl_ms`` of event time."""
    return (
        watermark_ms is not None
        and not state["pending"]
        and state["open"] is None
        and state["ts"] is not None
        and state["ts"] + rule.idle_ttl_ms <= watermark_ms
    )


def purchase_overflow_reason(total: float, amount: float) -> str:
    return (
        f"purchase amount {amount!r} would take the session's purchase_total {total!r} out of the range "
        "of a double; the event was not applied to the session"
    )


def _fold(state: dict[str, Any], user_id: str, events: list[PendingEvent], rule: SessionRule, out: Outputs) -> None:
    """Fold settled events, in (ts, event_id) order, into the sessions, behaviour and alerts.
    One loop for the lot, the state's and the rule's fields in locals: a user's whole fold is
    one call (the snapshot folds every pending event again, provisionally)."""
    gap_ms, long_session_ms = rule.gap_ms, rule.long_session_ms
    behaviour, activities = state["behaviour"], state["activities"]
    for event in events:
        ts, event_type, amount = event[0], event[2], event[3]
        session = state["open"]
        if event_type == "purchase" and amount:
            current = 0.0 if session is None or ts - session["last_activity"] >= gap_ms else session["purchase_total"]
            if not math.isfinite(current + float(amount)):
                out.rejected.append(Rejected(event, purchase_overflow_reason(current, amount), "state"))
                continue

        if session is not None and ts - session["last_activity"] >= gap_ms:
            _close(state, user_id, "timeout", out)
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
                "recent_views": [],  # page-view times of the burst window, from index recent_from on
                "recent_from": 0,
                "alerted": [],
            }
        session["events"] += 1
        session["last_activity"] = ts
        if event_type != session["current_activity"]:
            session["current_activity"] = event_type
            session["activity_start"] = ts

        behaviour["total_events"] += 1
        span = activities.get(event_type)
        if span is None:
            activities[event_type] = {"first": ts, "last": ts}
        elif ts > span["last"]:
            span["last"] = ts
        elif ts < span["first"]:
            span["first"] = ts

        if event_type == "page_view":
            session["page_views"] += 1
            behaviour["total_page_views"] += 1
            in_window = _recent_views(session, ts, rule.burst_window_ms)
            if in_window >= rule.burst_page_views:
                _alert_once(session, out, "bot_burst", user_id, ts, page_views=in_window, window_ms=rule.burst_window_ms)
        elif event_type == "click":
            session["clicks"] += 1
        elif event_type == "purchase":
            if session["page_views"] == 0:
                _alert_once(session, out, "purchase_without_view", user_id, ts, amount=amount)
            session["purchases"] += 1
            session["purchase_total"] += float(amount or 0.0)

        if ts - session["start"] > long_session_ms:
            _alert_once(session, out, "long_session", user_id, ts, duration_ms=ts - session["start"], limit_ms=long_session_ms)
        if event_type == "logout":
            _close(state, user_id, "logout", out)


def _recent_views(session: dict, ts: int, window_ms: int) -> int:
    """Add a page view at ``ts``; the page views within the window ending at it.

    Views are folded in event-time order, so the window's start only moves forward: an index
    instead of popping the list's head keeps a hot user's cost per view constant."""
    recent = session["recent_views"]
    recent.append(ts)
    start = session.get("recent_from", 0)
    while recent[start] <= ts - window_ms:
        start += 1
    if start > 64 and start * 2 > len(recent):
        del recent[:start]
        start = 0
    session["recent_from"] = start
    return len(recent) - start


def _alert_once(session: dict, out: Outputs, kind: str, user_id: str, ts: int, **details) -> None:
    if kind in session["alerted"]:
        return
    session["alerted"].append(kind)
    if not out.quiet:
        out.alerts.append(Alert.build(kind, user_id, ts, alert_message(kind, user_id, details), **details))


def alert_message(kind: str, user_id: str, details: dict) -> str:
    """An alert's message, from its figures (the per-user and the bucket-wide rule both write it)."""
    if kind == "bot_burst":
        return f"{user_id}: {details['page_views']} page views within {details['window_ms'] // 1000}s"
    if kind == "purchase_without_view":
        return f"{user_id}: purchase with no page view before it in the session"
    return f"{user_id}: session running for {details['duration_ms'] // 60000} minutes"


def _close(state: dict[str, Any], user_id: str, ended_by: str, out: Outputs) -> None:
    session = state["open"]
    state["open"] = None
    duration = session["last_activity"] - session["start"]
    behaviour = state["behaviour"]
    behaviour["total_sessions"] += 1
    behaviour["total_session_ms"] += duration
    if out.quiet:
        return
    out.closed.append(ClosedSession(
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
    ))


def _preview(state: dict[str, Any]) -> dict[str, Any]:
    """A copy of what folding changes (the open session, behaviour, activities, pending), not
    of the remembered ids: a snapshot folds the pending events into it provisionally."""
    session = state["open"]
    return {
        "pending": list(state["pending"]),
        "open": None if session is None else {**session, "recent_views": list(session["recent_views"]), "alerted": list(session["alerted"])},
        "behaviour": dict(state["behaviour"]),
        "activities": {kind: dict(span) for kind, span in state["activities"].items()},
        "ts": state["ts"],
        "seen": {},
        "seen_floor": None,
        "seen_bits": ID_HASH_BITS,
    }


_OPEN_FIELDS = tuple(OpenSession.model_fields)


def _provisional(user_id: str, state: dict[str, Any], rule: SessionRule) -> dict[str, Any]:
    """The state with its pending events folded in provisionally (a copy when there are any)."""
    if not state["pending"]:
        return state
    view = _preview(state)
    # Folding up to the newest pending event applies every gap and logout among them;
    # the open session it leaves ends at that event, so no inactivity close happens.
    settle(view, user_id, max(e[0] for e in view["pending"]), rule, quiet=True)
    return view


def snapshot_fields(user_id: str, state: dict[str, Any], rule: SessionRule) -> dict[str, Any]:
    """What the user looks like now, as the fields of a :class:`SessionSnapshot`: settled state
    with the pending events folded in provisionally."""
    view = _provisional(user_id, state, rule)
    b = view["behaviour"]
    session = view["open"]
    return {
        "user_id": user_id,
        "ts": state["ts"],
        "open_session": None if session is None else {k: session[k] for k in _OPEN_FIELDS},
        "behaviour": {
            "total_sessions": b["total_sessions"],
            "total_page_views": b["total_page_views"],
            "total_events": b["total_events"],
            "total_session_ms": b["total_session_ms"],
            "avg_session_ms": b["total_session_ms"] / b["total_sessions"] if b["total_sessions"] else 0.0,
        },
        "activities": {kind: {"first": span["first"], "last": span["last"]} for kind, span in sorted(view["activities"].items())},
    }


def snapshot_json(user_id: str, state: dict[str, Any], rule: SessionRule) -> str:
    """:func:`snapshot_fields` as the ``SessionSnapshot`` JSON the jobs publish, the text
    ``json.dumps(fields, separators=(",", ":"), allow_nan=False)`` gives, written directly:
    the fields' dicts and the generic encoder were a quarter of a touched user's cost. The tests
    check it is that text, and that it parses to :func:`snapshot`."""
    view = _provisional(user_id, state, rule)
    b = view["behaviour"]
    session = view["open"]
    closed = b["total_sessions"]
    average = b["total_session_ms"] / closed if closed else 0.0
    spans = ",".join(
        f'{json_text(kind)}:{{"first":{span["first"]},"last":{span["last"]}}}'
        for kind, span in sorted(view["activities"].items())
    )
    return (
        f'{{"user_id":{json_text(user_id)},"ts":{"null" if state["ts"] is None else state["ts"]},"open_session":{_open_json(session)},'
        f'"behaviour":{{"total_sessions":{closed},"total_page_views":{b["total_page_views"]},'
        f'"total_events":{b["total_events"]},"total_session_ms":{b["total_session_ms"]},'
        f'"avg_session_ms":{json_float(average)}}},"activities":{{{spans}}}}}'
    )


def _open_json(session: dict[str, Any] | None) -> str:
    if session is None:
        return "null"
    return (
        f'{{"start":{session["start"]},"last_activity":{session["last_activity"]},'
        f'"events":{session["events"]},"page_views":{session["page_views"]},'
        f'"clicks":{session["clicks"]},"purchases":{session["purchases"]},'
        f'"purchase_total":{json_float(session["purchase_total"])},"current_activity":{json_text(session["current_activity"])},'
        f'"activity_start":{session["activity_start"]}}}'
    )


# json.dumps' own string form (ASCII, escapes as it writes them), in C.
json_text = json.encoder.encode_basestring_ascii


def json_float(value: float) -> str:
    """A float as json.dumps writes it (repr), refusing what it refuses with allow_nan=False.
    The fields written without it are ints the fold counts or copies from event times."""
    if not math.isfinite(value):
        raise ValueError(f"Out of range float values are not JSON compliant: {value!r}")
    return repr(value)


def snapshot(user_id: str, state: dict[str, Any], rule: SessionRule) -> SessionSnapshot:
    """:func:`snapshot_fields` as the validated model."""
    return SessionSnapshot.model_validate(snapshot_fields(user_id, state, rule))


def fold_all(events: Iterable[Event], user_id: str, watermark_ms: int, rule: SessionRule):
    """Reference helper: one user's events (in arrival order) through the rule up to a final
    watermark, with no lateness (every event arrived before the watermark passed it)."""
    state = new_state()
    admit(state, events, None)
    return state, settle(state, user_id, watermark_ms, rule)
