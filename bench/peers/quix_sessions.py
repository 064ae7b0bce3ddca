"""Sessionization in Quix Streams with the project's session rule, for the throughput peer.

    .venv/peers/quix/bin/python -m bench.peers.quix_sessions --bootstrap H:P --input T --output T --records N

The rule (docs/architecture.md, "Sessions"): a session is a user's run of events with gaps shorter than 30
minutes of event time; a ``logout`` ends it (inclusive). Quix's ``session_window`` cannot end
a session on a logout, so this is a stateful ``apply`` per user, the way a Quix user would
write it: the open session lives in the key's state; a closed session is emitted when a
logout arrives or when the user's next event comes after the gap. Events of a user are taken
in arrival order (the benchmark input has no late events), and an idle user's last session
is only closed by its next event (Quix has no event-time timers for a stateful apply).
"""

from __future__ import annotations

from bench.peers.quix_app import run_pipeline

GAP_MS = 30 * 60 * 1000


def _new_session(event: dict) -> dict:
    return {"start": event["ts"], "end": event["ts"], "events": 0, "page_views": 0, "clicks": 0, "purchases": 0, "purchase_total": 0.0}


def _closed(user_id: str, session: dict, ended_by: str) -> dict:
    return {
        "session_id": f"{user_id}:{session['start']}",
        "user_id": user_id,
        "ended_by": ended_by,
        "duration_ms": session["end"] - session["start"],
        **session,
    }


def on_event(event: dict, state) -> list[dict]:
    """One user event -> the sessions it closes (0, 1 or 2)."""
    closed = []
    session = state.get("session")
    if session is not None and event["ts"] - session["end"] >= GAP_MS:
        closed.append(_closed(event["user_id"], session, "timeout"))
        session = None
    if session is None:
        session = _new_session(event)
    kind = event["type"]
    session["end"] = max(session["end"], event["ts"])
    session["events"] += 1
    session["page_views"] += kind == "page_view"
    session["clicks"] += kind == "click"
    if kind == "purchase":
        session["purchases"] += 1
        session["purchase_total"] += event.get("amount") or 0.0
    if kind == "logout":
        closed.append(_closed(event["user_id"], session, "logout"))
        state.delete("session")
    else:
        state.set("session", session)
    return closed


def pipeline(sdf):
    return sdf.apply(on_event, stateful=True, expand=True)


if __name__ == "__main__":
    run_pipeline("sessions", pipeline)
