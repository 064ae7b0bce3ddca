"""Generators: deterministic for a seed, realistic, and in agreement with the contracts."""

from __future__ import annotations

import math
import re
import time
from collections import Counter, defaultdict, deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamstate_pipeline.contracts import ContractError, Metric, UserEvent, parse_input
from streamstate_producers.generators import MetricGenerator, ProducedRecord, UserEventGenerator, interleave

START = 1_700_000_000_000
GAP_MS = 30 * 60 * 1000

EVENT_MALFORMATIONS = {
    "not JSON": r"^not valid JSON: ",
    "JSON array": r"^expected a JSON object, got \[",
    "missing field": r"^missing required field '(event_id|user_id|type|ts)'$",
    "ts as string": r"^field 'ts': input should be a valid integer, got \"\d+\"$",
    "unknown type": r"^field 'type': input should be 'login', ",
    "non-finite amount": r"^field 'amount': expected a finite number, got (NaN|Infinity|-Infinity)$",
    "invalid UTF-8": r"^value is not valid UTF-8 \(byte 0x[0-9a-f]{2} at position \d+\)$",
    "key mismatch": r"^key \"user-\d+\" does not match user_id \"user-\d+\"$",
    "null value": r"^value is null$",
}
METRIC_MALFORMATIONS = {
    "not JSON": r"^not valid JSON: ",
    "JSON array": r"^expected a JSON object, got \[",
    "missing field": r"^missing required field '(series_id|ts|value)'$",
    "ts as string": r"^field 'ts': input should be a valid integer, got \"\d+\"$",
    "NaN string": r"^field 'value': expected a finite number, got \"NaN\"$",
    "value as string": r"^field 'value': expected a finite number, got \"-?\d+\.?\d*\"$",
    "non-finite value": r"^field 'value': expected a finite number, got (NaN|Infinity|-Infinity)$",
    "invalid UTF-8": r"^value is not valid UTF-8 ",
    "key mismatch": r"^key \"series-\d+\" does not match series_id \"series-\d+\"$",
    "null value": r"^value is null$",
}


def events(n: int, **kwargs) -> list[ProducedRecord]:
    return list(UserEventGenerator(**{"seed": 42, "users": 50, "start_ts": START, **kwargs}).take(n))


def decoded(records: list[ProducedRecord]) -> list[tuple[ProducedRecord, UserEvent]]:
    return [(r, parse_input(UserEvent, r.key, r.value)) for r in records if r.malformed_reason is None]


def contract_reason(model, record: ProducedRecord) -> str | None:
    try:
        parse_input(model, record.key, record.value)
    except ContractError as exc:
        return exc.reason
    return None


# --------------------------------------------------------------------------- determinism
def test_same_seed_same_records_byte_for_byte():
    kwargs = dict(duplicate_rate=0.05, late_rate=0.05, malformed_rate=0.05)
    assert events(1500, **kwargs) == events(1500, **kwargs)
    metric_kwargs = dict(seed=7, series=5, anomaly_rate=0.05, malformed_rate=0.05)
    assert list(MetricGenerator(**metric_kwargs).take(600)) == list(MetricGenerator(**metric_kwargs).take(600))


def test_different_seeds_differ():
    assert events(200, seed=1) != events(200, seed=2)
    assert list(MetricGenerator(seed=1).take(50)) != list(MetricGenerator(seed=2).take(50))


def test_take_continues_the_stream():
    generator = UserEventGenerator(seed=3, users=10, late_rate=0.1, duplicate_rate=0.1)
    assert list(generator.take(40)) + list(generator.take(60)) == list(UserEventGenerator(seed=3, users=10, late_rate=0.1, duplicate_rate=0.1).take(100))


# --------------------------------------------------------------------------- contracts
@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    users=st.integers(1, 40),
    duplicate_rate=st.floats(0, 0.3),
    late_rate=st.floats(0, 0.3),
    malformed_rate=st.floats(0, 0.3),
)
def test_every_event_record_is_valid_or_fails_with_its_stated_reason(seed, users, duplicate_rate, late_rate, malformed_rate):
    generator = UserEventGenerator(seed=seed, users=users, duplicate_rate=duplicate_rate, late_rate=late_rate, malformed_rate=malformed_rate)
    for record in generator.take(300):
        assert record.topic == "user-events"
        assert contract_reason(UserEvent, record) == record.malformed_reason
        assert (record.kind == "malformed") == (record.malformed_reason is not None)
        if record.malformed_reason is None:
            assert parse_input(UserEvent, record.key, record.value).user_id == record.key.decode()


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32), series=st.integers(1, 20), anomaly_rate=st.floats(0, 0.2), malformed_rate=st.floats(0, 0.3))
def test_every_metric_record_is_valid_or_fails_with_its_stated_reason(seed, series, anomaly_rate, malformed_rate):
    generator = MetricGenerator(seed=seed, series=series, anomaly_rate=anomaly_rate, malformed_rate=malformed_rate, min_history=2)
    for record in generator.take(300):
        assert record.topic == "metrics"
        assert contract_reason(Metric, record) == record.malformed_reason
        assert (record.kind == "malformed") == (record.malformed_reason is not None)


@pytest.mark.parametrize(
    "generator, patterns",
    [
        (UserEventGenerator(seed=5, users=20, malformed_rate=1.0), EVENT_MALFORMATIONS),
        (MetricGenerator(seed=5, series=20, malformed_rate=1.0), METRIC_MALFORMATIONS),
    ],
    ids=["events", "metrics"],
)
def test_malformed_records_cover_every_kind_of_breakage(generator, patterns):
    reasons = [record.malformed_reason for record in generator.take(600)]
    assert all(record_reason is not None for record_reason in reasons)
    unexplained = [r for r in reasons if not any(re.search(p, r) for p in patterns.values())]
    assert unexplained == []
    missing = [name for name, pattern in patterns.items() if not any(re.search(pattern, r) for r in reasons)]
    assert missing == []


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32))
def test_special_records_appear_at_their_rates(seed):
    n, rate = 4000, 0.05
    kinds = Counter(r.kind for r in UserEventGenerator(seed=seed, users=100, duplicate_rate=rate, late_rate=rate, malformed_rate=rate).take(n))
    # expected 200 each, standard deviation about 14: the bounds are over five deviations wide
    for kind in ("duplicate", "late", "malformed"):
        assert 120 <= kinds[kind] <= 280, kinds
    assert kinds["event"] + kinds["duplicate"] + kinds["late"] + kinds["malformed"] == n


# --------------------------------------------------------------------------- event realism
def test_event_ids_are_unique_and_duplicates_resend_an_earlier_record_verbatim():
    records = events(3000, duplicate_rate=0.05, late_rate=0.05)
    seen: dict[str, bytes] = {}
    duplicates = 0
    for record, event in decoded(records):
        if record.kind == "duplicate":
            duplicates += 1
            assert seen[event.event_id] == record.value
        else:
            assert event.event_id not in seen
            seen[event.event_id] = record.value
    assert duplicates > 0


def test_on_time_events_follow_the_simulated_clock_and_late_ones_trail_their_user():
    max_lateness = 60_000
    records = events(4000, late_rate=0.05, max_lateness_ms=max_lateness)
    clock = START
    latest_of_user: dict[str, int] = {}
    late = 0
    for record, event in decoded(records):
        if record.kind == "event":
            assert event.ts >= clock
            clock = event.ts
        else:
            late += 1
            assert event.ts < latest_of_user[event.user_id], "a late event comes after a later event of its user"
            assert 0 < clock - event.ts <= max_lateness
        latest_of_user[event.user_id] = max(latest_of_user.get(event.user_id, 0), event.ts)
    assert late > 100


def sessions_of(records: list[ProducedRecord]) -> list[tuple[list[UserEvent], int | None]]:
    """The architecture's session rule over on-time events: (events, gap to the next session or None)."""
    by_user: dict[str, list[UserEvent]] = defaultdict(list)
    for record, event in decoded(records):
        if record.kind == "event":
            by_user[event.user_id].append(event)
    sessions = []
    for user_events in by_user.values():
        current = [user_events[0]]
        for previous, event in zip(user_events, user_events[1:]):
            gap = event.ts - previous.ts
            if previous.type == "logout" or gap >= GAP_MS:
                sessions.append((current, gap))
                current = []
            current.append(event)
        sessions.append((current, None))
    return sessions


def test_users_live_through_realistic_sessions():
    records = events(6000, users=30)
    sessions = sessions_of(records)
    first_types = Counter(s[0].type for s, _ in sessions)
    ended = [(s, gap) for s, gap in sessions if gap is not None]
    assert len(sessions) > 50
    assert first_types["login"] > first_types["page_view"] > 0, "most but not all sessions start with a login"
    assert any(s[-1].type == "logout" for s, _ in ended), "some sessions end with a logout"
    assert any(s[-1].type != "logout" and gap > GAP_MS for s, gap in ended), "some end by going idle past the gap"
    think_times = [b.ts - a.ts for s, _ in sessions for a, b in zip(s, s[1:])]
    assert min(think_times) >= 1_000 and max(think_times) <= 180_000
    assert max(think_times) > 60_000 and sorted(think_times)[len(think_times) // 2] < 60_000


def test_purchases_carry_an_amount_and_mostly_follow_a_page_view():
    records = events(6000, users=30)
    purchases = before = 0
    for session, _ in sessions_of(records):
        for previous, event in zip([None, *session], session):
            assert (event.amount is not None) == (event.type == "purchase")
            if event.type == "purchase":
                purchases += 1
                assert event.amount > 0
                before += previous is not None and previous.type == "page_view"
    assert purchases > 20
    assert 0.6 <= before / purchases < 1.0


def test_users_are_interleaved():
    users = [r.key for r in events(500, users=200)]
    switches = sum(a != b for a, b in zip(users, users[1:]))
    assert switches > 0.9 * len(users)
    assert len(set(users)) > 100


def test_wall_clock_stamps_records_with_the_current_time():
    before = time.time_ns() // 1_000_000
    records = list(UserEventGenerator(seed=1, users=10, clock="wall").take(50))
    after = time.time_ns() // 1_000_000
    assert all(before <= event.ts <= after for _, event in decoded(records))


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(users=0),
        dict(duplicate_rate=-0.1),
        dict(malformed_rate=1.5),
        dict(duplicate_rate=0.6, late_rate=0.6),
        dict(clock="sundial"),
        dict(max_lateness_ms=0),
    ],
)
def test_bad_event_generator_arguments_are_refused(kwargs):
    with pytest.raises(ValueError):
        UserEventGenerator(**kwargs)


# --------------------------------------------------------------------------- metrics
def metric_points(records: list[ProducedRecord]) -> list[tuple[ProducedRecord, Metric]]:
    return [(r, parse_input(Metric, r.key, r.value)) for r in records if r.malformed_reason is None]


def test_each_series_gets_a_point_every_interval():
    generator = MetricGenerator(seed=1, series=4, start_ts=START, interval_ms=500)
    points = metric_points(list(generator.take(40)))
    by_series = defaultdict(list)
    for _, point in points:
        by_series[point.series_id].append(point.ts)
    assert sorted(by_series) == generator.series_ids
    assert all(times == [START + 500 * k for k in range(10)] for times in by_series.values())


def flagged_by_the_anomaly_rule(points: list[Metric], window: int = 100, min_count: int = 10, threshold: float = 3.0) -> set[tuple[str, int]]:
    """The anomaly rule of docs/architecture.md, independently of the jobs: rolling window, population std."""
    windows: dict[str, deque[float]] = defaultdict(lambda: deque(maxlen=window))
    flagged = set()
    for point in points:
        values = windows[point.series_id]
        values.append(point.value)
        if len(values) <= min_count:
            continue
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        if (std == 0 and point.value != mean) or (std > 0 and abs(point.value - mean) / std > threshold):
            flagged.add((point.series_id, point.ts))
    return flagged


def test_injected_anomalies_are_listed_and_caught_by_the_anomaly_rule():
    generator = MetricGenerator(seed=11, series=10, start_ts=START, anomaly_rate=0.01, malformed_rate=0.01)
    records = list(generator.take(5000))
    anomalies = [(p.series_id, p.ts) for r, p in metric_points(records) if r.kind == "anomaly"]
    assert len(anomalies) > 20
    assert anomalies == generator.anomalies
    flagged = flagged_by_the_anomaly_rule([p for _, p in metric_points(records)])
    assert set(anomalies) <= flagged
    assert len(flagged - set(anomalies)) <= 0.01 * len(records), "noise rarely looks like an anomaly"


def test_anomalies_at_known_points():
    planned = [("series-0001", START + 40_000), ("series-0002", START + 55_000)]
    generator = MetricGenerator(seed=2, series=3, start_ts=START, anomalies_at=planned)
    records = list(generator.take(3 * 80))
    assert generator.anomalies == planned
    assert [(p.series_id, p.ts) for r, p in metric_points(records) if r.kind == "anomaly"] == planned
    assert set(planned) <= flagged_by_the_anomaly_rule([p for _, p in metric_points(records)])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(anomalies_at=[("series-9999", START)]), "unknown series"),
        (dict(anomalies_at=[("series-0000", START + 1)]), "not a sample time"),
        (dict(anomalies_at=[("series-0000", START)], anomaly_rate=0.1), "not both"),
        (dict(anomalies_at=[("series-0000", START)], clock="wall"), "simulated"),
        (dict(interval_ms=0), "interval_ms"),
    ],
)
def test_bad_metric_generator_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MetricGenerator(series=2, start_ts=START, **kwargs)


# --------------------------------------------------------------------------- mixing
def test_interleave_mixes_streams_in_proportion_and_evenly():
    mixed = list(interleave([(iter("e" * 1000), 2), (iter("m" * 1000), 1)]))
    assert "".join(mixed[:12]) == "eme" * 4
    assert Counter(mixed[:300]) == Counter({"e": 200, "m": 100})
    with pytest.raises(ValueError):
        list(interleave([(iter("e"), 0)]))


def test_a_second_demo_run_flags_only_the_anomalies_it_injects():
    """`make run` resumes the anomalies job's rolling windows from the last run, and each demo
    run draws a new seed. The demo's series keep their levels from run to run, so the rule
    flags a new run's injected anomalies (and rare noise), not the series themselves: drawn from
    each run's seed, every series' first points of a resumed run were anomalies, over a hundred
    alerts in `make run`'s first batches."""
    from streamstate_pipeline.settings import Settings
    from streamstate_producers import cli

    parser = cli.build_parser(Settings())
    runs = []
    for seed, start in ((1, START), (2, START + 10_000_000)):
        args = parser.parse_args(["demo", "--seed", str(seed), "--clock", "simulated", "--start-ts", str(start), "--malformed", "0"])
        runs.append(metric_points(list(cli._metric_generator(args, "metrics").take(4000))))
    flagged = flagged_by_the_anomaly_rule([point for run in runs for _, point in run])
    second = {(point.series_id, point.ts) for _, point in runs[1]}
    injected = {(point.series_id, point.ts) for record, point in runs[1] if record.kind == "anomaly"}
    assert injected, "the demo injects anomalies"
    assert injected <= flagged
    assert len((flagged & second) - injected) <= 0.005 * len(second), "a new run's points look like its series'"
