"""The sessions rule as a per-user function: the engine calls :func:`on_user` once for each
user a batch touches or whose timer is due, with the user's new events as columns.

It is the reference the bucket-wide form (:mod:`streamstate_jobs.sessions.bucket`) is checked
against, and that form runs a user through it where the columns cannot decide alone (a
purchase that would overflow its session's total).
"""

from __future__ import annotations

import collections
import operator
from sys import intern
from typing import Any

from streamstate.state import Columns, Emit, State
from streamstate_jobs.kinds import Kind
from streamstate_jobs.rules.dead_letters import refused_event
from streamstate_jobs.sessions import rules as sessions
from streamstate_jobs.validation import dead_letter_row

_ARRIVAL_ORDER = operator.itemgetter(0, 1)  # (partition, offset)


def _arrivals(events: Columns) -> list[tuple]:
    # Arrival (offset) order, so that the first of two copies of an event wins. The type and
    # topic names are interned: a state then pickles each once, not once per pending event.
    arrived = sorted(
        zip(events["partition"], events["offset"], events["ts"], events["event_id"], map(intern, events["type"]),
            events["amount"], map(intern, events["topic"]), events["kafka_ts"]),
        key=_ARRIVAL_ORDER,
    )
    return [
        (ts, event_id, kind, amount, (topic, partition, offset, kafka_ts))
        for partition, offset, ts, event_id, kind, amount, topic, kafka_ts in arrived
    ]


def _count(counter: str, n: int) -> Emit:
    return Emit(Kind.COUNT, counter, str(n))


def on_user(rule: sessions.SessionRule, user_id: str, events: Columns, state: State):
    """Columnar function: hold the user's new events, settle what the watermark allows."""
    watermark = state.watermark_ms if state.watermark_ms >= 0 else None
    current = state.get() if state.exists() else sessions.new_state()
    # A timer's call has no events: nothing to put in arrival order (a tenth of such a call's cost).
    admitted = sessions.admit(current, _arrivals(events), watermark) if events.num_rows else sessions.Admitted()
    for late in admitted.late:
        yield dead_letter_row(refused_event(late.stage, late.reason, user_id, late.event))
    if admitted.late:
        yield _count("late_events", len(admitted.late))
    if admitted.duplicates:
        yield _count("duplicate_events", admitted.duplicates)
    if not state.exists() and not admitted.accepted:
        return  # nothing but late events or duplicates from a user we hold nothing for
    result = sessions.settle(current, user_id, watermark, rule)
    for rejected in result.rejected:
        yield dead_letter_row(refused_event(rejected.stage, rejected.reason, user_id, rejected.event))
    if sessions.expired(current, watermark, rule):
        state.remove()  # idle past the TTL: a tombstone on session-state
    else:
        state.update(current)
        state.set_timeout_timestamp(sessions.next_deadline(current, rule))
    for alert in result.alerts:
        yield Emit(Kind.ALERT, alert.alert_id, alert.model_dump_json())
    if result.closed:
        for closed in result.closed:
            yield Emit(Kind.SESSION, user_id, closed.model_dump_json())
        for ended_by, n in collections.Counter(closed.ended_by for closed in result.closed).items():
            yield _count(f"sessions_closed:{ended_by}", n)
    if result.opened:
        yield _count("sessions_opened", result.opened)


def user_snapshot(rule: sessions.SessionRule, user_id: str, state: Any) -> str | None:
    return None if state is None else sessions.snapshot_json(user_id, state, rule)


