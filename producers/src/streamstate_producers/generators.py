"""Deterministic generators of realistic user events and metric points.

With ``clock="simulated"`` (the default) a generator is a pure function of its
arguments: the same seed yields the same records, byte for byte, and event times
advance from ``start_ts`` by the simulated think times. With ``clock="wall"`` the
schedule (who acts next, what they do) is the same, but every record is stamped with
the wall clock at the moment it is generated, so a live pipeline's watermark follows
real time (long idle gaps then only exist in the schedule, not in event time).
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
import time
import uuid
from collections import deque
from dataclasses import replace
from typing import Iterable, Iterator, Literal, Sequence

from streamstate_pipeline.contracts import Metric, UserEvent
from streamstate_producers.malformed import EVENT_CORRUPTIONS, METRIC_CORRUPTIONS, Corruption
from streamstate_producers.produced_record import ProducedRecord, RecordKind, expected_reason
from streamstate_pipeline.settings import Settings, get_settings

__all__ = ["ProducedRecord", "UserEventGenerator", "MetricGenerator", "interleave", "DEFAULT_START_TS"]

Clock = Literal["simulated", "wall"]
DEFAULT_START_TS = 1_700_000_000_000  # 2023-11-14T22:13:20Z: a fixed origin keeps default runs reproducible
DEFAULT_SESSION_GAP_MS: int = Settings.model_fields["session_gap_ms"].default

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
# Records recent enough to be re-sent as duplicates or to have a late event slipped before them.
RECENT_RECORDS = 1_000

# What a user does next, given what they just did (cumulative weights for random.choices).
NEXT_ACTION: dict[str, tuple[tuple[str, ...], tuple[float, ...]]] = {
    "login": (("page_view", "click", "purchase", "logout"), (0.85, 0.95, 0.97, 1.0)),
    # Purchases mostly follow a page view (a purchase without one is a rule the jobs alert on).
    "page_view": (("page_view", "click", "purchase", "logout"), (0.45, 0.83, 0.91, 1.0)),
    "click": (("page_view", "click", "purchase", "logout"), (0.55, 0.88, 0.90, 1.0)),
    "purchase": (("page_view", "click", "logout"), (0.60, 0.75, 1.0)),
}
SESSION_STARTS_WITH_LOGIN = 0.8
GOES_IDLE = 0.06  # after any event but logout: the session ends by inactivity instead
PAGES = ("/home", "/search", "/catalog", "/cart", "/account", "/help", "/deals")
PRODUCTS = 500


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _check_rates(**rates: float) -> None:
    for name, rate in rates.items():
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"{name} must be between 0 and 1, got {rate}")
    if sum(rates.values()) > 1.0:
        raise ValueError(f"{' + '.join(rates)} must not exceed 1, got {sum(rates.values())}")


def _check_clock(clock: str) -> None:
    if clock not in ("simulated", "wall"):
        raise ValueError(f"clock must be 'simulated' or 'wall', got {clock!r}")


def _entity_ids(prefix: str, count: int) -> list[str]:
    if count < 1:
        raise ValueError(f"need at least one {prefix}, got {count}")
    width = max(4, len(str(count - 1)))
    return [f"{prefix}-{i:0{width}d}" for i in range(count)]


class _RecordStream:
    """Shared iteration protocol: a generator is an endless iterator, ``take(n)`` a slice of it."""

    def __init__(self, seed: int, clock: Clock, topic: str) -> None:
        _check_clock(clock)
        self.clock = clock
        self.topic = topic
        self._rng = random.Random(seed)

    def __iter__(self) -> Iterator[ProducedRecord]:
        return self

    def __next__(self) -> ProducedRecord:
        return self._next_record()

    def _next_record(self) -> ProducedRecord:
        raise NotImplementedError

    def take(self, n: int) -> Iterator[ProducedRecord]:
        """The next ``n`` records (continuing where the previous take stopped)."""
        return itertools.islice(self, n)

    def _other_key(self, rng: random.Random, ids: list[str], index: int) -> bytes:
        """Another entity's key, for records whose key does not match their body."""
        if len(ids) == 1:
            return f"{ids[0]}-impostor".encode()
        return ids[(index + rng.randrange(1, len(ids))) % len(ids)].encode()

    def _corrupt(
        self,
        rng: random.Random,
        corruptions: dict[str, Corruption],
        model: type[UserEvent] | type[Metric],
        key: bytes,
        fields: dict,
        other_key: bytes,
    ) -> ProducedRecord:
        corruption = corruptions[rng.choice(sorted(corruptions))]
        bad_key, bad_value = corruption(rng, key, fields, other_key)
        return ProducedRecord(self.topic, bad_key, bad_value, expected_reason(model, bad_key, bad_value), "malformed")


class UserEventGenerator(_RecordStream):
    """Users living through sessions, interleaved in event-time order.

    Each user's sessions usually start with a login, go through page views and clicks
    separated by think times (seconds to a few minutes), sometimes purchase (mostly right
    after a page view), and end with a logout or by going idle for longer than the session
    gap. On top of that, at the given rates: duplicates (an earlier record re-sent
    byte for byte, same ``event_id``), late events (a new event of a user stamped before
    that user's latest event, at most ``max_lateness_ms`` behind the clock) and malformed
    records (see :mod:`streamstate_producers.malformed`).
    """

    def __init__(
        self,
        seed: int = 0,
        users: int = 1000,
        start_ts: int = DEFAULT_START_TS,
        duplicate_rate: float = 0.0,
        late_rate: float = 0.0,
        malformed_rate: float = 0.0,
        max_lateness_ms: int = 120_000,
        clock: Clock = "simulated",
        topic: str | None = None,
        session_gap_ms: int = DEFAULT_SESSION_GAP_MS,
    ) -> None:
        _check_rates(duplicate_rate=duplicate_rate, late_rate=late_rate, malformed_rate=malformed_rate)
        if max_lateness_ms < 2:
            raise ValueError(f"max_lateness_ms must be at least 2, got {max_lateness_ms}")
        super().__init__(seed, clock, topic or get_settings().topic_user_events)
        self.user_ids = _entity_ids("user", users)
        self.duplicate_rate = duplicate_rate
        self.late_rate = late_rate
        self.malformed_rate = malformed_rate
        self.max_lateness_ms = max_lateness_ms
        self.session_gap_ms = session_gap_ms
        self._keys = [u.encode() for u in self.user_ids]
        self._next_action = [self._session_start() for _ in self.user_ids]
        # (scheduled time, user index): the user acting soonest comes first
        self._schedule = [(start_ts + self._rng.randint(0, 5 * MINUTE_MS), i) for i in range(users)]
        heapq.heapify(self._schedule)
        self._now = start_ts
        self._recent: deque[tuple[ProducedRecord, int, int]] = deque(maxlen=RECENT_RECORDS)

    # -- the stream -----------------------------------------------------------------
    def _next_record(self) -> ProducedRecord:
        draw = self._rng.random()
        if draw < self.malformed_rate:
            return self._malformed()
        draw -= self.malformed_rate
        if draw < self.duplicate_rate and self._recent:
            record, _, _ = self._rng.choice(self._recent)
            return replace(record, kind="duplicate")
        draw -= self.duplicate_rate
        if draw < self.late_rate:
            late = self._late()
            if late is not None:
                return late
        return self._scheduled()

    def _clock_ms(self) -> int:
        return self._now if self.clock == "simulated" else wall_ms()

    def _scheduled(self) -> ProducedRecord:
        due, index = heapq.heappop(self._schedule)
        self._now = due
        action = self._next_action[index]
        record = self._emit(index, action, self._clock_ms(), "event")
        rng = self._rng
        if action == "logout":
            following, delay = self._session_start(), rng.randint(5 * MINUTE_MS, 4 * HOUR_MS)
        elif rng.random() < GOES_IDLE:
            following, delay = self._session_start(), rng.randint(self.session_gap_ms + MINUTE_MS, 4 * HOUR_MS)
        else:
            choices, cumulative = NEXT_ACTION[action]
            following, delay = rng.choices(choices, cum_weights=cumulative)[0], self._think_time()
        self._next_action[index] = following
        heapq.heappush(self._schedule, (due + delay, index))
        return record

    def _late(self) -> ProducedRecord | None:
        """A new event of a recently active user, stamped before that user's latest event."""
        now = self._clock_ms()
        candidates = []
        for entry in reversed(self._recent):
            record, _, ts = entry
            if record.kind != "event":
                continue
            if now - ts >= self.max_lateness_ms - 1:
                break  # on-time events are in clock order: all older ones are out of reach too
            candidates.append(entry)
        if not candidates:
            return None
        _, index, later_ts = self._rng.choice(candidates)
        room = self.max_lateness_ms - (now - later_ts)
        ts = max(0, later_ts - self._rng.randint(1, room))
        return self._emit(index, self._rng.choice(("page_view", "click")), ts, "late")

    def _malformed(self) -> ProducedRecord:
        index = self._rng.randrange(len(self.user_ids))
        fields = self._fields(index, self._rng.choice(("page_view", "click")), self._clock_ms())
        other_key = self._other_key(self._rng, self.user_ids, index)
        return self._corrupt(self._rng, EVENT_CORRUPTIONS, UserEvent, self._keys[index], fields, other_key)

    # -- building records -------------------------------------------------------------
    def _emit(self, index: int, action: str, ts: int, kind: RecordKind) -> ProducedRecord:
        event = UserEvent.model_construct(**self._fields(index, action, ts))
        record = ProducedRecord(self.topic, self._keys[index], event.model_dump_json(exclude_none=True).encode(), None, kind)
        self._recent.append((record, index, ts))
        return record

    def _fields(self, index: int, action: str, ts: int) -> dict:
        rng = self._rng
        fields = {
            "event_id": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            "user_id": self.user_ids[index],
            "type": action,
            "ts": ts,
        }
        if action in ("page_view", "click"):
            page = rng.choice(PAGES)
            fields["page"] = f"/product/{rng.randint(1, PRODUCTS)}" if page == "/catalog" and rng.random() < 0.5 else page
        elif action == "purchase":
            fields["page"] = "/checkout"
            fields["amount"] = round(rng.lognormvariate(3.5, 0.8), 2)
        return fields

    def _session_start(self) -> str:
        return "login" if self._rng.random() < SESSION_STARTS_WITH_LOGIN else "page_view"

    def _think_time(self) -> int:
        # Log-normal around 15 s, clipped to 1 s .. 3 min: mostly quick clicks, some long reads.
        return int(min(max(self._rng.lognormvariate(math.log(15_000), 1.0), 1_000), 180_000))


class MetricGenerator(_RecordStream):
    """Many series, each a noisy baseline sampled every ``interval_ms``, with injected anomalies.

    Each series has a random mean and noise standard deviation; the noise is normal,
    clipped at 2.5 std so that (apart from the rolling window's own estimation error)
    only injected anomalies break the 3-sigma rule. An anomaly is a value 8 to 12 std
    away from the mean, either at the given ``anomalies_at`` (series id, ts) points or at
    random with ``anomaly_rate`` once a series has ``min_history`` points (fewer points
    make a rolling z-score too weak to flag it). ``anomalies`` lists those emitted so far.
    ``levels_seed`` draws the series' means and noise apart from everything else (None: from
    ``seed``), so that runs with different seeds can continue the same series.
    """

    ANOMALY_STDS = (8.0, 12.0)
    NOISE_CLIP_STDS = 2.5

    def __init__(
        self,
        seed: int = 0,
        series: int = 100,
        start_ts: int = DEFAULT_START_TS,
        interval_ms: int = 1000,
        anomaly_rate: float = 0.0,
        anomalies_at: Iterable[tuple[str, int]] | None = None,
        malformed_rate: float = 0.0,
        clock: Clock = "simulated",
        topic: str | None = None,
        min_history: int = 30,
        levels_seed: int | None = None,
    ) -> None:
        _check_rates(anomaly_rate=anomaly_rate, malformed_rate=malformed_rate)
        if interval_ms < 1:
            raise ValueError(f"interval_ms must be positive, got {interval_ms}")
        super().__init__(seed, clock, topic or get_settings().topic_metrics)
        self.series_ids = _entity_ids("series", series)
        self.start_ts = start_ts
        self.interval_ms = interval_ms
        self.anomaly_rate = anomaly_rate
        self.malformed_rate = malformed_rate
        self.min_history = min_history
        self._planned = self._check_planned(anomalies_at, anomaly_rate)
        self.anomalies: list[tuple[str, int]] = []
        self._keys = [s.encode() for s in self.series_ids]
        self._baselines = []
        levels = self._rng if levels_seed is None else random.Random(levels_seed)
        for _ in self.series_ids:
            mean = round(levels.uniform(10.0, 1000.0), 2)
            self._baselines.append((mean, mean * levels.uniform(0.02, 0.1)))
        self._history = [0] * series
        self._position = 0  # points emitted, all series per tick in id order

    def _check_planned(self, anomalies_at: Iterable[tuple[str, int]] | None, anomaly_rate: float) -> set[tuple[str, int]]:
        planned = {(str(series_id), int(ts)) for series_id, ts in anomalies_at or ()}
        if planned and anomaly_rate:
            raise ValueError("give either anomaly_rate or anomalies_at, not both")
        if planned and self.clock != "simulated":
            raise ValueError("anomalies_at needs clock='simulated' (wall-clock times cannot be planned)")
        known = set(self.series_ids)
        for series_id, ts in sorted(planned):
            if series_id not in known:
                raise ValueError(f"anomalies_at names unknown series {series_id!r}")
            if ts < self.start_ts or (ts - self.start_ts) % self.interval_ms:
                raise ValueError(f"anomalies_at time {ts} is not a sample time (start_ts + k * interval_ms)")
        return planned

    def _next_record(self) -> ProducedRecord:
        tick, index = divmod(self._position, len(self.series_ids))
        self._position += 1
        series_id = self.series_ids[index]
        ts = self.start_ts + tick * self.interval_ms if self.clock == "simulated" else wall_ms()
        mean, std = self._baselines[index]
        rng = self._rng
        if self._is_anomaly(series_id, ts, index):
            sign = rng.choice((-1.0, 1.0))
            kind: RecordKind = "anomaly"
            value = mean + sign * rng.uniform(*self.ANOMALY_STDS) * std
            self.anomalies.append((series_id, ts))
        else:
            noise = min(max(rng.gauss(0.0, 1.0), -self.NOISE_CLIP_STDS), self.NOISE_CLIP_STDS)
            kind, value = "metric", mean + noise * std
            if self.malformed_rate and rng.random() < self.malformed_rate:
                fields = Metric.model_construct(series_id=series_id, ts=ts, value=round(value, 3)).model_dump()
                other_key = self._other_key(rng, self.series_ids, index)
                return self._corrupt(rng, METRIC_CORRUPTIONS, Metric, self._keys[index], fields, other_key)
        self._history[index] += 1
        point = Metric.model_construct(series_id=series_id, ts=ts, value=round(value, 3))
        return ProducedRecord(self.topic, self._keys[index], point.model_dump_json().encode(), None, kind)

    def _is_anomaly(self, series_id: str, ts: int, index: int) -> bool:
        if self._planned:
            return (series_id, ts) in self._planned
        return bool(self.anomaly_rate) and self._history[index] >= self.min_history and self._rng.random() < self.anomaly_rate


def interleave(streams: Sequence[tuple[Iterable[ProducedRecord], int]]) -> Iterator[ProducedRecord]:
    """Merge streams in proportion to their weights (e.g. 200 events for every 100 metrics).

    Smooth weighted round-robin: each step the stream furthest behind its share goes next,
    so the mix is even at every scale, not in bursts. Ends when any stream ends.
    """
    iterators = [iter(stream) for stream, _ in streams]
    weights = [weight for _, weight in streams]
    if not weights or min(weights) <= 0:
        raise ValueError(f"weights must be positive, got {weights}")
    credit = [0] * len(weights)
    total = sum(weights)
    while True:
        for i, weight in enumerate(weights):
            credit[i] += weight
        chosen = max(range(len(weights)), key=credit.__getitem__)
        credit[chosen] -= total
        try:
            yield next(iterators[chosen])
        except StopIteration:
            return
