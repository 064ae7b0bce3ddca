"""The sessions rule over a bucket of users at once, as columns: pure Python, NumPy and Arrow.

The per-user rule (:mod:`~streamstate_jobs.sessions.rules`, called per user by
:func:`~streamstate_jobs.sessions.per_user.on_user`) spends its time in Python per event and
per user: a dict per user state, a list per held event, a call per fold. Here one visit takes a
bucket's new events as an Arrow table and its users' states as columns (:class:`SessionColumns`),
and does the same work with array operations over all of them: admission (de-duplication,
lateness), the fold of what the watermark settles (session boundaries, counts, activity runs,
the three alerts), idle expiry, and each changed user's snapshot.

The per-user rule is the reference, and the tests hold the two together over random events,
batch cuts and watermarks: the same alerts, sessions, dead letters and snapshots, and states
that convert (:meth:`SessionColumns.user_states`) to the per-user rule's. Two differences, both
by design: the counters are summed over the visit (one ``count`` row per counter, not per user),
and the records come grouped by kind rather than user by user (each user's own sessions and
snapshot keep their order). A user whose purchases could take a session's total out of the
range of a double (:data:`OVERFLOW_BOUND`) is run through the per-user rule instead: the rule
refuses such a purchase, which moves every session boundary after it, and only the
event-by-event fold decides that.
"""

from __future__ import annotations

import bisect
import collections
import copy
import hashlib
from dataclasses import dataclass, field, fields, replace
from typing import Any, Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamstate.state import Columns, Emit
from streamstate.state.bucket_function import BucketResult
from streamstate.state.columns import ROW_VALUES
from streamstate.state.packing import python_values
from streamstate.state.state import NO_STATE, StateDriver
from streamstate_pipeline.contracts import Alert, ClosedSession
from streamstate_jobs.kinds import Kind
from streamstate_jobs.rules.dead_letters import refused_event
from streamstate_jobs.sessions import rules
from streamstate_jobs.sessions.per_user import on_user, user_snapshot
from streamstate_jobs.validation import dead_letter_row

# Event types as codes, in name order: a snapshot lists its activities in that order.
TYPES = ("click", "login", "logout", "page_view", "purchase")
CLICK, LOGIN, LOGOUT, PAGE_VIEW, PURCHASE = range(len(TYPES))
_TYPE_CODES = {name: code for code, name in enumerate(TYPES)}
_TYPE_NAMES = pa.array(TYPES, pa.string())
# An open session's alerts, one bit each.
ALERT_BITS = {"bot_burst": 1, "purchase_without_view": 2, "long_session": 4}
# Columns of the open sessions' integer block, and of the behaviour block.
START, LAST, EVENTS, VIEWS, CLICKS, PURCHASES, ACTIVITY_START = range(7)
SESSIONS, PAGE_VIEWS, TOTAL_EVENTS, SESSION_MS = range(4)
NONE = -1  # an activity never seen (event times are >= 0)

# What a visit reads of the new events (the validated columns the job's operator receives).
EVENT_COLUMNS = ("user_id", "ts", "event_id", "type", "amount", "topic", "partition", "offset", "kafka_ts")


def _empty(dtype: Any, width: int | None = None) -> Any:
    """A column of no users (``width`` values each for a block)."""
    shape = (0,) if width is None else (0, width)
    return field(default_factory=lambda: np.zeros(shape, dtype))


@dataclass
class SessionColumns:
    """Every user's state in a bucket, as columns.

    Users (one row each): ``users`` (ids), ``ts`` (latest event time), ``behaviour`` (n x 4),
    ``first``/``last`` (n x 5, by type code), ``is_open``, ``open`` (n x 7, the open session's
    integers), ``total`` (its purchase total), ``activity`` (its current activity's code),
    ``alerted`` (its alerts' bits), ``short_ids`` (the user's remembered ids include 64-bit hashes
    of a state written before 128-bit ones). Rows referring to a user hold its row number:
    pending events (``p_*``, held until the watermark passes them; a source only for a purchase
    with an amount), remembered ids (``s_*``, a hash as two 64-bit halves, ``s_short`` for a
    64-bit one in ``s_hi``) and the open sessions' page views within the burst window (``r_*``).
    """

    users: list[str] = field(default_factory=list)
    ts: np.ndarray = _empty(np.int64)
    behaviour: np.ndarray = _empty(np.int64, 4)
    first: np.ndarray = _empty(np.int64, len(TYPES))
    last: np.ndarray = _empty(np.int64, len(TYPES))
    is_open: np.ndarray = _empty(bool)
    open: np.ndarray = _empty(np.int64, 7)
    total: np.ndarray = _empty(np.float64)
    activity: np.ndarray = _empty(np.int8)
    alerted: np.ndarray = _empty(np.uint8)
    short_ids: np.ndarray = _empty(bool)
    p_user: np.ndarray = _empty(np.int64)
    p_ts: np.ndarray = _empty(np.int64)
    p_id: pa.Array = field(default_factory=lambda: pa.array([], pa.string()))
    p_type: np.ndarray = _empty(np.int8)
    p_amount: np.ndarray = _empty(np.float64)  # NaN: no amount
    p_source: np.ndarray = _empty(object)
    s_user: np.ndarray = _empty(np.int64)
    s_hi: np.ndarray = _empty(np.uint64)
    s_lo: np.ndarray = _empty(np.uint64)
    s_ts: np.ndarray = _empty(np.int64)
    s_short: np.ndarray = _empty(bool)
    r_user: np.ndarray = _empty(np.int64)
    r_ts: np.ndarray = _empty(np.int64)

    @property
    def n(self) -> int:
        return len(self.users)

    # ------------------------------------------------------------------ rows by user
    def select(self, keep: np.ndarray) -> SessionColumns:
        """The users where ``keep`` (a boolean per user) is set, with their rows, renumbered."""
        renumber = np.cumsum(keep) - 1
        picked: dict[str, Any] = {"users": [u for u, k in zip(self.users, keep.tolist()) if k]}
        for prefix, user_column in (("p_", "p_user"), ("s_", "s_user"), ("r_", "r_user")):
            rows = keep[getattr(self, user_column)]
            for name in _columns(prefix):
                picked[name] = _rows(getattr(self, name), rows)
            picked[user_column] = renumber[picked[user_column]]
        for name in _USER_COLUMNS:
            picked[name] = getattr(self, name)[keep]
        return SessionColumns(**picked)

    def concat(self, other: SessionColumns) -> SessionColumns:
        """Both sets of users (no user in both)."""
        joined: dict[str, Any] = {"users": self.users + other.users}
        for name in _USER_COLUMNS + _columns("p_") + _columns("s_") + _columns("r_"):
            joined[name] = _joined([getattr(self, name), getattr(other, name)])
        for user_column in ("p_user", "s_user", "r_user"):
            joined[user_column] = np.concatenate([getattr(self, user_column), getattr(other, user_column) + self.n])
        return SessionColumns(**joined)

    def deadlines(self, rule: rules.SessionRule) -> np.ndarray:
        """Each user's :func:`~streamstate_jobs.sessions.rules.next_deadline`."""
        earliest_pending = np.full(self.n, np.iinfo(np.int64).max, np.int64)
        np.minimum.at(earliest_pending, self.p_user, self.p_ts)
        has_pending = np.bincount(self.p_user, minlength=self.n) > 0
        closes = np.where(self.is_open, self.open[:, LAST] + rule.gap_ms, np.iinfo(np.int64).max)
        idle = np.where(has_pending | self.is_open, np.iinfo(np.int64).max, self.ts + rule.idle_ttl_ms)
        return np.minimum(np.minimum(earliest_pending, closes), idle)

    # ------------------------------------------------------------------ the per-user form
    def user_states(self) -> dict[str, dict[str, Any]]:
        """Each user's state as the per-user rule keeps it (:func:`~streamstate_jobs.sessions.rules.new_state`)."""
        states = {}
        pending_of = _rows_of(self.p_user, self.n)
        seen_of = _rows_of(self.s_user, self.n)
        views_of = _rows_of(self.r_user, self.n)
        ids = self.p_id.to_pylist()
        for i, user in enumerate(self.users):
            seen = {}
            for j in seen_of[i]:
                seen[_hash_bytes(self.s_hi[j], self.s_lo[j], self.s_short[j])] = int(self.s_ts[j])
            pending = [
                [int(self.p_ts[j]), ids[j], TYPES[self.p_type[j]], _amount(self.p_amount[j]),
                 None if self.p_source[j] is None else list(self.p_source[j])]
                for j in pending_of[i]
            ]
            pending.sort(key=lambda e: (e[0], e[1]))  # the per-user rule's order once it has settled
            state = {
                "pending": pending,
                "open": self._open_state(i, [int(self.r_ts[j]) for j in views_of[i]]),
                "behaviour": dict(zip(("total_sessions", "total_page_views", "total_events", "total_session_ms"),
                                      map(int, self.behaviour[i]))),
                "activities": {
                    TYPES[t]: {"first": int(self.first[i, t]), "last": int(self.last[i, t])}
                    for t in range(len(TYPES)) if self.first[i, t] != NONE
                },
                "ts": int(self.ts[i]),
                "seen": seen,
                "seen_floor": min(seen.values()) if seen else None,
            }
            if not self.short_ids[i]:
                state["seen_bits"] = rules.ID_HASH_BITS
            states[user] = state
        return states

    def _open_state(self, i: int, views: list[int]) -> dict[str, Any] | None:
        if not self.is_open[i]:
            return None
        o = self.open[i]
        return {
            "start": int(o[START]), "last_activity": int(o[LAST]), "events": int(o[EVENTS]),
            "page_views": int(o[VIEWS]), "clicks": int(o[CLICKS]), "purchases": int(o[PURCHASES]),
            "purchase_total": float(self.total[i]), "current_activity": TYPES[self.activity[i]],
            "activity_start": int(o[ACTIVITY_START]), "recent_views": views, "recent_from": 0,
            "alerted": [kind for kind, bit in ALERT_BITS.items() if self.alerted[i] & bit],
        }

    @classmethod
    def fresh(cls, users: list[str]) -> SessionColumns:
        """Users with nothing yet: no events, no session, no ids."""
        n = len(users)
        return cls(
            users=users, ts=np.full(n, NONE, np.int64), behaviour=np.zeros((n, 4), np.int64),
            first=np.full((n, len(TYPES)), NONE, np.int64), last=np.full((n, len(TYPES)), NONE, np.int64),
            is_open=np.zeros(n, bool), open=np.zeros((n, 7), np.int64), total=np.zeros(n, np.float64),
            activity=np.zeros(n, np.int8), alerted=np.zeros(n, np.uint8), short_ids=np.zeros(n, bool),
        )

    @classmethod
    def of_user_states(cls, states: dict[str, dict[str, Any]], rule: rules.SessionRule) -> SessionColumns:
        """Per-user states as columns (a checkpoint's states, or users run by the per-user rule)."""
        c = cls.fresh(list(states))
        pending: list[tuple] = []
        seen: list[tuple] = []
        views: list[tuple] = []
        for i, state in enumerate(states.values()):
            c.ts[i] = state["ts"]
            b = state["behaviour"]
            c.behaviour[i] = (b["total_sessions"], b["total_page_views"], b["total_events"], b["total_session_ms"])
            for kind, span in state["activities"].items():
                c.first[i, _TYPE_CODES[kind]], c.last[i, _TYPE_CODES[kind]] = span["first"], span["last"]
            session = state["open"]
            if session is not None:
                c.is_open[i] = True
                c.open[i] = (session["start"], session["last_activity"], session["events"], session["page_views"],
                             session["clicks"], session["purchases"], session["activity_start"])
                c.total[i] = session["purchase_total"]
                c.activity[i] = _TYPE_CODES[session["current_activity"]]
                c.alerted[i] = sum(ALERT_BITS[kind] for kind in session["alerted"])
                recent = session["recent_views"][session.get("recent_from", 0):]
                if recent:
                    views.extend((i, ts) for ts in recent if ts > recent[-1] - rule.burst_window_ms)
            short = state.get("seen_bits") != rules.ID_HASH_BITS
            c.short_ids[i] = short and any(len(h) != rules.ID_HASH_BITS // 8 for h in state["seen"])
            for hashed, ts in state["seen"].items():
                hi, lo, is_short = _hash_halves(hashed)
                seen.append((i, hi, lo, ts, is_short))
            for ts, event_id, kind, amount, source in state["pending"]:
                pending.append((i, ts, event_id, _TYPE_CODES[kind], np.nan if amount is None else float(amount),
                                None if source is None else tuple(source)))
        if pending:
            p_user, p_ts, p_id, p_type, p_amount, p_source = zip(*pending)
            c.p_user, c.p_ts, c.p_type = np.array(p_user, np.int64), np.array(p_ts, np.int64), np.array(p_type, np.int8)
            c.p_id, c.p_amount, c.p_source = pa.array(p_id, pa.string()), np.array(p_amount, np.float64), _objects(p_source)
        if seen:
            s_user, s_hi, s_lo, s_ts, s_short = zip(*seen)
            c.s_user, c.s_hi, c.s_lo = np.array(s_user, np.int64), np.array(s_hi, np.uint64), np.array(s_lo, np.uint64)
            c.s_ts, c.s_short = np.array(s_ts, np.int64), np.array(s_short, bool)
        if views:
            r_user, r_ts = zip(*views)
            c.r_user, c.r_ts = np.array(r_user, np.int64), np.array(r_ts, np.int64)
        return c


_USER_COLUMNS = ("ts", "behaviour", "first", "last", "is_open", "open", "total", "activity", "alerted", "short_ids")


def _columns(prefix: str) -> tuple[str, ...]:
    return tuple(f.name for f in fields(SessionColumns) if f.name.startswith(prefix))


def _rows(column: np.ndarray | pa.Array, rows: np.ndarray) -> np.ndarray | pa.Array:
    """A column's rows by a mask or by their numbers (an id column is an Arrow array)."""
    if isinstance(column, pa.Array):
        return column.filter(pa.array(rows)) if rows.dtype == bool else column.take(pa.array(rows))
    return column[rows]


def _joined(columns: list) -> np.ndarray | pa.Array:
    if isinstance(columns[0], pa.Array):
        return pa.concat_arrays(columns)
    return np.concatenate(columns)


def _objects(values: Sequence[Any]) -> np.ndarray:
    array = np.empty(len(values), object)
    array[:] = values
    return array


def _rows_of(user_column: np.ndarray, n: int) -> list[np.ndarray]:
    """Each user's row numbers, in their order."""
    order = np.argsort(user_column, kind="stable")
    bounds = np.searchsorted(user_column[order], np.arange(n + 1))
    return [order[bounds[i]:bounds[i + 1]] for i in range(n)]


def _amount(value: float) -> float | None:
    return None if np.isnan(value) else float(value)


def _hash_halves(hashed: bytes) -> tuple[int, int, bool]:
    if len(hashed) == rules.ID_HASH_BITS // 8:
        return int.from_bytes(hashed[:8], "little"), int.from_bytes(hashed[8:], "little"), False
    return int.from_bytes(hashed, "little"), 0, True


def _hash_bytes(hi: int, lo: int, short: bool) -> bytes:
    if short:
        return int(hi).to_bytes(8, "little")
    return int(hi).to_bytes(8, "little") + int(lo).to_bytes(8, "little")


def _id_hashes(ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`rules.id_hash` of each id, as two 64-bit halves (little-endian, as the bytes read)."""
    blake2b = hashlib.blake2b
    size = rules.ID_HASH_BITS // 8
    joined = b"".join([blake2b(i.encode("utf-8", "surrogatepass"), digest_size=size).digest() for i in ids])
    halves = np.frombuffer(joined, dtype="<u8").reshape(-1, 2)
    return halves[:, 0].astype(np.uint64), halves[:, 1].astype(np.uint64)


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
        if after != before:
            snapshots.append((user, user_snapshot(rule, user, after)))
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

    state, settled = _settle(state, called, watermark_ms, rule, records, counts)
    expired = called & (np.bincount(state.p_user, minlength=state.n) == 0) & ~state.is_open & (
        state.ts + rule.idle_ttl_ms <= watermark_ms
    )
    changed = (accepted_by > 0) | settled | expired
    snapshots = _snapshots(state, changed & ~expired, expired, rule)
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
    hi, lo = _id_hashes(ids)
    late = np.zeros(len(ts), bool) if watermark_ms is None else ts <= watermark_ms
    duplicate = _remembered(state, user, hi, lo, ids)
    status = np.where(duplicate, DUPLICATE, np.where(late, LATE, ACCEPTED)).astype(np.int8)
    _repeats_in_order(status, user, hi, lo, duplicate, late)
    types = pc.index_in(events.column("type"), value_set=_TYPE_NAMES).to_numpy(zero_copy_only=False).astype(np.int8)
    amount = events.column("amount").to_numpy(zero_copy_only=False).astype(np.float64)
    arrivals = _Arrivals(user, ts, id_column, types, amount, events, status, hi, lo)
    counts["duplicate_events"] += int((status == DUPLICATE).sum())
    late_rows = np.flatnonzero(status == LATE)
    if len(late_rows) and watermark_ms is not None:  # (none without a watermark)
        late_rows = late_rows[np.argsort(user[late_rows], kind="stable")]
        for i, source in zip(late_rows, arrivals.sources(late_rows)):
            event = [int(ts[i]), ids[i], TYPES[types[i]], _amount(amount[i]), list(source)]
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
        sources[kept] = _objects(arrivals.sources(take[kept]))
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


# ---------------------------------------------------------------------------------- settling
@dataclass
class _Events:
    """Events to fold, sorted by (user, ts, event_id)."""

    user: np.ndarray
    ts: np.ndarray
    types: np.ndarray
    amount: np.ndarray
    rows: np.ndarray  # their rows in the pending columns


def _sorted_pending(state: SessionColumns, rows: np.ndarray) -> _Events:
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
    return _Events(state.p_user[order], state.p_ts[order], state.p_type[order], state.p_amount[order], order)


@dataclass
class _Fold:
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
    closed: np.ndarray  # users that closed a session
    alerts: list[Alert] = field(default_factory=list)
    sessions: list[tuple[int, int, str]] = field(default_factory=list)  # (user, order, JSON)
    opened: int = 0
    ended_by: collections.Counter = field(default_factory=collections.Counter)


def _fold(state: SessionColumns, events: _Events, rule: rules.SessionRule, quiet: bool) -> _Fold:
    """The per-user rule's ``_fold`` over every user's events at once (``quiet``: no records)."""
    n, k = state.n, len(events.ts)
    u, ts, types, amount = events.user, events.ts, events.types, events.amount
    gap = rule.gap_ms
    result = _Fold(
        state.is_open.copy(), state.open.copy(), state.total.copy(), state.activity.copy(), state.alerted.copy(),
        state.behaviour.copy(), state.first.copy(), state.last.copy(), state.r_user, state.r_ts, np.zeros(n, bool),
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
                fired.append((i, 0, "purchase_without_view", {"amount": _amount(amount[i])}))
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
    result.closed[seg_user[closed_segments]] = True
    result.closed[gap_users] = True
    result.r_user, result.r_ts = _recent_views_after(state, events, seg_user, continues, starts, ends, final, stays_open, rule)
    result.opened = int(new_session.sum())
    if quiet:
        return result

    # Records: the alerts in fold order, the sessions each user closed in order.
    for i, _, kind, details in sorted(fired, key=lambda f: (f[0], f[1])):
        user_id = state.users[int(u[i])]
        result.alerts.append(Alert.build(kind, user_id, int(ts[i]), _alert_message(kind, user_id, details, int(ts[i] - seg_start[seg_of[i]])), **details))
    for row, user_row in zip(gap_closed.tolist(), gap_users.tolist()):
        o = state.open[user_row]
        result.sessions.append((user_row, 2 * row, _session_json(
            state.users[user_row], int(o[START]), int(o[LAST]), [int(o[EVENTS]), int(o[VIEWS]), int(o[CLICKS]), int(o[PURCHASES])],
            float(state.total[user_row]), "timeout")))
        result.ended_by["timeout"] += 1
    closing = zip(
        seg_user[closed_segments].tolist(), ends[closed_segments].tolist(), seg_start[closed_segments].tolist(),
        seg_last[closed_segments].tolist(), counts[closed_segments].tolist(), seg_total[closed_segments].tolist(),
        ended_by_logout[closed_segments].tolist(),
    )
    for user_row, end, start, last, session_counts, total, by_logout in closing:
        ended_by = "logout" if by_logout else "timeout"
        result.sessions.append((user_row, 2 * end + 1, _session_json(state.users[user_row], start, last, session_counts, total, ended_by)))
        result.ended_by[ended_by] += 1
    return result


def _alert_message(kind: str, user_id: str, details: dict, running_ms: int) -> str:
    if kind == "bot_burst":
        return f"{user_id}: {details['page_views']} page views within {details['window_ms'] // 1000}s"
    if kind == "purchase_without_view":
        return f"{user_id}: purchase with no page view before it in the session"
    return f"{user_id}: session running for {running_ms // 60000} minutes"


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
    state: SessionColumns, events: _Events, seg_user: np.ndarray, continues: np.ndarray, starts: np.ndarray,
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


def _session_json(user_id: str, start: int, end: int, counts: list[int], purchase_total: float, ended_by: str) -> str:
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


def _apply_fold(state: SessionColumns, fold: _Fold) -> SessionColumns:
    return replace(
        state, is_open=fold.is_open, open=fold.open, total=fold.total, activity=fold.activity, alerted=fold.alerted,
        behaviour=fold.behaviour, first=fold.first, last=fold.last, r_user=fold.r_user, r_ts=fold.r_ts,
    )


def _settle(
    state: SessionColumns, called: np.ndarray, watermark_ms: int, rule: rules.SessionRule, records: list[Emit],
    counts: collections.Counter,
) -> tuple[SessionColumns, np.ndarray]:
    """:func:`rules.settle` for every called user: fold what the watermark passed, close the
    sessions idle past the gap, forget the ids past the retention. Returns the new state, the
    users whose state changed (events folded, a session closed, ids forgotten)."""
    due_rows = np.flatnonzero(called[state.p_user] & (state.p_ts <= watermark_ms))
    folded = np.zeros(state.n, bool)
    folded[state.p_user[due_rows]] = True
    fold = _fold(state, _sorted_pending(state, due_rows), rule, quiet=False)
    state = _apply_fold(state, fold)
    if len(due_rows):
        state = _drop_rows(state, "p_", due_rows)
    idle = called & state.is_open & (state.open[:, LAST] + rule.gap_ms <= watermark_ms)
    sessions = fold.sessions
    for i in np.flatnonzero(idle).tolist():
        o = state.open[i]
        sessions.append((i, 1 << 62, _session_json(
            state.users[i], int(o[START]), int(o[LAST]), [int(o[EVENTS]), int(o[VIEWS]), int(o[CLICKS]), int(o[PURCHASES])],
            float(state.total[i]), "timeout")))
        fold.ended_by["timeout"] += 1
    if idle.any():
        behaviour = state.behaviour.copy()
        behaviour[idle, SESSIONS] += 1
        behaviour[idle, SESSION_MS] += state.open[idle, LAST] - state.open[idle, START]
        drop_views = idle[state.r_user]
        state = replace(state, behaviour=behaviour, is_open=state.is_open & ~idle,
                        r_user=state.r_user[~drop_views], r_ts=state.r_ts[~drop_views])
    forget = called[state.s_user] & (state.s_ts < watermark_ms - rule.dedupe_retention_ms)
    pruned = np.zeros(state.n, bool)
    if forget.any():
        pruned[state.s_user[forget]] = True
        state = _drop_rows(state, "s_", np.flatnonzero(forget))
        still_short = np.zeros(state.n, bool)
        still_short[state.s_user[state.s_short]] = True
        state = replace(state, short_ids=state.short_ids & (still_short | ~pruned))

    records.extend(Emit(Kind.ALERT, alert.alert_id, alert.model_dump_json()) for alert in fold.alerts)
    for user_row, _, text in sorted(sessions, key=lambda s: (s[0], s[1])):
        records.append(Emit(Kind.SESSION, state.users[user_row], text))
    for ended_by, n in fold.ended_by.items():
        counts[f"sessions_closed:{ended_by}"] += n
    counts["sessions_opened"] += fold.opened
    return state, folded | fold.closed | idle | pruned


def _drop_rows(state: SessionColumns, prefix: str, rows: np.ndarray) -> SessionColumns:
    keep = np.ones(len(getattr(state, f"{prefix}user")), bool)
    keep[rows] = False
    kept: dict[str, Any] = {name: _rows(getattr(state, name), keep) for name in _columns(prefix)}
    return replace(state, **kept)


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
        view = _apply_fold(state, _fold(state, _sorted_pending(state, held), rule, quiet=True))
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


def events_table(rows: Iterable[dict[str, Any]]) -> pa.Table:
    """Events given as dicts (the validated columns) as the table a visit reads."""
    schema = pa.schema([
        ("user_id", pa.string()), ("ts", pa.int64()), ("event_id", pa.string()), ("type", pa.string()),
        ("amount", pa.float64()), ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
        ("kafka_ts", pa.int64()),
    ])
    return pa.Table.from_pylist([{name: row.get(name) for name in EVENT_COLUMNS} for row in rows], schema=schema)
