"""The session rule, checked against a naive re-implementation and for batch independence."""

from __future__ import annotations

import json
import random
import re

import pytest
from hypothesis import example, given, settings as hsettings, strategies as st

from streamstate_pipeline.contracts import SessionSnapshot
from streamstate_jobs.sessions import rules as sessions

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
        dropped += admitted.duplicates + len(admitted.late)
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
    assert (admitted.accepted, admitted.duplicates, len(admitted.late)) == (1, 1, 1)
    assert [e[1] for e in state["pending"]] == ["b"]


def test_a_re_send_after_its_original_settled_is_a_duplicate_not_a_late_event():
    state = sessions.new_state()
    sessions.admit(state, [(1_000, "a", "click", None)], None)
    sessions.settle(state, "u", 10_000, RULE)
    assert state["pending"] == []
    admitted = sessions.admit(state, [(1_000, "a", "click", None), (500, "a", "page_view", None), (20_000, "a", "logout", None)], 10_000)
    assert (admitted.accepted, admitted.duplicates, admitted.late) == (0, 3, [])


def test_ids_are_remembered_for_the_retention_then_forgotten():
    rule = sessions.SessionRule(gap_ms=RULE.gap_ms, dedupe_retention_ms=60_000)
    state = sessions.new_state()
    sessions.admit(state, [(1_000, "a", "click", None)], None)
    sessions.settle(state, "u", 61_000, rule)  # 1,000 + 60,000 is not yet behind the watermark
    assert sessions.admit(state, [(70_000, "a", "click", None)], 61_000).duplicates == 1
    sessions.settle(state, "u", 61_001, rule)
    admitted = sessions.admit(state, [(70_000, "a", "click", None)], 61_001)
    assert admitted.accepted == 1, "an id older than the retention may be used again"


@given(st.lists(st.tuples(st.integers(0, 200_000), st.integers(0, 40)), max_size=60), st.lists(st.integers(0, 300_000), max_size=8))
def test_the_remembered_ids_are_exactly_those_within_the_retention(arrivals, watermarks):
    """The pruning floor is a shortcut only: what is remembered equals the naive filter."""
    rule = sessions.SessionRule(gap_ms=RULE.gap_ms, dedupe_retention_ms=50_000)
    state = sessions.new_state()
    naive: dict[bytes, int] = {}
    watermark = None
    for i, (ts, event) in enumerate(arrivals):
        if i < len(watermarks) and (watermark is None or watermarks[i] > watermark):
            watermark = watermarks[i]
            sessions.settle(state, "u", watermark, rule)
            naive = {h: t for h, t in naive.items() if t >= watermark - rule.dedupe_retention_ms}
        hashed = sessions.id_hash(f"e{event}")
        if sessions.admit(state, [(ts, f"e{event}", "click", None)], watermark).accepted:
            naive[hashed] = ts
        assert state["seen"] == naive
    assert state["seen_floor"] == (min(state["seen"].values()) if state["seen"] else None)


def test_the_first_arrival_wins_a_re_send_with_a_changed_ts():
    state, result = sessions.fold_all([(5_000, "a", "logout", None), (1_000, "a", "click", None)], "u", 10**9, RULE)
    assert [(c.start, c.ended_by) for c in result.closed] == [(5_000, "logout")]


def test_late_events_are_rejected_with_their_source_and_the_watermark():
    state = sessions.new_state()
    source = ("user-events", 3, 42, 1_700_000_000_000)
    admitted = sessions.admit(state, [(4_000, "a", "click", None, source)], 5_000)
    [late] = admitted.late
    assert late.stage == "late" and late.event[4] == list(source)
    assert late.reason == (
        "late event: event time 4000 ms is at or behind the watermark 5000 ms (1000 ms behind); "
        "the user's events up to the watermark were already folded"
    )
    assert state["pending"] == [] and state["seen"] == {}


def test_only_a_purchase_keeps_its_source_while_pending():
    """The one event a fold can reject keeps where it came from; the others do not need to."""
    state = sessions.new_state()
    events = [(1_000 + i, f"e{i}", kind, amount, ("user-events", 0, i, 99)) for i, (kind, amount) in
              enumerate([("click", None), ("purchase", 5.0), ("purchase", None), ("page_view", None)])]
    sessions.admit(state, events, 0)
    assert [(e[2], e[4]) for e in state["pending"]] == [
        ("click", None), ("purchase", ["user-events", 0, 1, 99]), ("purchase", None), ("page_view", None)
    ]


def test_a_purchase_that_would_overflow_the_total_is_rejected_and_the_session_goes_on():
    source = ("user-events", 0, 7, 99)
    events = [
        (1_000, "p1", "purchase", 1e308),
        (2_000, "p2", "purchase", 1e308, source),
        (3_000, "p3", "purchase", -1e308),
        (4_000, "o", "logout", None),
    ]
    state, result = sessions.fold_all(events, "u", 10**9, RULE)
    [closed] = result.closed
    assert closed.purchases == 2 and closed.purchase_total == 0.0 and closed.events == 3
    [rejected] = result.rejected
    assert rejected.event[:2] == [2_000, "p2"] and rejected.event[4] == list(source) and rejected.stage == "state"
    assert "out of the range of a double" in rejected.reason
    sessions.snapshot("u", state, RULE).model_dump_json()
    closed.model_dump_json()


def test_an_idle_user_expires_after_the_ttl_and_only_then():
    rule = sessions.SessionRule(gap_ms=1_000, idle_ttl_ms=10_000)
    state = sessions.new_state()
    sessions.admit(state, [(100, "a", "click", None)], None)
    assert sessions.next_deadline(state, rule) == 100
    sessions.settle(state, "u", 100, rule)
    assert sessions.next_deadline(state, rule) == 1_100  # the session's inactivity close
    sessions.settle(state, "u", 1_100, rule)
    assert state["open"] is None and sessions.next_deadline(state, rule) == 10_100
    assert not sessions.expired(state, 10_099, rule)
    assert sessions.expired(state, 10_100, rule)


@given(st.lists(st.integers(0, 5_000), min_size=1, max_size=400))
@hsettings(max_examples=100, deadline=None)
def test_the_burst_window_count_equals_the_naive_count(gaps):
    rule = sessions.SessionRule(gap_ms=10**9, burst_page_views=10**9, burst_window_ms=60_000)
    session = {"recent_views": [], "recent_from": 0}
    ts = 0
    seen = []
    for gap in gaps:
        ts += gap
        seen.append(ts)
        count = sessions._recent_views(session, ts, rule.burst_window_ms)
        assert count == sum(1 for t in seen if t > ts - rule.burst_window_ms)


@given(events_strategy, st.integers(min_value=0, max_value=2**32))
@example([(0, "e0", "purchase", 1.192092896e-07)], 0)  # a small amount: Python writes e-07, pydantic e-7
@example([(0, "e0", "purchase", 1e-05)], 0)  # Python writes 1e-05, pydantic 0.00001
@hsettings(max_examples=150, deadline=None)
def test_the_published_snapshot_json_is_the_validated_snapshot(events, seed):
    """snapshot_json skips building the model: the API's strict parse of it must give the model."""
    rng = random.Random(seed)
    state, _ = sessions.fold_all(events, "u", rng.choice([0, max(e[0] for e in events) // 2, 10**12]), RULE)
    published = sessions.snapshot_json("u", state, RULE)
    assert published == json.dumps(sessions.snapshot_fields("u", state, RULE), separators=(",", ":"), allow_nan=False)
    assert SessionSnapshot.model_validate_json(published, strict=True) == sessions.snapshot("u", state, RULE)
    # Same text but for how a float is spelled (Python writes 1e-05 and 1e+300, pydantic 0.00001 and 1e300).
    assert _floats_plain(published) == _floats_plain(sessions.snapshot("u", state, RULE).model_dump_json())


def _floats_plain(text: str) -> str:
    """Every float literal in Python's spelling (the same rewrite on both sides, strings included)."""
    return re.sub(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?", lambda m: m[0] if m[0].lstrip("-").isdigit() else repr(float(m[0])), text)


def test_ids_are_remembered_as_128_bit_hashes_and_a_64_bit_state_still_finds_its_duplicates():
    import hashlib

    state = sessions.new_state()
    sessions.admit(state, [(1_000, "e1", "click", None)], None)
    assert [len(h) for h in state["seen"]] == [16]
    # A state saved by the 64-bit version: no marker, an 8-byte hash.
    legacy = sessions.new_state()
    del legacy["seen_bits"]
    legacy["seen"] = {hashlib.blake2b(b"old", digest_size=8).digest(): 1_000}
    legacy["seen_floor"] = 1_000
    admitted = sessions.admit(legacy, [(2_000, "old", "click", None), (2_000, "new", "click", None)], None)
    assert (admitted.duplicates, admitted.accepted) == (1, 1), "the re-sent id is found by its 64-bit hash"
    rule = sessions.SessionRule(gap_ms=RULE.gap_ms, dedupe_retention_ms=500)
    sessions.settle(legacy, "u", 1_600, rule)  # the 64-bit entry (1,000) leaves the retention
    assert legacy["seen_bits"] == 128 and all(len(h) == 16 for h in legacy["seen"])


@given(st.text(min_size=1, max_size=20), st.text(min_size=1, max_size=12))
@hsettings(max_examples=100, deadline=None)
def test_the_snapshot_json_writes_any_user_id_and_event_type_as_json_dumps_does(user_id, event_type):
    """Quotes, control characters, non-ASCII and lone surrogates: json.dumps' escapes, byte for byte."""
    state, _ = sessions.fold_all([(1_000, "e1", event_type, None), (2_000, "e2", "purchase", 2.5)], user_id, 1_500, RULE)
    published = sessions.snapshot_json(user_id, state, RULE)
    assert published == json.dumps(sessions.snapshot_fields(user_id, state, RULE), separators=(",", ":"), allow_nan=False)
    assert json.loads(published)["user_id"] == user_id


def test_a_snapshot_with_a_number_json_cannot_write_is_refused_as_json_dumps_refuses_it():
    state, _ = sessions.fold_all([(1_000, "e1", "purchase", 1.0)], "u", 1_000, RULE)
    state["open"]["purchase_total"] = float("inf")  # the fold never leaves one: only a damaged state holds it
    with pytest.raises(ValueError, match="not JSON compliant"):
        sessions.snapshot_json("u", state, RULE)
