"""A bucket's sessions state as columns (:class:`SessionColumns`), and its per-user form.

The columns hold what the per-user rule (:mod:`~streamstate_jobs.sessions.rules`) keeps in a
dict per user, for all of a bucket's users at once; :meth:`SessionColumns.user_states` and
:meth:`SessionColumns.of_user_states` convert between the two (the tests compare them, and a
checkpoint of the per-user engine is carried on through them).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Iterable, Sequence

import numpy as np
import pyarrow as pa

from streamstate_jobs.sessions import rules

# Event types as codes, in name order: a snapshot lists its activities in that order.
TYPES = ("click", "login", "logout", "page_view", "purchase")
CLICK, LOGIN, LOGOUT, PAGE_VIEW, PURCHASE = range(len(TYPES))
TYPE_CODES = {name: code for code, name in enumerate(TYPES)}
TYPE_NAMES = pa.array(TYPES, pa.string())
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
            for name in column_names(prefix):
                picked[name] = take_rows(getattr(self, name), rows)
            picked[user_column] = renumber[picked[user_column]]
        for name in USER_COLUMNS:
            picked[name] = getattr(self, name)[keep]
        return SessionColumns(**picked)

    def concat(self, other: SessionColumns) -> SessionColumns:
        """Both sets of users (no user in both)."""
        joined: dict[str, Any] = {"users": self.users + other.users}
        for name in USER_COLUMNS + column_names("p_") + column_names("s_") + column_names("r_"):
            joined[name] = concatenated([getattr(self, name), getattr(other, name)])
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
        pending_of = rows_of(self.p_user, self.n)
        seen_of = rows_of(self.s_user, self.n)
        views_of = rows_of(self.r_user, self.n)
        ids = self.p_id.to_pylist()
        for i, user in enumerate(self.users):
            seen = {}
            for j in seen_of[i]:
                seen[_hash_bytes(self.s_hi[j], self.s_lo[j], self.s_short[j])] = int(self.s_ts[j])
            pending = [
                [int(self.p_ts[j]), ids[j], TYPES[self.p_type[j]], amount_or_none(self.p_amount[j]),
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
                c.first[i, TYPE_CODES[kind]], c.last[i, TYPE_CODES[kind]] = span["first"], span["last"]
            session = state["open"]
            if session is not None:
                c.is_open[i] = True
                c.open[i] = (session["start"], session["last_activity"], session["events"], session["page_views"],
                             session["clicks"], session["purchases"], session["activity_start"])
                c.total[i] = session["purchase_total"]
                c.activity[i] = TYPE_CODES[session["current_activity"]]
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
                pending.append((i, ts, event_id, TYPE_CODES[kind], np.nan if amount is None else float(amount),
                                None if source is None else tuple(source)))
        if pending:
            p_user, p_ts, p_id, p_type, p_amount, p_source = zip(*pending)
            c.p_user, c.p_ts, c.p_type = np.array(p_user, np.int64), np.array(p_ts, np.int64), np.array(p_type, np.int8)
            c.p_id, c.p_amount, c.p_source = pa.array(p_id, pa.string()), np.array(p_amount, np.float64), objects(p_source)
        if seen:
            s_user, s_hi, s_lo, s_ts, s_short = zip(*seen)
            c.s_user, c.s_hi, c.s_lo = np.array(s_user, np.int64), np.array(s_hi, np.uint64), np.array(s_lo, np.uint64)
            c.s_ts, c.s_short = np.array(s_ts, np.int64), np.array(s_short, bool)
        if views:
            r_user, r_ts = zip(*views)
            c.r_user, c.r_ts = np.array(r_user, np.int64), np.array(r_ts, np.int64)
        return c


USER_COLUMNS = ("ts", "behaviour", "first", "last", "is_open", "open", "total", "activity", "alerted", "short_ids")


def column_names(prefix: str) -> tuple[str, ...]:
    return tuple(f.name for f in fields(SessionColumns) if f.name.startswith(prefix))


def take_rows(column: np.ndarray | pa.Array, rows: np.ndarray) -> np.ndarray | pa.Array:
    """A column's rows by a mask or by their numbers (an id column is an Arrow array)."""
    if isinstance(column, pa.Array):
        return column.filter(pa.array(rows)) if rows.dtype == bool else column.take(pa.array(rows))
    return column[rows]


def concatenated(columns: list) -> np.ndarray | pa.Array:
    if isinstance(columns[0], pa.Array):
        return pa.concat_arrays(columns)
    return np.concatenate(columns)


def objects(values: Sequence[Any]) -> np.ndarray:
    array = np.empty(len(values), object)
    array[:] = values
    return array


def rows_of(user_column: np.ndarray, n: int) -> list[np.ndarray]:
    """Each user's row numbers, in their order."""
    order = np.argsort(user_column, kind="stable")
    bounds = np.searchsorted(user_column[order], np.arange(n + 1))
    return [order[bounds[i]:bounds[i + 1]] for i in range(n)]


def amount_or_none(value: float) -> float | None:
    return None if np.isnan(value) else float(value)


def _hash_halves(hashed: bytes) -> tuple[int, int, bool]:
    if len(hashed) == rules.ID_HASH_BITS // 8:
        return int.from_bytes(hashed[:8], "little"), int.from_bytes(hashed[8:], "little"), False
    return int.from_bytes(hashed, "little"), 0, True


def _hash_bytes(hi: int, lo: int, short: bool) -> bytes:
    if short:
        return int(hi).to_bytes(8, "little")
    return int(hi).to_bytes(8, "little") + int(lo).to_bytes(8, "little")


def id_hashes(ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`rules.id_hash` of each id, as two 64-bit halves (little-endian, as the bytes read)."""
    joined = b"".join([rules.id_hash(i) for i in ids])  # as fast as hashlib inline (0.49 s per million, measured)
    halves = np.frombuffer(joined, dtype="<u8").reshape(-1, 2)
    return halves[:, 0].astype(np.uint64), halves[:, 1].astype(np.uint64)


def drop_rows(state: SessionColumns, prefix: str, rows: np.ndarray) -> SessionColumns:
    keep = np.ones(len(getattr(state, f"{prefix}user")), bool)
    keep[rows] = False
    kept: dict[str, Any] = {name: take_rows(getattr(state, name), keep) for name in column_names(prefix)}
    return replace(state, **kept)


def events_table(rows: Iterable[dict[str, Any]]) -> pa.Table:
    """Events given as dicts (the validated columns) as the table a visit reads."""
    schema = pa.schema([
        ("user_id", pa.string()), ("ts", pa.int64()), ("event_id", pa.string()), ("type", pa.string()),
        ("amount", pa.float64()), ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
        ("kafka_ts", pa.int64()),
    ])
    return pa.Table.from_pylist([{name: row.get(name) for name in EVENT_COLUMNS} for row in rows], schema=schema)
