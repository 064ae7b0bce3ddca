"""The in-memory view the API serves: latest session and series snapshots, recent alerts.

Pure data structure, no Kafka: the follower thread feeds it decoded records with their
source coordinates, request handlers query it. One lock covers the indexes *and* the
source positions, so every answer comes with exactly the offsets it reflects.

Listing order: sessions are kept in a ``SortedList`` of user ids next to the dict that
answers lookups. A page is "the next ``limit`` ids after the cursor id" (a bisect, O(log n)),
so a page boundary is a key, not a position: inserts and removals between two page
requests never shift later pages, and every id present during the whole walk is returned
exactly once. An offset cursor would skip or repeat ids under concurrent inserts, and a
snapshot per walk would cost memory per client.
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice

from sortedcontainers import SortedList

from streamstate.api.records import AlertRecord, Record, SeriesRecord, SessionRecord, Source, Tombstone

# (source, partition, offset, record or None for a record that failed to decode)
Consumed = tuple[Source, int, int, Record | None]


@dataclass(frozen=True, slots=True)
class Page:
    """One page of a listing: canonical JSON bodies, and the last key when more follow."""

    items: list[bytes]
    last_key: str | None


@dataclass(slots=True)
class _OrderedKeys:
    """Keys in sort order, for cursor pages."""

    keys: SortedList = field(default_factory=SortedList)

    def add(self, key: str) -> None:
        if not self._has(key):
            self.keys.add(key)

    def discard(self, key: str) -> None:
        if self._has(key):
            self.keys.remove(key)

    def _has(self, key: str) -> bool:
        index = self.keys.bisect_left(key)
        return index < len(self.keys) and self.keys[index] == key

    def after(self, cursor: str | None, limit: int) -> tuple[list[str], bool]:
        """Up to ``limit`` keys greater than ``cursor``, and whether more follow."""
        taken = list(islice(self.keys.irange(minimum=cursor, inclusive=(False, False)), limit + 1))
        return taken[:limit], len(taken) > limit

    def __len__(self) -> int:
        return len(self.keys)


class StateView:
    """Latest snapshot per user and per series, and the newest ``max_alerts`` distinct alerts."""

    def __init__(self, max_alerts: int):
        self._lock = threading.Lock()
        self._max_alerts = max_alerts
        # Values are plain (body, flag) tuples, not records: CPython's cyclic GC stops tracking
        # tuples of strings/bytes/numbers, so a million entries do not make each full collection
        # (and the requests waiting behind it) take a second; records are built on read.
        self._sessions: dict[str, tuple[bytes, bool]] = {}
        self._session_order = _OrderedKeys()
        self._active_order = _OrderedKeys()
        self._series: dict[str, tuple[bytes, float | None]] = {}
        self._alerts: dict[str, AlertRecord] = {}
        self._alert_order: SortedList = SortedList()  # (ts, alert_id): newest last
        self._positions: dict[Source, dict[int, int]] = {source: {} for source in Source}

    # ------------------------------------------------------------------ writing
    def track(self, source: Source, partitions: Iterable[int]) -> None:
        """Declare the partitions of a source, so freshness lists them before their first record."""
        with self._lock:
            for partition in partitions:
                self._positions[source].setdefault(partition, 0)

    def apply(self, batch: Iterable[Consumed]) -> list[AlertRecord]:
        """Apply consumed records in order; returns the alerts that entered the view (not duplicates)."""
        new_alerts: list[AlertRecord] = []
        with self._lock:
            for source, partition, offset, record in batch:
                if record is not None:
                    if source is Source.SESSIONS:
                        self._apply_session(record)
                    elif source is Source.SERIES:
                        self._apply_series(record)
                    elif self._apply_alert(record):
                        new_alerts.append(record)
                positions = self._positions[source]
                positions[partition] = max(positions.get(partition, 0), offset + 1)
        return new_alerts

    def _apply_session(self, record: Record) -> None:
        if isinstance(record, Tombstone):
            self._sessions.pop(record.key, None)
            self._session_order.discard(record.key)
            self._active_order.discard(record.key)
            return
        assert isinstance(record, SessionRecord)
        self._sessions[record.user_id] = (record.body, record.active)
        self._session_order.add(record.user_id)
        if record.active:
            self._active_order.add(record.user_id)
        else:
            self._active_order.discard(record.user_id)

    def _apply_series(self, record: Record) -> None:
        if isinstance(record, Tombstone):
            self._series.pop(record.key, None)
        else:
            assert isinstance(record, SeriesRecord)
            self._series[record.series_id] = (record.body, record.last_z)

    def _apply_alert(self, record: Record) -> bool:
        if isinstance(record, Tombstone):
            removed = self._alerts.pop(record.key, None)
            if removed is not None:
                self._alert_order.remove((removed.ts, removed.alert_id))
            return False
        assert isinstance(record, AlertRecord)
        if record.alert_id in self._alerts:
            return False
        sort_key = (record.ts, record.alert_id)
        if len(self._alerts) >= self._max_alerts:
            if sort_key < self._alert_order[0]:
                return False  # older than everything kept: it would be evicted at once
            _, evicted = self._alert_order.pop(0)
            del self._alerts[evicted]
        self._alerts[record.alert_id] = record
        self._alert_order.add(sort_key)
        return True

    # ------------------------------------------------------------------ reading
    def positions(self, source: Source) -> dict[int, int]:
        """Next offset per partition of ``source``: the view reflects every record before it."""
        with self._lock:
            return dict(self._positions[source])

    def session(self, user_id: str) -> tuple[SessionRecord | None, dict[int, int]]:
        with self._lock:
            stored = self._sessions.get(user_id)
            positions = dict(self._positions[Source.SESSIONS])
        return (SessionRecord(user_id, *stored) if stored else None), positions

    def sessions(self, after: str | None, limit: int, active_only: bool) -> tuple[Page, dict[int, int]]:
        """Sessions in user-id order after the user id ``after`` (None: from the start)."""
        with self._lock:
            order = self._active_order if active_only else self._session_order
            keys, more = order.after(after, limit)
            page = Page([self._sessions[k][0] for k in keys], keys[-1] if more else None)
            return page, dict(self._positions[Source.SESSIONS])

    def series(self, series_id: str) -> tuple[SeriesRecord | None, dict[int, int]]:
        with self._lock:
            stored = self._series.get(series_id)
            positions = dict(self._positions[Source.SERIES])
        return (SeriesRecord(series_id, *stored) if stored else None), positions

    def alerts(
        self, kind: str | None, entity: str | None, since: int | None, limit: int
    ) -> tuple[list[bytes], dict[int, int]]:
        """Newest first by (ts, alert_id); ``since`` keeps alerts with ts >= since."""
        with self._lock:
            matches = islice(self._matching_alerts(kind, entity, since), limit)
            return [record.body for record in matches], dict(self._positions[Source.ALERTS])

    def _matching_alerts(self, kind: str | None, entity: str | None, since: int | None) -> Iterator[AlertRecord]:
        for ts, alert_id in reversed(self._alert_order):
            if since is not None and ts < since:
                return
            record = self._alerts[alert_id]
            if (kind is None or record.kind == kind) and (entity is None or record.entity == entity):
                yield record

    def sizes(self) -> dict[str, int]:
        with self._lock:
            return {
                "sessions": len(self._sessions),
                "active_sessions": len(self._active_order),
                "series": len(self._series),
                "alerts": len(self._alerts),
            }

    def top_zscores(self, count: int) -> list[tuple[str, float]]:
        """The ``count`` series with the largest |last z|, as (series_id, z)."""
        with self._lock:
            scored = [(series_id, z) for series_id, (_, z) in self._series.items() if z is not None]
        return heapq.nlargest(count, scored, key=lambda item: abs(item[1]))
