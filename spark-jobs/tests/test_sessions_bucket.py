"""The sessions rule over a bucket's columns against the per-user rule it must equal.

The reference is the job's own per-user spec run by the state library's in-memory engine
(``StateTester``): the same events, batch cuts and watermarks through both must give the same
alerts, sessions, dead letters and snapshots per key, the same counter totals, and states that
convert to the per-user rule's (the burst window's page views compared as the views a later
one can still see). Snapshots by design differ in one way: the bucket form publishes one only when
what it shows changes, so the reference's repeats of a user's last snapshot are left out.
"""

from __future__ import annotations

import collections
import json

import pytest
from hypothesis import example, given, settings as hsettings, strategies as st

from streamstate.state.tester import StateTester
from streamstate_jobs.sessions import bucket, rules
from streamstate_jobs.sessions.columns import TYPES, SessionColumns, events_table
from streamstate_jobs.sessions.fold import session_json
from streamstate_jobs.sessions import job as sessions_job
from streamstate_pipeline.settings import Settings

SETTINGS = Settings(
    session_gap_ms=100, burst_page_views=3, burst_window_ms=50, long_session_ms=300, dedupe_retention_ms=400,
    session_state_ttl_ms=600,
)
RULE = rules.SessionRule.from_settings(SETTINGS)
USERS = ["u1", "u2", "üser \"3\"", "u4"]
HUGE = 1.5e308  # two of them in one session overflow a double


def _value(user: str, ts: int, event_id: str, kind: str, amount: float | None, offset: int) -> dict:
    return {"user_id": user, "ts": ts, "event_id": event_id, "type": kind, "amount": amount, "topic": "user-events",
            "partition": 0, "offset": offset, "kafka_ts": ts}


events_strategy = st.lists(
    st.tuples(
        st.sampled_from(USERS),
        st.integers(min_value=0, max_value=150).map(lambda t: t * 10),  # coarse: times meet the bounds exactly
        st.integers(min_value=0, max_value=12),  # a small id pool: re-sent copies, changed times
        st.sampled_from(list(TYPES)),
        st.one_of(st.none(), st.sampled_from([0.0, 1.5, 20.25, HUGE, -HUGE])),
    ),
    min_size=0,
    max_size=40,
)


def _run(arrival: list[dict], cuts: list[int], delay: int, switch_at: int = 0) -> tuple:
    """Both forms over the same batches; (reference rows, bucket rows, reference tester, bucket
    state). With ``switch_at``, the bucket form starts at that batch from the per-user states
    the reference holds then (a checkpoint of the per-key engine carried on), and the
    reference's rows are those from then on."""
    tester = StateTester(sessions_job.state_spec(SETTINGS), watermark_delay_ms=delay)
    state = SessionColumns()
    watermark, max_ts, first = 0, None, 0
    got: list[tuple] = []
    for index, (lo, hi) in enumerate(zip([0, *cuts], [*cuts, len(arrival)])):
        if index == switch_at and switch_at:
            state = SessionColumns.of_user_states(_states(tester), RULE)
            first = len(tester.rows)
        batch = arrival[lo:hi]
        tester.run_batch([(e["user_id"], e, e["ts"]) for e in batch])
        if batch:
            max_ts = max([e["ts"] for e in batch] + ([] if max_ts is None else [max_ts]))
        if index < switch_at:
            watermark = tester.watermark_ms
            continue
        state = _collect(bucket.visit(state, events_table(batch) if batch else None, watermark, RULE), got)
        if batch:
            moved = max(watermark, max_ts - delay)
            if moved > watermark:
                watermark = moved
                state = _collect(bucket.visit(state, None, watermark, RULE), got)
    assert tester.watermark_ms == watermark
    return _reference_as_published(tester.rows, first), got, tester, state


def _reference_as_published(rows: list, first: int) -> list[tuple]:
    """The reference's rows from ``first`` on without the snapshots that repeat the user's one
    before: the state library publishes a snapshot whenever a user's state changes, the bucket
    form only when what it shows changes (folding held events for real does not: the snapshot
    folded them provisionally already)."""
    shown: dict = {}
    published = []
    for index, row in enumerate(rows):
        if row.kind == "snapshot":
            if row.key in shown and shown[row.key] == row.payload:
                continue
            shown[row.key] = row.payload
        if index >= first:
            published.append((row.kind, row.key, row.payload))
    return published


def _states(tester: StateTester) -> dict:
    return {user: tester.codec.decode(user, text) for user, text in tester.store.items()}


def _collect(result: bucket.Visit, rows: list[tuple]) -> SessionColumns:
    rows.extend((str(e.kind), e.key, e.payload) for e in result.records)
    rows.extend(("snapshot", user, payload) for user, payload in result.snapshots)
    return result.state


def _by_key(rows: list[tuple]) -> tuple[dict, dict]:
    """Per (kind, key) the payloads in order; the counters as totals."""
    sequences: dict = collections.defaultdict(list)
    totals: collections.Counter = collections.Counter()
    for kind, key, payload in rows:
        if kind == "count":
            totals[key] += int(payload)
        else:
            sequences[(kind, key)].append(payload)
    return dict(sequences), +totals


def _comparable(state: dict) -> dict:
    """A per-user state without what differs only in form: where the burst window's list starts."""
    state = json.loads(json.dumps({**state, "seen": {h.hex(): ts for h, ts in state["seen"].items()}}))
    session = state["open"]
    if session is not None:
        recent = session["recent_views"][session.pop("recent_from", 0):]
        session["recent_views"] = [ts for ts in recent if ts > recent[-1] - RULE.burst_window_ms] if recent else []
        session["alerted"] = sorted(session["alerted"])
    state.pop("seen_floor")
    return state


def _check(raw: list[tuple], cut_points: list[int], delay: int, switch_at: int = 0) -> None:
    arrival = [_value(user, ts, f"e{i}", kind, amount, n) for n, (user, ts, i, kind, amount) in enumerate(raw)]
    cuts = sorted({c % (len(arrival) + 1) for c in cut_points})
    expected, got, tester, state = _run(arrival, cuts, delay, min(switch_at, len(cuts)))
    assert _by_key(got) == _by_key(expected)
    reference = {user: _comparable(s) for user, s in _states(tester).items()}
    assert {user: _comparable(s) for user, s in state.user_states().items()} == reference


@hsettings(max_examples=300, deadline=None)
@given(events_strategy, st.lists(st.integers(min_value=0, max_value=40), max_size=5), st.integers(min_value=0, max_value=30).map(lambda d: d * 10))
@example(  # a session at and then over its limit, a burst, and a purchase with no view, in one batch then settled
    [("u1", 10, 0, "purchase", 1.5), ("u1", 20, 1, "page_view", None), ("u1", 30, 2, "page_view", None),
     ("u1", 40, 3, "page_view", None), ("u1", 100, 4, "click", None), ("u1", 190, 5, "click", None),
     ("u1", 280, 6, "click", None), ("u1", 310, 9, "click", None), ("u1", 370, 7, "logout", None),
     ("u2", 1_400, 8, "login", None)],
    [], 0,
)
@example(  # a re-sent id with a changed time, late and on time, and an overflowing purchase
    [("u1", 500, 0, "login", None), ("u1", 600, 1, "purchase", HUGE), ("u1", 610, 2, "purchase", HUGE),
     ("u2", 900, 3, "click", None), ("u1", 100, 0, "click", None), ("u1", 950, 0, "click", None)],
    [2, 4], 50,
)
@example(  # one user's total overflows as the watermark settles it, another's in its snapshot's fold
    [("u1", 100, 0, "purchase", HUGE), ("u1", 110, 1, "purchase", HUGE), ("u2", 590, 2, "purchase", HUGE),
     ("u2", 650, 3, "purchase", HUGE), ("u4", 900, 4, "click", None)],
    [], 300,
)
def test_a_bucket_visit_gives_what_the_per_user_rule_gives(raw, cut_points, delay):
    _check(raw, cut_points, delay)


@hsettings(max_examples=150, deadline=None)
@given(events_strategy, st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=5),
       st.integers(min_value=0, max_value=30).map(lambda d: d * 10), st.integers(min_value=1, max_value=5))
def test_per_user_states_carried_on_as_columns_give_what_the_per_user_rule_gives(raw, cut_points, delay, switch_at):
    """A checkpoint of the per-key engine, read by the bucket form from some batch on (the
    engine hands its states to ``from_keys``: SessionColumns.of_user_states)."""
    _check(raw, cut_points, delay, switch_at)


def test_the_visits_records_are_the_per_user_rules_on_a_longer_run():
    """Many users and batches (a seeded run bigger than the property's examples)."""
    import random

    rng = random.Random(7)
    users = [f"user-{i}" for i in range(40)]
    raw = []
    for i in range(3_000):
        ts = i * 3 + rng.randrange(-60, 60)
        raw.append((rng.choice(users), max(ts, 0), rng.randrange(2_500), rng.choice(TYPES), rng.choice([None, 3.0, 7.5])))
    _check(raw, [rng.randrange(3_001) for _ in range(12)], 40)


def test_a_snapshot_is_published_when_what_it_shows_changes_and_not_again_when_its_events_settle():
    held = bucket.visit(SessionColumns(), events_table([_value("u1", 10, "a", "click", None, 0),
                                                        _value("u2", 10, "b", "click", None, 1)]), None, RULE)
    assert [user for user, _ in held.snapshots] == ["u1", "u2"]  # the held events, folded in provisionally
    settled = bucket.visit(held.state, None, 50, RULE)  # both folded for real: the same snapshots
    assert settled.snapshots == [] and settled.state.p_user.size == 0
    idle = bucket.visit(settled.state, events_table([_value("u2", 60, "c", "click", None, 2)]), 110, RULE)
    shown = dict(idle.snapshots)  # u1's session closed for inactivity, u2 had a new event
    assert sorted(shown) == ["u1", "u2"] and json.loads(shown["u1"])["open_session"] is None


def test_states_convert_to_columns_and_back():
    arrival = [_value("u1", 5, "a", "page_view", None, 0), _value("u1", 7, "b", "purchase", 2.5, 1),
               _value("u2", 9, "c", "login", None, 2)]
    _, _, tester, state = _run(arrival, [1], 3)
    states = _states(tester)
    again = SessionColumns.of_user_states(states, RULE).user_states()
    assert {u: _comparable(s) for u, s in again.items()} == {u: _comparable(s) for u, s in states.items()}


@pytest.mark.parametrize("user_id", ["plain", "ü", 'with "quotes"', "tab\there"])
@pytest.mark.parametrize("total", [0.0, 12.5, 1e16, 1.5e-7])
def test_a_closed_sessions_text_is_the_models(user_id, total):
    from streamstate_pipeline.contracts import ClosedSession

    text = session_json(user_id, 10, 25, [3, 1, 1, 1], total, "logout")
    model = ClosedSession(session_id=f"{user_id}:10", user_id=user_id, start=10, end=25, duration_ms=15, events=3,
                          page_views=1, clicks=1, purchases=1, purchase_total=total, ended_by="logout", ts=25)
    assert text == model.model_dump_json()
