"""The sessions rule over a bucket of users at once, as columns: pure Python, NumPy and Arrow.

The per-user rule (:mod:`~streamstate_jobs.sessions.rules`, called per user by
:func:`~streamstate_jobs.sessions.per_user.on_user`) spends its time in Python per event and
per user: a dict per user state, a list per held event, a call per fold. Here one visit takes a
bucket's new events as an Arrow table and its users' states as columns
(:class:`~streamstate_jobs.sessions.columns.SessionColumns`), and does the same work with array
operations over all of them: admission (de-duplication, lateness), the fold of what the
watermark settles (:mod:`~streamstate_jobs.sessions.fold`: session boundaries, counts, activity
runs, the three alerts), idle expiry, and a snapshot for each user whose snapshot changed.

The per-user rule is the reference, and the tests hold the two together over random events,
batch cuts and watermarks: the same alerts, sessions, dead letters and snapshots, and states
that convert (:meth:`SessionColumns.user_states`) to the per-user rule's. Three differences, all
by design: the counters are summed over the visit (one ``count`` row per counter, not per user),
the records come grouped by kind rather than user by user (each user's own sessions and
snapshot keep their order), and a user's snapshot is not published again when it would repeat
the last one (the state library publishes one whenever the per-user state changes). A user
whose purchases could take a session's total out of the range of a double
(:data:`OVERFLOW_BOUND`) is run through the per-user rule instead: the rule refuses such a
purchase, which moves every session boundary after it, and only the event-by-event fold
decides that.
"""

from __future__ import annotations

import collections
import copy
from dataclasses import dataclass, replace
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamstate.state import Columns, Emit
from streamstate.state.bucket_function import BucketResult
from streamstate.state.columns import ROW_VALUES
from streamstate.state.packing import python_values
from streamstate.state.state import NO_STATE, StateDriver
from streamstate_jobs.kinds import Kind
from streamstate_jobs.rules.dead_letters import refused_event
from streamstate_jobs.sessions import rules
from streamstate_jobs.sessions.columns import (
    EVENT_COLUMNS, LAST, NONE, PURCHASE, SESSION_MS, SESSIONS, START, TYPE_NAMES, TYPES, SessionColumns, amount_or_none, drop_rows, id_hashes, objects,
)
from streamstate_jobs.sessions.fold import apply_fold, fold_events, open_session_json, sorted_pending
from streamstate_jobs.sessions.per_user import on_user, user_snapshot
from streamstate_jobs.validation import dead_letter_row


# ---------------------------------------------------------------------------------- a visit
@dataclass
class Visit:
    """What one visit leaves: the bucket's new state, its records (alerts, sessions, dead
    letters, counters) and its changed users' snapshots (``None``: the user's state is gone)."""

    state: SessionColumns
    records: list[Emit]
    snapshots: list[tuple[str, str | None]]

    def next_deadline(self, rule: rules.SessionRule) -> int | None:
        """The earliest watermark at which some user has work (the bucket's timer), or None."""
        deadlines = self.state.deadlines(rule)
        return int(deadlines.min()) if len(deadlines) else None


@dataclass
class _Arrivals:
    """A visit's new events in arrival order, with each one's user row and fate."""

    user: np.ndarray
    ts: np.ndarray
    ids: pa.Array
    types: np.ndarray
    amount: np.ndarray
    events: pa.Table  # for the sources of the few events that keep theirs
    status: np.ndarray  # ACCEPTED, DUPLICATE or LATE
    hi: np.ndarray
    lo: np.ndarray

    def sources(self, rows: np.ndarray) -> list[tuple]:
        """(topic, partition, offset, Kafka timestamp ms) of the events at ``rows``."""
        picked = self.events.select(["topic", "partition", "offset", "kafka_ts"]).take(pa.array(rows, pa.int64()))
        return list(zip(*(column.to_pylist() for column in picked.columns)))


ACCEPTED, DUPLICATE, LATE = 0, 1, 2


def visit(state: SessionColumns, events: pa.Table | None, watermark_ms: int | None, rule: rules.SessionRule) -> Visit:
    """One visit of a bucket: hold its new ``events`` (in any order; arrival order is their
    (partition, offset)), then settle every user the per-user engine would call (those with
    events, and those whose :meth:`~SessionColumns.deadlines` the watermark has reached)."""
    sequential = _may_overflow(state, events)
    if not sequential:
        return _visit(state, events, watermark_ms, rule)
    theirs = np.array([user in sequential for user in state.users], bool)
    mine, rest = _split_events(events, sequential)
    columns = _visit(state.select(~theirs), rest, watermark_ms, rule)
    per_user = _per_user_visit(state.select(theirs), mine, sequential, watermark_ms, rule)
    return Visit(columns.state.concat(per_user.state), columns.records + per_user.records,
                 columns.snapshots + per_user.snapshots)


# A session's purchase total can only leave the doubles (about 1.8e308) if its open total and
# the sizes of every purchase the user holds or receives add up to more than this: below it,
# no running total can overflow, rounding included, and the columns decide every user.
OVERFLOW_BOUND = 1e307


def _may_overflow(state: SessionColumns, events: pa.Table | None) -> set[str]:
    """The users whose purchases could take a session's total out of the doubles: the fold
    refuses such a purchase, which moves every boundary after it, so they go through the
    per-user rule (hostile amounts only: an ordinary bucket has none)."""
    held = np.where(state.is_open, np.abs(state.total), 0.0)
    paid = (state.p_type == PURCHASE) & ~np.isnan(state.p_amount)
    with np.errstate(over="ignore"):  # a sum past the doubles is inf: over the bound, as it should be
        np.add.at(held, state.p_user[paid], np.abs(state.p_amount[paid]))
    by_user = dict(zip(state.users, held.tolist())) if (held > 0).any() else {}
    if events is not None and events.num_rows:
        purchases = events.filter(pc.and_(pc.equal(events.column("type"), "purchase"), pc.is_valid(events.column("amount"))))
        if purchases.num_rows:
            sizes = pa.table({"user_id": purchases.column("user_id"), "size": pc.abs(purchases.column("amount"))})
            for row in sizes.group_by("user_id").aggregate([("size", "sum")]).to_pylist():
                by_user[row["user_id"]] = by_user.get(row["user_id"], 0.0) + row["size_sum"]
    return {user for user, size in by_user.items() if not size <= OVERFLOW_BOUND}  # NaN/inf included


def _split_events(events: pa.Table | None, users: set[str]) -> tuple[pa.Table | None, pa.Table | None]:
    """(the events of ``users``, the others)."""
    if events is None:
        return None, None
    theirs = pc.is_in(events.column("user_id"), pa.array(sorted(users), pa.string()))
    return events.filter(theirs), events.filter(pc.invert(theirs))


def _per_user_visit(
    state: SessionColumns, events: pa.Table | None, users: set[str], watermark_ms: int | None, rule: rules.SessionRule
) -> Visit:
    """Users run through :func:`~streamstate_jobs.sessions.per_user.on_user`, as the engine would call it."""
    states = state.user_states()
    by_user: dict[str, list[dict]] = collections.defaultdict(list)
    if events is not None:
        for row in events.select(list(EVENT_COLUMNS)).to_pylist():
            by_user[row["user_id"]].append(row)
    deadlines = dict(zip(state.users, state.deadlines(rule).tolist()))
    records: list[Emit] = []
    snapshots: list[tuple[str, str | None]] = []
    kept: dict[str, dict] = {}
    for user in sorted(users):
        before = states.get(user)
        due = watermark_ms is not None and before is not None and deadlines[user] <= watermark_ms
        if user not in by_user and not due:
            if before is not None:
                kept[user] = before
            continue
        driver = StateDriver(user, NO_STATE if before is None else copy.deepcopy(before),
                             watermark_ms=-1 if watermark_ms is None else watermark_ms)
        call = driver.begin_call()
        records.extend(on_user(rule, user, Columns(ROW_VALUES, by_user.get(user, [])), call))
        after = driver.value if driver.exists else None
        if after is not None:
            kept[user] = after
        snapshot = user_snapshot(rule, user, after)
        if snapshot != user_snapshot(rule, user, before):  # as the columns decide it: what the snapshot shows changed
            snapshots.append((user, snapshot))
    return Visit(SessionColumns.of_user_states(kept, rule), records, snapshots)


def _visit(state: SessionColumns, events: pa.Table | None, watermark_ms: int | None, rule: rules.SessionRule) -> Visit:
    records: list[Emit] = []
    counts: collections.Counter = collections.Counter()
    due = np.zeros(state.n, bool) if watermark_ms is None else state.deadlines(rule) <= watermark_ms
    touched = np.zeros(state.n, bool)
    accepted_by = np.zeros(state.n, np.int64)
    if events is not None and events.num_rows:
        known = state.n
        arrivals, state = _admit(state, events, watermark_ms, records, counts)
        state = _hold(state, arrivals)
        touched = np.zeros(state.n, bool)
        touched[arrivals.user] = True
        accepted_by = np.bincount(arrivals.user[arrivals.status == ACCEPTED], minlength=state.n)
        due = np.concatenate([due, np.zeros(state.n - known, bool)])
        # A user new in this visit whose events were all duplicates or late has no state at all.
        keep = (np.arange(state.n) < known) | (accepted_by > 0)
        if not keep.all():
            state, touched, due, accepted_by = state.select(keep), touched[keep], due[keep], accepted_by[keep]
    called = touched | due
    if watermark_ms is None or not called.any():
        changed = accepted_by > 0
        return Visit(state, records + _counters(counts), _snapshots(state, changed, np.zeros(state.n, bool), rule))

    state, idle = _settle(state, called, watermark_ms, rule, records, counts)
    holding = np.bincount(state.p_user, minlength=state.n) > 0
    expired = called & ~holding & ~state.is_open & (state.ts + rule.idle_ttl_ms <= watermark_ms)
    # A snapshot shows the held events folded in provisionally, so folding them for real (or
    # forgetting old ids) leaves a user's snapshot as it was (most of a settling visit's users
    # would repeat theirs). New events change it, and so does a session closed for inactivity,
    # unless the user still holds a later event: its gap closed that session in the fold already.
    snapshots = _snapshots(state, ((accepted_by > 0) | (idle & ~holding)) & ~expired, expired, rule)
    if expired.any():
        state = state.select(~expired)
    return Visit(state, records + _counters(counts), snapshots)


def _counters(counts: collections.Counter) -> list[Emit]:
    return [Emit(Kind.COUNT, name, str(n)) for name, n in counts.items() if n]


# ---------------------------------------------------------------------------------- admission
def _admit(
    state: SessionColumns, events: pa.Table, watermark_ms: int | None, records: list[Emit], counts: collections.Counter
) -> tuple[_Arrivals, SessionColumns]:
    """The events in arrival order, each decided as :func:`rules.admit` decides it; the users new
    to the bucket are added (without state yet: held events make it)."""
    order = np.lexsort((_int_column(events, "offset"), _int_column(events, "partition")))
    events = events.select(list(EVENT_COLUMNS)).take(pa.array(order))  # the columns read, not every one given
    user_ids = events.column("user_id")
    rows = pc.index_in(user_ids, value_set=pa.array(state.users, pa.string())).to_numpy(zero_copy_only=False)
    unknown = np.isnan(rows) if rows.dtype.kind == "f" else np.zeros(len(rows), bool)
    if unknown.any():
        new_users = pc.unique(pc.filter(user_ids, pa.array(unknown))).to_pylist()
        state = state.concat(SessionColumns.fresh(new_users))
        rows = pc.index_in(user_ids, value_set=pa.array(state.users, pa.string())).to_numpy(zero_copy_only=False)
    user = rows.astype(np.int64)
    ts = _int_column(events, "ts")
    id_column = events.column("event_id").combine_chunks()
    ids = python_values(id_column)  # through NumPy: a tenth of to_pylist()'s cost
    hi, lo = id_hashes(ids)
    late = np.zeros(len(ts), bool) if watermark_ms is None else ts <= watermark_ms
    duplicate = _remembered(state, user, hi, lo, ids)
    status = np.where(duplicate, DUPLICATE, np.where(late, LATE, ACCEPTED)).astype(np.int8)
    _repeats_in_order(status, user, hi, lo, duplicate, late)
    types = pc.index_in(events.column("type"), value_set=TYPE_NAMES).to_numpy(zero_copy_only=False).astype(np.int8)
    amount = events.column("amount").to_numpy(zero_copy_only=False).astype(np.float64)
    arrivals = _Arrivals(user, ts, id_column, types, amount, events, status, hi, lo)
    counts["duplicate_events"] += int((status == DUPLICATE).sum())
    late_rows = np.flatnonzero(status == LATE)
    if len(late_rows) and watermark_ms is not None:  # (none without a watermark)
        late_rows = late_rows[np.argsort(user[late_rows], kind="stable")]
        for i, source in zip(late_rows, arrivals.sources(late_rows)):
            event = [int(ts[i]), ids[i], TYPES[types[i]], amount_or_none(amount[i]), list(source)]
            reason = rules.late_reason(int(ts[i]), watermark_ms)
            records.append(dead_letter_row(refused_event("late", reason, state.users[user[i]], event)))
        counts["late_events"] += len(late_rows)
    return arrivals, state


def _int_column(table: pa.Table, name: str) -> np.ndarray:
    return table.column(name).to_numpy(zero_copy_only=False).astype(np.int64)


def _remembered(state: SessionColumns, user: np.ndarray, hi: np.ndarray, lo: np.ndarray, ids: list[str]) -> np.ndarray:
    """Each event whose id its user already had (a 128-bit hash, or a 64-bit one of an old state)."""
    duplicate = np.zeros(len(user), bool)
    candidates = np.flatnonzero(np.isin(hi, state.s_hi))
    if len(candidates):
        rows = np.isin(state.s_hi, hi[candidates]) & ~state.s_short
        known = set(zip(state.s_user[rows].tolist(), state.s_hi[rows].tolist(), state.s_lo[rows].tolist()))
        for i in candidates:
            duplicate[i] = (int(user[i]), int(hi[i]), int(lo[i])) in known
    if state.short_ids.any():
        old = np.flatnonzero(state.short_ids[user] & ~duplicate)
        if len(old):
            shorts = set(zip(state.s_user[state.s_short].tolist(), state.s_hi[state.s_short].tolist()))
            for i in old:
                hashed = int.from_bytes(rules._legacy_id_hash(ids[i]), "little")
                duplicate[i] = (int(user[i]), hashed) in shorts
    return duplicate


def _repeats_in_order(
    status: np.ndarray, user: np.ndarray, hi: np.ndarray, lo: np.ndarray, duplicate: np.ndarray, late: np.ndarray
) -> None:
    """Copies of one id within the visit, in arrival order: the first on time is accepted, the
    later ones are duplicates, the late ones before it are late (:func:`rules.admit`)."""
    values, counts = np.unique(hi, return_counts=True)
    repeated = np.flatnonzero(np.isin(hi, values[counts > 1]))
    accepted: set[tuple[int, int, int]] = set()
    for i in repeated:  # in arrival order
        key = (int(user[i]), int(hi[i]), int(lo[i]))
        if duplicate[i] or key in accepted:
            status[i] = DUPLICATE
        elif late[i]:
            status[i] = LATE
        else:
            status[i] = ACCEPTED
            accepted.add(key)


def _hold(state: SessionColumns, arrivals: _Arrivals) -> SessionColumns:
    """The accepted events held (pending) and their ids remembered; each user's latest time."""
    take = np.flatnonzero(arrivals.status == ACCEPTED)
    if not len(take):
        return state
    user, ts, types, amount = arrivals.user[take], arrivals.ts[take], arrivals.types[take], arrivals.amount[take]
    keeps_source = (types == PURCHASE) & ~np.isnan(amount) & (amount != 0)
    sources = np.full(len(take), None, object)
    kept = np.flatnonzero(keeps_source)
    if len(kept):
        sources[kept] = objects(arrivals.sources(take[kept]))
    latest = state.ts.copy()
    np.maximum.at(latest, user, ts)
    return replace(
        state,
        ts=latest,
        p_user=np.concatenate([state.p_user, user]),
        p_ts=np.concatenate([state.p_ts, ts]),
        p_id=pa.concat_arrays([state.p_id, arrivals.ids.take(pa.array(take))]),
        p_type=np.concatenate([state.p_type, types]),
        p_amount=np.concatenate([state.p_amount, amount]),
        p_source=np.concatenate([state.p_source, sources]),
        s_user=np.concatenate([state.s_user, user]),
        s_hi=np.concatenate([state.s_hi, arrivals.hi[take]]),
        s_lo=np.concatenate([state.s_lo, arrivals.lo[take]]),
        s_ts=np.concatenate([state.s_ts, ts]),
        s_short=np.concatenate([state.s_short, np.zeros(len(take), bool)]),
    )


def _settle(
    state: SessionColumns, called: np.ndarray, watermark_ms: int, rule: rules.SessionRule, records: list[Emit],
    counts: collections.Counter,
) -> tuple[SessionColumns, np.ndarray]:
    """:func:`rules.settle` for every called user: fold what the watermark passed, close the
    sessions idle past the gap, forget the ids past the retention. Returns the new state, the
    users whose open session it closed for inactivity."""
    due_rows = np.flatnonzero(called[state.p_user] & (state.p_ts <= watermark_ms))
    fold = fold_events(state, sorted_pending(state, due_rows), rule, quiet=False)
    state = apply_fold(state, fold)
    if len(due_rows):
        state = drop_rows(state, "p_", due_rows)
    idle = called & state.is_open & (state.open[:, LAST] + rule.gap_ms <= watermark_ms)
    sessions = fold.sessions
    for i in np.flatnonzero(idle).tolist():
        sessions.append((i, 1 << 62, open_session_json(state, i)))
        fold.ended_by["timeout"] += 1
    if idle.any():
        behaviour = state.behaviour.copy()
        behaviour[idle, SESSIONS] += 1
        behaviour[idle, SESSION_MS] += state.open[idle, LAST] - state.open[idle, START]
        drop_views = idle[state.r_user]
        state = replace(state, behaviour=behaviour, is_open=state.is_open & ~idle,
                        r_user=state.r_user[~drop_views], r_ts=state.r_ts[~drop_views])
    forget = called[state.s_user] & (state.s_ts < watermark_ms - rule.dedupe_retention_ms)
    if forget.any():
        pruned = np.zeros(state.n, bool)
        pruned[state.s_user[forget]] = True
        state = drop_rows(state, "s_", np.flatnonzero(forget))
        still_short = np.zeros(state.n, bool)
        still_short[state.s_user[state.s_short]] = True
        state = replace(state, short_ids=state.short_ids & (still_short | ~pruned))

    records.extend(Emit(Kind.ALERT, alert.alert_id, alert.model_dump_json()) for alert in fold.alerts)
    for user_row, _, text in sorted(sessions, key=lambda s: (s[0], s[1])):
        records.append(Emit(Kind.SESSION, state.users[user_row], text))
    for ended_by, n in fold.ended_by.items():
        counts[f"sessions_closed:{ended_by}"] += n
    counts["sessions_opened"] += fold.opened
    return state, idle


# ---------------------------------------------------------------------------------- snapshots
def _snapshots(
    state: SessionColumns, changed: np.ndarray, gone: np.ndarray, rule: rules.SessionRule
) -> list[tuple[str, str | None]]:
    """Each changed user's :func:`rules.snapshot_json` (their pending events folded in
    provisionally), and a tombstone for each user that is gone."""
    out: list[tuple[str, str | None]] = [(state.users[i], None) for i in np.flatnonzero(gone).tolist()]
    if not changed.any():
        return out
    view = state
    held = np.flatnonzero(changed[state.p_user])
    if len(held):
        view = apply_fold(state, fold_events(state, sorted_pending(state, held), rule, quiet=True))
    rows = np.flatnonzero(changed)
    # Python values first: formatting NumPy scalars one by one costs several times more.
    columns = zip(
        rows.tolist(), state.ts[rows].tolist(), view.behaviour[rows].tolist(), view.first[rows].tolist(),
        view.last[rows].tolist(), view.is_open[rows].tolist(), view.open[rows].tolist(), view.total[rows].tolist(),
        view.activity[rows].tolist(),
    )
    for i, ts, behaviour, first, last, is_open, session, total, activity in columns:
        user_id = state.users[i]
        out.append((user_id, _snapshot_json(user_id, ts, behaviour, first, last, session if is_open else None, total, activity)))
    return out


_SPAN_NAMES = tuple(f'"{name}":{{"first":' for name in TYPES)


def _snapshot_json(
    user_id: str, ts: int, behaviour: list[int], first: list[int], last: list[int], session: list[int] | None,
    total: float, activity: int,
) -> str:
    """:func:`rules.snapshot_json` of one user's columns (the tests hold the two texts equal)."""
    closed, page_views, events, session_ms = behaviour
    average = session_ms / closed if closed else 0.0
    spans = ",".join([f'{_SPAN_NAMES[t]}{first[t]},"last":{last[t]}}}' for t in range(len(TYPES)) if first[t] != NONE])
    if session is None:
        opened = "null"
    else:
        start, last_activity, count, views, clicks, purchases, activity_start = session
        opened = (
            f'{{"start":{start},"last_activity":{last_activity},"events":{count},"page_views":{views},'
            f'"clicks":{clicks},"purchases":{purchases},"purchase_total":{rules.json_float(total)},'
            f'"current_activity":"{TYPES[activity]}","activity_start":{activity_start}}}'
        )
    return (
        f'{{"user_id":{rules.json_text(user_id)},"ts":{ts},"open_session":{opened},'
        f'"behaviour":{{"total_sessions":{closed},"total_page_views":{page_views},'
        f'"total_events":{events},"total_session_ms":{session_ms},'
        f'"avg_session_ms":{rules.json_float(average)}}},"activities":{{{spans}}}}}'
    )


def on_bucket(rule: rules.SessionRule, state: SessionColumns | None, records: pa.Table | None, watermark_ms: int) -> BucketResult:
    """The job's bucket function (``StateSpec.over_buckets``): one :func:`visit`."""
    result = visit(state or SessionColumns(), records, watermark_ms if watermark_ms >= 0 else None, rule)
    kept = result.state if result.state.n else None
    return BucketResult(kept, result.records, result.snapshots, result.next_deadline(rule))


