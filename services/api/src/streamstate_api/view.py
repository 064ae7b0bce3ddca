"""The view the API serves: latest session and series snapshots (in the RocksDB store of
:mod:`streamstate_api.store`), the newest alerts, and the source offsets they reflect.

No Kafka here: the follower feeds decoded records with their source coordinates, request
handlers query. Each consumed batch becomes one atomic store write holding the values and
the offsets after them, so the store never holds values without their offsets or the
reverse. Positions are published (a new dict, never mutated) only after the write, and
readers take the positions *before* the data: an answer reflects at least the offsets it
names.

Which snapshot wins (partitions added, replays, a user moving between partitions): the
newer by event time ``ts``; on equal ``ts`` the later-arriving one (a session closed by the
watermark changes its snapshot without a newer event). A tombstone deletes the key and
leaves a *grave* with the deleted snapshot's ``ts``: a snapshot arriving later with a ``ts``
at or before it is an older copy and is ignored, a newer one brings the key back (the user
returned after expiry). A tombstone for a key the view does not hold changes nothing (there
is no event time to remember). Records ignored as older are counted
(``streamstate_api_stale_records_total``).

Graves are forgotten ``api_grave_retention_ms`` after their deletion was applied, by the wall
clock, which no record moves. They were forgotten behind the newest snapshot time seen, so
one snapshot stamped in the year 9999 forgot every grave, and an older copy of a deleted
user arriving after it was served again (issue 51). An older copy arrives soon after the
deletion in the follower's time (a job's replay, a rebuild reading the topics), as Kafka's
own ``delete.retention.ms`` for tombstones is wall-clock time too. A grave of a store written
before holds no deletion time: the first pruning gives it the time of that pruning.

A view on an empty store (a cold rebuild) keeps a filter of the keys it has read, which
hold every key it has written (:mod:`streamstate_api.key_filter`), until the follower has
caught up: a key the filter has never seen is absent from the store, so its read is
skipped, and nearly every key of a rebuild is such a key. A key it may have seen is read as
always. Such a view also writes
without the store's log (:mod:`streamstate_api.store`), flushing the store every few
seconds on a thread of its own: :meth:`StateView.kept_positions`, what a restart would resume
from, are the positions of the last flush, and :meth:`StateView.rebuilt` flushes the rest.

Listing order: a session page is "the next ``limit`` user ids after the cursor id" in the
store's key order (the UTF-8 bytes of the id: the same order as Python's ``str``), so a page
boundary is a key, not a position: inserts and removals between two page requests never
shift later pages, and every id present during the whole walk is returned exactly once.

Alerts: the newest ``max_alerts`` distinct alert ids are kept in memory (bounded by the
setting, not by users) for the filters, and in the store so that a restart has them at once.
Each is indexed by time, by kind, by entity and by both, so a filtered query walks only its
answer: a filter used to walk all 100,000 kept alerts on the event loop, holding the lock the
follower needs (about 50 ms a request, issue 51). The indexes share one (ts, alert_id) tuple
per alert; the per-kind and per-entity ones are plain sorted lists (most alerts arrive newest
last, so an insert is an append and an eviction the first item).
"""

from __future__ import annotations

import heapq
import json
import threading
import time
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any, cast

from sortedcontainers import SortedList

from streamstate_api.record_contracts import AlertRecord, Record, SeriesRecord, SessionRecord, Source, Tombstone
from streamstate_api.store import (
    ACTIVE,
    ALERT,
    GRAVE,
    SERIES,
    SERIES_GRAVE,
    SERIES_HEAD,
    SESSION,
    SESSION_GRAVE,
    SESSION_HEAD,
    TS,
    ReplacedStore,
    ViewStore,
    key_bytes,
    replace_damaged,
    key_text,
)

if TYPE_CHECKING:
    from streamstate_api.key_filter import KeyFilter

# (source, partition, offset, record or None for a record that failed to decode)
Consumed = tuple[Source, int, int, Record | None]
_SESSIONS, _SERIES, _ALERTS = Source.SESSIONS, Source.SERIES, Source.ALERTS  # an Enum member lookup is a call
_SESSION_BODY = SESSION_HEAD.size
_SERIES_BODY = SERIES_HEAD.size
# How often a cold rebuild's unlogged writes are flushed into the store's tables: what a kill
# can cost it, and how often the progress it reports moves (as often as the log says it). Each
# flush cuts a memtable short: flushed every second, a rebuild of 10,000,000 took 7 % more CPU.
_FLUSH_EVERY_S = 5.0


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a listing: canonical JSON bodies, and the last key when more follow."""

    items: list[bytes]
    last_key: str | None


class StateView:
    """Latest snapshot per user and per series, and the newest ``max_alerts`` distinct alerts."""

    def __init__(
        self, store: ViewStore, max_alerts: int, z_threshold: float = 3.0, clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000
    ):
        self._store = store
        self._clock_ms = clock_ms  # the wall clock graves are stamped and forgotten by
        self._max_alerts = max_alerts
        self._z_threshold = z_threshold
        # Series whose last |z| is above the threshold, kept as records are applied: /metrics
        # reads them without scanning every series (342 ms at 200,000 series, on the event loop).
        self._extremes: dict[str, float] = {}
        self._write_lock = threading.Lock()  # one batch at a time (the follower; tests call apply too)
        self._next_flush = 0.0  # monotonic time: when a cold rebuild's next flush may start
        self._lock = threading.Lock()  # the alert log and the published positions
        self.stale_records = 0
        self._batch_stale = 0  # stale records of the batch being applied, counted once it is written
        self._now_ms = 0  # the wall clock when the batch being applied began
        self._alerts: dict[str, AlertRecord] = {}
        self._alert_order: SortedList = SortedList()  # (ts, alert_id): newest last
        # The same (ts, alert_id) tuples by kind, by entity and by (kind, entity): sorted, newest last.
        self._by_kind: dict[str, list[tuple[int, str]]] = {}
        self._by_entity: dict[str, list[tuple[int, str]]] = {}
        self._by_kind_entity: dict[tuple[str, str], list[tuple[int, str]]] = {}
        self._load()

    def _load(self) -> None:
        self._counters = self._store.counters()
        stored = self._store.offsets()
        # A store with no snapshots, graves or offsets is being built from scratch: until the
        # follower has caught up, a key absent from this filter is absent from the store.
        self._written: KeyFilter | None = None
        if not stored and not any(self._counters.values()):
            from streamstate_api.key_filter import KeyFilter  # NumPy: 77 ms and 16 MB a restart does not need

            self._written = KeyFilter()
        self._positions: dict[Source, dict[int, int]] = {
            source: {p: o for (s, p), o in stored.items() if s == source.value} for source in Source
        }
        self._kept = self._positions  # as of the store's last flush while it is written unlogged
        self._alerts.clear()
        self._alert_order.clear()
        self._by_kind, self._by_entity, self._by_kind_entity = {}, {}, {}
        for _, body in self._store.scan(ALERT):
            parsed = json.loads(body)
            self._keep_alert(AlertRecord(parsed["alert_id"], parsed["kind"], parsed["entity"], parsed["ts"], body))
        evicted = self._evict_alerts()
        if evicted:
            self._store.write({ALERT + key_bytes(a): None for a in evicted}, {}, {})
        self._extremes = {}
        if self._counters["series"]:
            for key, value in self._store.scan(SERIES):
                _, has_z, z = SERIES_HEAD.unpack_from(value)
                if has_z and abs(z) > self._z_threshold:
                    self._extremes[key_text(key[1:])] = z

    # ------------------------------------------------------------------ lifecycle
    @property
    def empty(self) -> bool:
        """Nothing consumed yet (a new or reset store)."""
        return not any(self._positions.values())

    def stored_positions(self) -> dict[tuple[Source, int], int]:
        return {(s, p): o for s, parts in self._positions.items() for p, o in parts.items()}

    def topic_ids(self) -> dict[str, str]:
        """The Kafka topic ids the stored view was built from (empty before the first check)."""
        return dict((self._store.identity() or {}).get("topic_ids", {}))

    def remember_topic_ids(self, ids: dict[str, str]) -> None:
        identity = self._store.identity() or {}
        self._store.set_identity({**identity, "topic_ids": {**identity.get("topic_ids", {}), **ids}})

    def reset(self, topic_ids: dict[str, str] | None = None) -> None:
        """Forget everything (a store built from topics that have since been recreated); with
        ``topic_ids``, record them in the same atomic write, so a kill cannot leave new ids on
        an old view (it would then be served, and resumed at the old topic's offsets)."""
        with self._write_lock:
            identity = None if topic_ids is None else {**(self._store.identity() or {}), "topic_ids": topic_ids}
            self._store.clear(identity)
            with self._lock:
                self._load()

    @property
    def damage(self) -> str | None:
        """Why the store cannot be trusted (a read or write failed on it), else None."""
        return self._store.damage

    def replace_damaged_store(self, identity: dict, between_reads: Callable[[Callable[[], None]], None]) -> None:
        """Swap a damaged store for an empty one (a copy kept at ``<path>.corrupt``); the
        follower then rebuilds it from the topics. Runs on the caller's thread (the follower's),
        except one step: ``between_reads`` runs the detaching of the damaged store where no read
        is under way (the serving loop, which reads the store without locks), and waits for it.
        That step is an assignment; the close, the copy and the new store follow here, so the
        serving loop never waits on them: requests meanwhile get 503 (:class:`ReplacedStore`).
        Before, the whole swap ran on the serving loop and every request waited for the copy."""
        with self._write_lock:
            current = self._store
            damaged = current.damaged if isinstance(current, ReplacedStore) else current  # an earlier attempt failed
            if not isinstance(current, ReplacedStore):
                between_reads(lambda: setattr(self, "_store", ReplacedStore(damaged)))
            store = replace_damaged(damaged, identity)
            with self._lock:
                self._store = store
                self._load()

    def close(self) -> None:
        self._store.close()

    # ------------------------------------------------------------------ writing
    def track(self, source: Source, partitions: Iterable[int]) -> None:
        """Declare the partitions of a source, so freshness lists them before their first record."""
        with self._lock:
            positions = dict(self._positions[source])
            for partition in partitions:
                positions.setdefault(partition, 0)
            self._positions[source] = positions

    def apply(self, batch: Iterable[Consumed]) -> list[AlertRecord]:
        """Apply consumed records in order, as one atomic store write; returns the alerts that
        entered the view (not duplicates)."""
        batch = list(batch)
        with self._write_lock:
            # Nothing in memory changes before the store write (a record that cannot be encoded
            # fails its batch whole, and the follower applies it again record by record).
            self._batch_stale = 0
            current, keys, read_hashes = self._current(batch)
            puts: dict[bytes, bytes | None] = {}
            counters = dict(self._counters)
            positions = {source: dict(parts) for source, parts in self._positions.items()}
            changed: dict[tuple[str, int], int] = {}
            alerts: list[Record] = []
            z_changes: dict[str, float | None] = {}
            self._now_ms = self._clock_ms()  # a grave made by this batch is stamped with it
            ends: dict[tuple[Source, int], int] = {}  # the highest offset of the batch per partition
            apply_session, apply_series = self._apply_session, self._apply_series
            for (source, partition, offset, record), value_key in zip(batch, keys):
                if record is not None:
                    if source is _SESSIONS:
                        apply_session(record, value_key, current, puts, counters)
                    elif source is _SERIES:
                        apply_series(record, value_key, current, puts, counters, z_changes)
                    else:
                        alerts.append(record)
                if offset >= ends.get((source, partition), -1):
                    ends[(source, partition)] = offset
            # The position after a batch: past its highest offset, never behind where it was.
            for (source, partition), offset in ends.items():
                next_offset = max(positions[source].get(partition, 0), offset + 1)
                positions[source][partition] = next_offset
                changed[(source.value, partition)] = next_offset
            with self._lock:
                new_alerts = self._apply_alerts(alerts, puts)
            # Before the write: a batch whose write fails is applied again, and can only read more.
            # Every key the batch read: a superset of those it gives a value (see _current).
            if self._written is not None and not self._written.add_hashed(read_hashes):
                self._written = None  # past the filter's bound: every key is read from here on
            unlogged = self._written is not None
            self._store.write(puts, changed, counters, logged=not unlogged)
            with self._lock:
                self._counters = counters
                self._positions = positions
                self.stale_records += self._batch_stale
                for series_id, z in z_changes.items():
                    if z is not None and abs(z) > self._z_threshold:
                        self._extremes[series_id] = z
                    else:
                        self._extremes.pop(series_id, None)
            if unlogged:
                self._flush_now_and_then(positions)
        return new_alerts

    def _flush_now_and_then(self, positions: dict[Source, dict[int, int]]) -> None:
        """Flush the store on a thread of its own, unless a flush runs or the last began under
        :data:`_FLUSH_EVERY_S` ago (the first batch's at once, so that progress shows early);
        once it is done, ``positions`` (the batch's, just written) are what a restart keeps."""
        now = time.monotonic()
        if now >= self._next_flush and self._store.flush_in_background(lambda: self._flushed(positions)):
            self._next_flush = now + _FLUSH_EVERY_S

    def _flushed(self, positions: dict[Source, dict[int, int]]) -> None:
        with self._lock:
            self._kept = positions

    def _current(self, batch: list[Consumed]) -> tuple[dict[bytes, bytes | None], list[Any], Any]:
        """The stored values the batch's snapshots are compared with (one multi-get); each
        record's value key (its kind's prefix and id; None for an alert or a record that failed
        to decode); and in a rebuild, the hashes of the keys read, which the key filter adds.

        Graves are read only when the store has any (a cold rebuild of a view without deletes
        skips half the reads), and a tombstone's own grave always: so every key a batch can give
        a value is a key it read, and the filter adds them without another pass. A grave made by
        this batch is in the dict all the same (:func:`_set`)."""
        wanted: dict[bytes, None] = {}
        keys: list[Any] = []  # bytes, or None where no key is read
        graves = self._counters["graves"] > 0
        for source, _, _, record in batch:
            if record is None or source is _ALERTS:
                keys.append(None)
                continue
            kind = type(record)
            # Exact types, no helper: once per record of a rebuild (a wrong kind fails as before).
            key = key_bytes(record.user_id if kind is SessionRecord else record.series_id if kind is SeriesRecord else record.key)  # type: ignore[union-attr]
            if source is _SESSIONS:
                value_key = SESSION + key
                if graves or kind is Tombstone:
                    wanted[SESSION_GRAVE + key] = None
            else:
                value_key = SERIES + key
                if graves or kind is Tombstone:
                    wanted[SERIES_GRAVE + key] = None
            wanted[value_key] = None
            keys.append(value_key)
        names = list(wanted)
        written = self._written
        if written is None:
            return dict(zip(names, self._store.get_many(names))), keys, None
        hashes = written.hashed(names)
        read = [name for name, maybe in zip(names, written.may_hold_hashed(hashes)) if maybe]
        current: dict[bytes, bytes | None] = dict.fromkeys(names)
        if read:
            current.update(zip(read, self._store.get_many(read)))
        return current, keys, hashes

    def expect(self, records: int) -> None:
        """The follower is about to read ``records`` records: a rebuild's key filter is sized for
        them (nothing changes once the view has caught up or applied a batch)."""
        with self._write_lock:
            if self._written is not None:
                self._written.expect(records)

    def rebuilt(self) -> None:
        """The view has caught up with its topics: from here on every key is read from the store
        (the filter of a rebuild's keys would only grow, to save reads that live updates of
        known users need anyway)."""
        with self._write_lock:
            self._written = None
            self._store.persist()

    def _wins(self, ts: int, stored: bytes | None, grave: bytes | None) -> bool:
        if stored is not None:
            newer = ts >= TS.unpack_from(stored)[0]
        else:
            newer = grave is None or ts > TS.unpack_from(grave)[0]
        if not newer:
            self._batch_stale += 1
        return newer

    def _apply_session(self, record: Record, value_key: bytes, current: dict, puts: dict, counters: dict[str, int]) -> None:
        # value_key is SESSION and the id; the id's other keys are made only when needed (once
        # per record of a rebuild, as the grave's look-up only where some grave exists).
        stored = current[value_key]
        if type(record) is not SessionRecord:
            assert isinstance(record, Tombstone)
            if stored is None:
                return
            key = value_key[1:]
            ts, active = SESSION_HEAD.unpack_from(stored)
            _set(current, puts, value_key, None)
            grave_key = SESSION_GRAVE + key
            if current.get(grave_key) is None:
                counters["graves"] += 1
            _set(current, puts, grave_key, GRAVE.pack(ts, self._now_ms))
            counters["sessions"] -= 1
            if active:
                puts[ACTIVE + key] = None
                counters["active_sessions"] -= 1
            return
        grave = current.get(SESSION_GRAVE + value_key[1:]) if counters["graves"] else None
        if (stored is not None or grave is not None) and not self._wins(record.ts, stored, grave):
            return
        was_active = False
        if stored is None:
            counters["sessions"] += 1
            if grave is not None:
                _set(current, puts, SESSION_GRAVE + value_key[1:], None)
                counters["graves"] -= 1
        else:
            was_active = bool(SESSION_HEAD.unpack_from(stored)[1])
        current[value_key] = puts[value_key] = SESSION_HEAD.pack(record.ts, record.active) + record.body
        if record.active != was_active:
            puts[ACTIVE + value_key[1:]] = b"" if record.active else None
            counters["active_sessions"] += 1 if record.active else -1

    def _apply_series(
        self, record: Record, value_key: bytes, current: dict, puts: dict, counters: dict[str, int], z_changes: dict[str, float | None]
    ) -> None:
        stored = current[value_key]
        if type(record) is not SeriesRecord:
            assert isinstance(record, Tombstone)
            if stored is not None:
                z_changes[record.key] = None
                _set(current, puts, value_key, None)
                grave_key = SERIES_GRAVE + value_key[1:]
                if current.get(grave_key) is None:
                    counters["graves"] += 1
                _set(current, puts, grave_key, GRAVE.pack(TS.unpack_from(stored)[0], self._now_ms))
                counters["series"] -= 1
            return
        grave = current.get(SERIES_GRAVE + value_key[1:]) if counters["graves"] else None
        if (stored is not None or grave is not None) and not self._wins(record.ts, stored, grave):
            return
        if stored is None:
            counters["series"] += 1
            if grave is not None:
                _set(current, puts, SERIES_GRAVE + value_key[1:], None)
                counters["graves"] -= 1
        z = record.last_z
        z_changes[record.series_id] = z
        head = SERIES_HEAD.pack(record.ts, z is not None, z if z is not None else 0.0)
        current[value_key] = puts[value_key] = head + record.body

    def _apply_alerts(self, records: list[Record], puts: dict) -> list[AlertRecord]:
        new_alerts = []
        for record in records:
            if isinstance(record, Tombstone):
                if record.key in self._alerts:
                    self._forget_alert(record.key)
                    puts[ALERT + key_bytes(record.key)] = None
                continue
            assert isinstance(record, AlertRecord)
            if record.alert_id in self._alerts:
                continue
            if len(self._alerts) >= self._max_alerts and (record.ts, record.alert_id) < self._alert_order[0]:
                continue  # older than everything kept: it would be evicted at once
            self._keep_alert(record)
            puts[ALERT + key_bytes(record.alert_id)] = record.body
            for evicted in self._evict_alerts():
                puts[ALERT + key_bytes(evicted)] = None
            new_alerts.append(record)
        return new_alerts

    def _keep_alert(self, record: AlertRecord) -> None:
        self._alerts[record.alert_id] = record
        key = (record.ts, record.alert_id)
        self._alert_order.add(key)
        for index, name in self._alert_indexes(record):
            insort(index.setdefault(name, []), key)

    def _forget_alert(self, alert_id: str) -> None:
        record = self._alerts.pop(alert_id)
        key = (record.ts, record.alert_id)
        self._alert_order.remove(key)
        for index, name in self._alert_indexes(record):
            keys = index[name]
            del keys[bisect_left(keys, key)]
            if not keys:
                del index[name]

    def _alert_indexes(self, record: AlertRecord) -> tuple[tuple[dict, object], ...]:
        return (
            (self._by_kind, record.kind),
            (self._by_entity, record.entity),
            (self._by_kind_entity, (record.kind, record.entity)),
        )

    def _evict_alerts(self) -> list[str]:
        evicted = []
        while len(self._alerts) > self._max_alerts:
            _, alert_id = self._alert_order[0]
            self._forget_alert(alert_id)
            evicted.append(alert_id)
        return evicted

    def prune_graves(self, retention_ms: int) -> int:
        """Delete the graves of keys deleted more than ``retention_ms`` ago by the wall clock;
        returns how many. A grave refuses an older snapshot arriving after the deletion (a job's
        replay can write one); one that late does not come."""
        with self._write_lock:
            if not self._counters["graves"]:
                return 0
            now = self._clock_ms()
            puts: dict[bytes, bytes | None] = {}
            pruned = 0
            for prefix in (SESSION_GRAVE, SERIES_GRAVE):
                for key, value in self._store.scan(prefix):
                    if len(value) != GRAVE.size:  # a store's grave from before deletion times: from now
                        puts[key] = GRAVE.pack(TS.unpack(value)[0], now)
                    elif GRAVE.unpack(value)[1] < now - retention_ms:
                        puts[key] = None
                        pruned += 1
            if not puts:
                return 0
            counters = {**self._counters, "graves": self._counters["graves"] - pruned}
            self._store.write(puts, {}, counters)
            with self._lock:
                self._counters = counters
            return pruned

    def graves(self) -> int:
        return self._counters["graves"]

    # ------------------------------------------------------------------ reading
    def positions(self, source: Source) -> dict[int, int]:
        """Next offset per partition of ``source``: the view reflects every record before it.
        The dict is shared and never mutated: do not change it."""
        return self._positions[source]

    def kept_positions(self, source: Source) -> dict[int, int]:
        """What a restart after a kill would resume ``source`` from: :meth:`positions`, except
        while a cold rebuild writes without the log, when they are the last flush's."""
        return (self._kept if self._store.unlogged else self._positions)[source]

    def session(self, user_id: str) -> tuple[SessionRecord | None, dict[int, int]]:
        positions = self._positions[Source.SESSIONS]
        stored = self._store.get(SESSION + key_bytes(user_id))
        if stored is None:
            return None, positions
        ts, active = SESSION_HEAD.unpack_from(stored)
        return SessionRecord(user_id, stored[_SESSION_BODY:], bool(active), ts), positions

    def sessions(self, after: str | None, limit: int, active_only: bool) -> tuple[Page, dict[int, int]]:
        """Sessions in user-id order after the user id ``after`` (None: from the start)."""
        positions = self._positions[Source.SESSIONS]
        prefix = ACTIVE if active_only else SESSION
        taken = list(islice(self._store.scan(prefix, None if after is None else key_bytes(after)), limit + 1))
        more = len(taken) > limit
        taken = taken[:limit]
        if active_only:
            values = self._store.get_many([SESSION + key[1:] for key, _ in taken])
        else:
            values = [value for _, value in taken]
        items = [value[_SESSION_BODY:] for value in values if value is not None]
        return Page(items, key_text(taken[-1][0][1:]) if more else None), positions

    def series(self, series_id: str) -> tuple[SeriesRecord | None, dict[int, int]]:
        positions = self._positions[Source.SERIES]
        stored = self._store.get(SERIES + key_bytes(series_id))
        if stored is None:
            return None, positions
        ts, has_z, z = SERIES_HEAD.unpack_from(stored)
        return SeriesRecord(series_id, stored[_SERIES_BODY:], z if has_z else None, ts), positions

    def alerts(
        self, kind: str | None, entity: str | None, since: int | None, limit: int
    ) -> tuple[list[bytes], dict[int, int]]:
        """Newest first by (ts, alert_id); ``since`` keeps alerts with ts >= since."""
        with self._lock:
            positions = self._positions[Source.ALERTS]
            matches = islice(self._matching_alerts(kind, entity, since), limit)
            return [record.body for record in matches], positions

    def _matching_alerts(self, kind: str | None, entity: str | None, since: int | None) -> Iterator[AlertRecord]:
        """The matching alerts, newest first, from the index that holds exactly them."""
        low = None if since is None else (since,)  # (since,) sorts before every (since, alert_id)
        if kind is None and entity is None:
            for _, alert_id in self._alert_order.irange(low, reverse=True):
                yield self._alerts[alert_id]
            return
        if entity is None:
            keys = self._by_kind.get(cast(str, kind), [])
        elif kind is None:
            keys = self._by_entity.get(entity, [])
        else:
            keys = self._by_kind_entity.get((kind, entity), [])
        first = 0 if low is None else bisect_left(keys, low)
        for i in range(len(keys) - 1, first - 1, -1):
            yield self._alerts[keys[i][1]]

    def sizes(self) -> dict[str, int]:
        with self._lock:
            sizes = {name: n for name, n in self._counters.items() if name != "graves"}
            return {**sizes, "alerts": len(self._alerts)}

    def extreme_zscores(self, count: int | None = None) -> list[tuple[str, float]]:
        """The series whose last |z| is above the threshold, largest |z| first and equal ones by
        series id (not by arrival, which differs between a batch, single records and a reopened
        store), as (series_id, z); at most ``count`` of them."""
        with self._lock:
            extremes = list(self._extremes.items())
        if count is None:
            count = len(extremes)
        return heapq.nsmallest(count, extremes, key=lambda item: (-abs(item[1]), item[0]))


def _set(current: dict, puts: dict, key: bytes, value: bytes | None) -> None:
    """Write ``value`` and let later records of the same batch see it."""
    current[key] = value
    puts[key] = value
