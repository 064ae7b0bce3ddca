"""The sessions rule's fold over columns: every called user's settled (or held) events at once.

:func:`fold_events` does what :func:`rules.settle`'s fold does event by event (session
boundaries by gap and logout, counts, the current activity's run, the three alerts, behaviour
and activities) with array operations over events sorted by (user, time, id); purchase totals
are added one by one in that order, as the per-user rule adds them.
"""

from __future__ import annotations

import bisect
import collections
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa

from streamstate_pipeline.contracts import Alert, ClosedSession
from streamstate_jobs.sessions import rules
from streamstate_jobs.sessions.columns import (
    ACTIVITY_START, ALERT_BITS, CLICK, CLICKS, EVENTS, LAST, LOGOUT, NONE, PAGE_VIEW, PAGE_VIEWS, PURCHASE, PURCHASES,
    SESSION_MS, SESSIONS, START, TOTAL_EVENTS, TYPES, VIEWS, SessionColumns, amount_or_none,
)


@dataclass
class Events:
    """Events to fold, sorted by (user, ts, event_id)."""

    user: np.ndarray
    ts: np.ndarray
    types: np.ndarray
    amount: np.ndarray
    rows: np.ndarray  # their rows in the pending columns


def sorted_pending(state: SessionColumns, rows: np.ndarray) -> Events:
    order = rows[np.lexsort((state.p_ts[rows], state.p_user[rows]))]
    user, ts = state.p_user[order], state.p_ts[order]
    # Events of one user at one time fold in event-id order: few, so sorted as Python strings
    # (the per-user rule's own order) rather than ranking every id.
    tied = np.flatnonzero((user[1:] == user[:-1]) & (ts[1:] == ts[:-1]))
    if len(tied):
        first = tied[np.concatenate([[True], tied[1:] != tied[:-1] + 1])]
        last = np.append(tied[np.flatnonzero(tied[1:] != tied[:-1] + 1)], tied[-1]) + 2
        for a, b in zip(first.tolist(), last.tolist()):
            run = order[a:b]
            ids = state.p_id.take(pa.array(run, pa.int64())).to_pylist()
            order[a:b] = run[sorted(range(len(run)), key=ids.__getitem__)]
    return Events(state.p_user[order], state.p_ts[order], state.p_type[order], state.p_amount[order], order)


@dataclass
class Fold:
    """What folding some users' events did to their columns (the arrays are the users' new values)."""

    is_open: np.ndarray
    open: np.ndarray
    total: np.ndarray
    activity: np.ndarray
    alerted: np.ndarray
    behaviour: np.ndarray
    first: np.ndarray
    last: np.ndarray
    r_user: np.ndarray
    r_ts: np.ndarray
    alerts: list[Alert] = field(default_factory=list)
    sessions: list[tuple[int, int, str]] = field(default_factory=list)  # (user, order, JSON)
    opened: int = 0
    ended_by: collections.Counter = field(default_factory=collections.Counter)


def fold_events(state: SessionColumns, events: Events, rule: rules.SessionRule, quiet: bool) -> Fold:
    """The per-user rule's ``_fold`` over every user's events at once (``quiet``: no records)."""
    n, k = state.n, len(events.ts)
    u, ts, types, amount = events.user, events.ts, events.types, events.amount
    gap = rule.gap_ms
    result = Fold(
        state.is_open.copy(), state.open.copy(), state.total.copy(), state.activity.copy(), state.alerted.copy(),
        state.behaviour.copy(), state.first.copy(), state.last.copy(), state.r_user, state.r_ts,
    )
    if not k:
        return result
    first_of_user = np.ones(k, bool)
    first_of_user[1:] = u[1:] != u[:-1]
    carried = first_of_user & state.is_open[u] & (ts - state.open[u, LAST] < gap)
    after_gap = np.zeros(k, bool)
    after_gap[1:] = (ts[1:] - ts[:-1] >= gap) | (types[:-1] == LOGOUT)
    new_session = (first_of_user & ~carried) | (~first_of_user & after_gap)
    segment_start = first_of_user | new_session
    starts = np.flatnonzero(segment_start)
    ends = np.append(starts[1:], k) - 1
    seg_user = u[starts]
    continues = carried[starts]  # the segment goes on with the user's open session
    seg_of = np.cumsum(segment_start) - 1

    # Purchase totals, added in fold order as the per-user rule adds them (floats: the order
    # is the result). None leaves the doubles: visit() sent such users to the per-user rule.
    seg_total = np.where(continues, state.total[seg_user], 0.0)
    paid = np.flatnonzero((types == PURCHASE) & ~np.isnan(amount) & (amount != 0))
    if len(paid):
        totals = seg_total.tolist()
        for s, a in zip(seg_of[paid].tolist(), amount[paid].tolist()):
            totals[s] += a
        seg_total = np.array(totals, np.float64)

    def per_segment(values: np.ndarray) -> np.ndarray:
        return np.add.reduceat(values.astype(np.int64), starts)

    is_view, is_click, is_purchase = types == PAGE_VIEW, types == CLICK, types == PURCHASE
    seg_events, seg_views = per_segment(np.ones(k)), per_segment(is_view)
    seg_clicks, seg_purchases = per_segment(is_click), per_segment(is_purchase)
    base = np.where(continues[:, None], state.open[seg_user], 0)
    seg_start = np.where(continues, base[:, START], ts[starts])
    seg_last = ts[ends]
    # The current activity: the run of equal types the segment ends with (or the open one it extends).
    run_start = segment_start.copy()
    run_start[1:] |= types[1:] != types[:-1]
    last_run = np.maximum.reduceat(np.where(run_start, np.arange(k), -1), starts)
    extends = continues & (last_run == starts) & (state.activity[seg_user] == types[starts])
    seg_activity_start = np.where(extends, base[:, ACTIVITY_START], ts[last_run])
    ended_by_logout = types[ends] == LOGOUT
    last_of_user = np.append(seg_user[1:] != seg_user[:-1], True)
    closes = ended_by_logout | ~last_of_user

    # Alerts, each at most once per session: the first event that qualifies.
    alerted = np.where(continues, state.alerted[seg_user], 0).astype(np.uint8)
    views_until = np.cumsum(is_view) - is_view  # page views before each event, from the first
    views_before = np.where(continues, base[:, VIEWS], 0)[seg_of] + views_until - views_until[starts][seg_of]
    fired: list[tuple[int, int, str, dict]] = []  # (event, order within event, kind, details)
    without_view = np.flatnonzero(is_purchase & (views_before == 0))
    if len(without_view):
        first_hit = np.unique(seg_of[without_view], return_index=True)
        for s, i in zip(first_hit[0].tolist(), without_view[first_hit[1]].tolist()):
            if not alerted[s] & ALERT_BITS["purchase_without_view"]:
                alerted[s] |= ALERT_BITS["purchase_without_view"]
                fired.append((i, 0, "purchase_without_view", {"amount": amount_or_none(amount[i])}))
    too_long = np.flatnonzero(ts - seg_start[seg_of] > rule.long_session_ms)
    if len(too_long):
        first_hit = np.unique(seg_of[too_long], return_index=True)
        for s, i in zip(first_hit[0].tolist(), too_long[first_hit[1]].tolist()):
            if not alerted[s] & ALERT_BITS["long_session"]:
                alerted[s] |= ALERT_BITS["long_session"]
                fired.append((i, 1, "long_session", {"duration_ms": int(ts[i] - seg_start[s]), "limit_ms": rule.long_session_ms}))
    carried_views = _recent_views_of(state, seg_user, continues)
    for s in np.flatnonzero(np.array([len(v) for v in carried_views]) + seg_views >= rule.burst_page_views).tolist():
        recent = list(carried_views[s])
        rows = np.flatnonzero(is_view[starts[s]:ends[s] + 1]) + starts[s]
        for i in rows.tolist():
            recent.append(int(ts[i]))
            in_window = len(recent) - bisect.bisect_right(recent, int(ts[i]) - rule.burst_window_ms)
            if in_window >= rule.burst_page_views:
                if not alerted[s] & ALERT_BITS["bot_burst"]:
                    alerted[s] |= ALERT_BITS["bot_burst"]
                    fired.append((i, 0, "bot_burst", {"page_views": in_window, "window_ms": rule.burst_window_ms}))
                break

    # The users' new columns.
    counts = np.stack([seg_events, seg_views, seg_clicks, seg_purchases], axis=1) + base[:, [EVENTS, VIEWS, CLICKS, PURCHASES]]
    duration = seg_last - seg_start
    user_events = np.bincount(u, minlength=n)
    user_views = np.bincount(u, weights=is_view, minlength=n).astype(np.int64)
    closed_segments = np.flatnonzero(closes)
    # A carried session the first event comes too late for closes before it, by timeout.
    gap_closed = np.flatnonzero(first_of_user & state.is_open[u] & ~carried)
    gap_users = u[gap_closed]
    result.behaviour[:, TOTAL_EVENTS] += user_events
    result.behaviour[:, PAGE_VIEWS] += user_views
    np.add.at(result.behaviour[:, SESSIONS], seg_user[closed_segments], 1)
    np.add.at(result.behaviour[:, SESSION_MS], seg_user[closed_segments], duration[closed_segments])
    gap_durations = state.open[gap_users, LAST] - state.open[gap_users, START]
    np.add.at(result.behaviour[:, SESSIONS], gap_users, 1)
    np.add.at(result.behaviour[:, SESSION_MS], gap_users, gap_durations)
    for t in range(len(TYPES)):
        of_type = types == t
        if of_type.any():
            lo_ts = np.full(n, np.iinfo(np.int64).max, np.int64)
            hi_ts = np.full(n, NONE, np.int64)
            np.minimum.at(lo_ts, u[of_type], ts[of_type])
            np.maximum.at(hi_ts, u[of_type], ts[of_type])
            seen = hi_ts != NONE
            had = result.first[:, t] != NONE
            result.first[seen, t] = np.where(had[seen], np.minimum(result.first[seen, t], lo_ts[seen]), lo_ts[seen])
            result.last[seen, t] = np.maximum(result.last[seen, t], hi_ts[seen])
    final = np.flatnonzero(last_of_user)
    final_user = seg_user[final]
    stays_open = ~closes[final]
    result.is_open[final_user] = stays_open
    result.open[final_user] = np.stack(
        [seg_start[final], seg_last[final], counts[final, 0], counts[final, 1], counts[final, 2], counts[final, 3],
         seg_activity_start[final]], axis=1,
    )
    result.total[final_user] = seg_total[final]
    result.activity[final_user] = types[ends[final]]
    result.alerted[final_user] = alerted[final]
    result.r_user, result.r_ts = _recent_views_after(state, events, seg_user, continues, starts, ends, final, stays_open, rule)
    result.opened = int(new_session.sum())
    if quiet:
        return result

    # Records: the alerts in fold order, the sessions each user closed in order.
    for i, _, kind, details in sorted(fired, key=lambda f: (f[0], f[1])):
        user_id = state.users[int(u[i])]
        result.alerts.append(Alert.build(kind, user_id, int(ts[i]), rules.alert_message(kind, user_id, details), **details))
    for row, user_row in zip(gap_closed.tolist(), gap_users.tolist()):
        result.sessions.append((user_row, 2 * row, open_session_json(state, user_row)))
        result.ended_by["timeout"] += 1
    closing = zip(
        seg_user[closed_segments].tolist(), ends[closed_segments].tolist(), seg_start[closed_segments].tolist(),
        seg_last[closed_segments].tolist(), counts[closed_segments].tolist(), seg_total[closed_segments].tolist(),
        ended_by_logout[closed_segments].tolist(),
    )
    for user_row, end, start, last, session_counts, total, by_logout in closing:
        ended_by = "logout" if by_logout else "timeout"
        result.sessions.append((user_row, 2 * end + 1, session_json(state.users[user_row], start, last, session_counts, total, ended_by)))
        result.ended_by[ended_by] += 1
    return result


def _recent_views_of(state: SessionColumns, seg_user: np.ndarray, continues: np.ndarray) -> list[np.ndarray]:
    """The burst window's page views each segment carries on (none for a new session)."""
    empty = np.zeros(0, np.int64)
    if not len(state.r_user):
        return [empty] * len(seg_user)
    order = np.lexsort((state.r_ts, state.r_user))
    r_user, r_ts = state.r_user[order], state.r_ts[order]
    lo = np.searchsorted(r_user, seg_user, "left")
    hi = np.searchsorted(r_user, seg_user, "right")
    return [r_ts[a:b] if c else empty for a, b, c in zip(lo.tolist(), hi.tolist(), continues.tolist())]


def _recent_views_after(
    state: SessionColumns, events: Events, seg_user: np.ndarray, continues: np.ndarray, starts: np.ndarray,
    ends: np.ndarray, final: np.ndarray, stays_open: np.ndarray, rule: rules.SessionRule,
) -> tuple[np.ndarray, np.ndarray]:
    """The page views each user's open session keeps for the burst window once folded: those
    within the window of its latest one (a later view can only see those)."""
    folded = np.zeros(state.n, bool)
    folded[seg_user] = True
    keep_old = ~folded[state.r_user]  # users with nothing folded keep theirs
    carried_on = np.zeros(state.n, bool)
    open_final = final[stays_open]
    carried_on[seg_user[open_final[continues[open_final]]]] = True
    keep_old |= carried_on[state.r_user]
    in_final = np.zeros(len(events.ts), bool)
    for s in open_final.tolist():
        in_final[starts[s]:ends[s] + 1] = True
    new = in_final & (events.types == PAGE_VIEW)
    users = np.concatenate([state.r_user[keep_old], events.user[new]])
    times = np.concatenate([state.r_ts[keep_old], events.ts[new]])
    if not len(users):
        return users, times
    latest = np.full(state.n, np.iinfo(np.int64).min, np.int64)
    np.maximum.at(latest, users, times)
    keep = (times > latest[users] - rule.burst_window_ms) | ~folded[users]
    order = np.lexsort((times[keep], users[keep]))
    return users[keep][order], times[keep][order]


def open_session_json(state: SessionColumns, i: int) -> str:
    """User ``i``'s open session, closed by timeout, as :func:`session_json`."""
    o = state.open[i].tolist()
    return session_json(state.users[i], o[START], o[LAST], [o[EVENTS], o[VIEWS], o[CLICKS], o[PURCHASES]],
                        float(state.total[i]), "timeout")


def session_json(user_id: str, start: int, end: int, counts: list[int], purchase_total: float, ended_by: str) -> str:
    """``ClosedSession(...).model_dump_json()``, written directly where the text is plain (the
    model where an id or a float needs its escaping or exponent form)."""
    events, page_views, clicks, purchases = counts
    total = repr(purchase_total)
    if user_id.isascii() and user_id.isprintable() and '"' not in user_id and "\\" not in user_id and "e" not in total and "n" not in total:
        return (
            f'{{"session_id":"{user_id}:{start}","user_id":"{user_id}","start":{start},"end":{end},'
            f'"duration_ms":{end - start},"events":{events},"page_views":{page_views},"clicks":{clicks},'
            f'"purchases":{purchases},"purchase_total":{total},"ended_by":"{ended_by}","ts":{end}}}'
        )
    return ClosedSession(
        session_id=f"{user_id}:{start}", user_id=user_id, start=start, end=end, duration_ms=end - start, events=events,
        page_views=page_views, clicks=clicks, purchases=purchases, purchase_total=purchase_total, ended_by=ended_by,
        ts=end,
    ).model_dump_json()


def apply_fold(state: SessionColumns, fold: Fold) -> SessionColumns:
    return replace(
        state, is_open=fold.is_open, open=fold.open, total=fold.total, activity=fold.activity, alerted=fold.alerted,
        behaviour=fold.behaviour, first=fold.first, last=fold.last, r_user=fold.r_user, r_ts=fold.r_ts,
    )


