"""The session rule, checked against a naive re-implementation and for batch independence."""

from __future__ import annotations

import random

from hypothesis import given, settings as hsettings, strategies as st

from streamstate.jobs.rules import sessions

RULE = sessions.SessionRule(gap_ms=30 * 60_000, burst_page_views=5, burst_window_ms=60_000, long_session_ms=3 * 3600_000)
TYPES = ["login", "page_view", "click", "purchase", "logout"]


def naive_sessions(events, gap_ms):
    """Sessions as (start, end, count, ended_by) from the rule's words, on sorted events."""
    out, current = [], None
    for ts, _eid, etype, _amount in sorted(events, key=lambda e: (e[0], e[1])):
        if current and ts - current[1] >= gap_ms:
            out.append((current[0], current[1], current[2], "timeout"))
            current = None
        current = [ts, ts, 1] if current is None else [current[0], ts, current[2] + 1]
        if etype == "logout":
            out.append((current[0], current[1], current[2], "logout"))
            current = None
    return out, current


events_strategy = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=6 * 3600_000),
        st.sampled_from(TYPES),
        st.one_of(st.none(), st.floats(min_value=0, max_value=500, allow_nan=False)),
    ),
    min_size=1,
    max_size=60,
).map(lambda xs: [(ts, f"e{i}", t, a) for i, (ts, t, a) in enumerate(xs)])


def replay_in_batches(arrival, rng, batches, lateness, final_watermark):
    """Feed ``arrival`` cut into up to ``batches`` random micro-batches as the job does (admit,
    then settle up to the watermark of the batches before), then settle up to the final
    watermark: (state, alerts, closed sessions, events dropped as duplicate or late)."""
    cuts = sorted(rng.sample(range(len(arrival) + 1), min(batches, len(arrival) + 1)))
    state, alerts, closed, max_ts, dropped = sessions.new_state(), [], [], None, 0
    for lo, hi in zip([0, *cuts], [*cuts, len(arrival)]):
        watermark = None if max_ts is None else max_ts - lateness
        admitted = sessions.admit(state, arrival[lo:hi], watermark)
        dropped += admitted.duplicates + admitted.late
        result = sessions.settle(state, "u", watermark, RULE)
        alerts += result.alerts
        closed += result.closed
        batch_max = max((e[0] for e in arrival[lo:hi]), default=None)
        if batch_max is not None:
            max_ts = batch_max if max_ts is None else max(max_ts, batch_max)
    result = sessions.settle(state, "u", final_watermark, RULE)
    return state, alerts + result.alerts, closed + result.closed, dropped


@given(events_strategy)
@hsettings(max_examples=200, deadline=None)
def test_closed_sessions_match_the_naive_rule(events):
    watermark = 10 * 3600_000  # beyond every event and every gap: everything settles
    state, result = sessions.fold_all(events, "u", watermark, RULE)
    expected, still_open = naive_sessions(events, RULE.gap_ms)
    if still_open:
        expected.append((still_open[0], still_open[1], still_open[2], "timeout"))
    assert [(c.start, c.end, c.events, c.ended_by) for c in result.closed] == expected
    assert state["open"] is None
    assert state["behaviour"]["total_sessions"] == len(expected)
    assert state["behaviour"]["total_events"] == len(events)


@given(events_strategy, st.integers(min_value=0, max_value=2**32), st.integers(min_value=1, max_value=8))
@hsettings(max_examples=200, deadline=None)
def test_outcome_does_not_depend_on_micro_batching(events, seed, batches):
    """Arrival in any order within the lateness bound, cut into any batches: same outputs."""
    lateness = 10 * 60_000
    final_watermark = max((e[0] for e in events), default=0) - lateness
    whole_state, whole = sessions.fold_all(events, "u", final_watermark, RULE)

    rng = random.Random(seed)
    # Arrival order: event-time order, perturbed by less than the lateness bound.
    arrival = sorted(events, key=lambda e: e[0] + rng.randrange(lateness // 2))
    state, alerts, closed, dropped = replay_in_batches(arrival, rng, batches, lateness, final_watermark)

    assert dropped == 0, "scenario must not contain late-dropped events"
    assert closed == whole.closed
    assert alerts == whole.alerts
    assert sessions.snapshot("u", state, RULE) == sessions.snapshot("u", whole_state, RULE)


def test_logout_closes_and_next_event_opens_a_new_session():
    events = [(0, "a", "login", None), (1000, "b", "page_view", None), (2000, "c", "logout", None), (3000, "d", "click", None)]
    state, result = sessions.fold_all(events, "u", 10_000, RULE)
    assert [(c.start, c.end, c.ended_by, c.page_views) for c in result.closed] == [(0, 2000, "logout", 1)]
    snap = sessions.snapshot("u", state, RULE)
    assert snap.open_session.start == 3000 and snap.open_session.current_activity == "click"
    assert snap.activities["logout"].first == 2000
    assert snap.behaviour.total_sessions == 1 and snap.behaviour.avg_session_ms == 2000


def test_gap_equal_to_the_inactivity_gap_starts_a_new_session():
    gap = RULE.gap_ms
    events = [(0, "a", "page_view", None), (gap - 1, "b", "page_view", None), (2 * gap - 1, "c", "page_view", None)]
    _, result = sessions.fold_all(events, "u", 10 * gap, RULE)
    assert [(c.start, c.end) for c in result.closed] == [(0, gap - 1), (2 * gap - 1, 2 * gap - 1)]


def test_alerts_fire_once_per_session_with_deterministic_ids():
    views = [(i * 1000, f"v{i}", "page_view", None) for i in range(1, 9)]
    purchase = [(100, "p", "purchase", 9.5)]
    _, result = sessions.fold_all(purchase + views, "u", 10**9, RULE)
    kinds = [(a.kind, a.ts) for a in result.alerts]
    assert kinds == [("purchase_without_view", 100), ("bot_burst", 5000)]
    _, again = sessions.fold_all(list(reversed(purchase + views)), "u", 10**9, RULE)
    assert [a.alert_id for a in again.alerts] == [a.alert_id for a in result.alerts]


def test_long_session_alert():
    step = 20 * 60_000
    events = [(i * step, f"e{i}", "click", None) for i in range(12)]
    _, result = sessions.fold_all(events, "u", 0, RULE)
    assert result.alerts == []  # nothing settled below the watermark yet
    _, result = sessions.fold_all(events, "u", 10**9, RULE)
    assert [(a.kind, a.ts) for a in result.alerts] == [("long_session", 10 * step)]


def test_pending_events_show_in_the_snapshot_but_emit_nothing():
    events = [(0, "a", "login", None), (5000, "b", "purchase", 3.0)]
    state, result = sessions.fold_all(events, "u", 1000, RULE)
    assert result.alerts == [] and result.closed == []
    snap = sessions.snapshot("u", state, RULE)
    assert snap.open_session.purchases == 1 and snap.ts == 5000
    assert sessions.next_deadline(state, RULE) == 5000


@given(events_strategy, st.integers(min_value=0, max_value=2**32), st.integers(min_value=1, max_value=8))
@hsettings(max_examples=200, deadline=None)
def test_admit_drops_re_sent_events_whenever_they_arrive(events, seed, batches):
    """Copies re-sent at any later point (pending or already settled): same outcome as without them."""
    lateness = 10 * 60_000
    final_watermark = max(e[0] for e in events) - lateness
    whole_state, whole = sessions.fold_all(events, "u", final_watermark, RULE)

    rng = random.Random(seed)
    arrival = sorted(events, key=lambda e: e[0] + rng.randrange(lateness // 2))
    for original in rng.sample(events, rng.randint(1, len(events))):
        arrival.insert(rng.randint(arrival.index(original) + 1, len(arrival)), original)
    state, alerts, closed, dropped = replay_in_batches(arrival, rng, batches, lateness, final_watermark)

    assert dropped == len(arrival) - len(events)
    assert closed == whole.closed
    assert alerts == whole.alerts
    assert sessions.snapshot("u", state, RULE) == sessions.snapshot("u", whole_state, RULE)


def test_admit_counts_late_events_and_keeps_them_out_of_state():
    state = sessions.new_state()
    admitted = sessions.admit(state, [(5_000, "a", "click", None), (9_000, "b", "click", None), (9_000, "b", "click", None)], 5_000)
    assert (admitted.accepted, admitted.duplicates, admitted.late) == (1, 1, 1)
    assert [e[1] for e in state["pending"]] == ["b"]
