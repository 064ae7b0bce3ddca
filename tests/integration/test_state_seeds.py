"""Every seed example of the state API on a real streaming query fed from the embedded broker,
compared exactly (per key, in order) with the plain-Python reference run over the same input."""

from __future__ import annotations

import random

import pytest

from examples import anomalies, analytics, behaviour, bounded, first_last, robust, sessions, word_count
from examples.runner import read_json_topic
from streamstate.state import StateSpec
from streamstate.state.tester import by_key, run_map_with_state, run_update_state_by_key
from tests.state_queries import RowCollector, kinds, produce_json

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

MINUTE = 60_000


def run_once(spark, settings, bootstrap, topic, records, schema, build, tmp_path, key_field=None, once=False, **read):
    """Produce ``records``, run ``build(parsed_df)`` as one availableNow query (then a no-data batch
    follows a watermark that moved), return its rows. ``once``: exactly one batch, for a spec on
    processing time, under which availableNow never ends (each batch asks for another)."""
    produce_json(bootstrap, topic, records, key_field)
    result = build(read_json_topic(spark, settings.bootstrap_servers, topic, schema, **read))
    return RowCollector(result, str(tmp_path / "checkpoint"), available_now=not once, once=once).await_done()


def run_each_batch_once(spark, settings, bootstrap, topic, batches, schema, build, tmp_path, key_field=None):
    """One micro-batch per batch (the query restarted from its checkpoint with a once trigger):
    for update_state_by_key, which calls every key in every batch, so the batch count is exact."""
    result = build(read_json_topic(spark, settings.bootstrap_servers, topic, schema))
    rows = []
    for batch in batches:
        produce_json(bootstrap, topic, batch, key_field)
        rows += RowCollector(result, str(tmp_path / "checkpoint"), once=True).await_done()
    return rows


def run_batches(spark, settings, bootstrap, topic, batches, schema, build, tmp_path, key_field=None, **read):
    """Produce each batch and let the live query settle before the next one; return all rows."""
    result = build(read_json_topic(spark, settings.bootstrap_servers, topic, schema, **read))
    collector = RowCollector(result, str(tmp_path / "checkpoint"))
    try:
        for batch in batches:
            produce_json(bootstrap, topic, batch, key_field)
            collector.settle()
        return collector.rows
    finally:
        collector.finish()


def test_running_word_count_with_initial_state(spark, settings, bootstrap, new_topic, tmp_path):
    rng = random.Random(0)
    vocabulary = ["spark", "kafka", "state", "dummy", "source", "stream"]
    lines = [" ".join(rng.choice(vocabulary) for _ in range(rng.randint(1, 6))) for _ in range(60)]
    rows = run_once(
        spark, settings, bootstrap, new_topic(), [{"line": line} for line in lines], word_count.SCHEMA,
        lambda df: word_count.running_counts(word_count.words(df)), tmp_path,
    )
    expected = run_map_with_state(
        StateSpec.function(word_count.track_state).initial_state(word_count.INITIAL_STATE),
        [[(word, 1) for line in lines for word in line.split()]],
    )
    assert by_key(rows) == by_key(expected)
    assert ("output", "dummy", '["dummy",101]', None) in [r[:4] for r in rows if r[1] == "dummy"][:1]


def test_running_word_count_with_update_state_by_key(spark, settings, bootstrap, new_topic, tmp_path):
    batches = [[{"line": "to be or not to be"}], [{"line": "be quick"}, {"line": "to the point"}]]
    rows = run_each_batch_once(
        spark, settings, bootstrap, new_topic(), batches, word_count.SCHEMA,
        lambda df: word_count.running_counts_by_key(word_count.words(df)), tmp_path,
    )
    expected = run_update_state_by_key(
        word_count.update_count, [[(w, 1) for r in batch for w in r["line"].split()] for batch in batches]
    )
    assert by_key(rows) == by_key(expected)
    assert by_key(rows)["be"] == [("output", "2", None), ("snapshot", "2", None), ("output", "3", None), ("snapshot", "3", None)]
    # every key, every batch: "or" has no data in the second batch and is output again
    assert by_key(rows)["or"] == [("output", "1", None), ("snapshot", "1", None), ("output", "1", None)]


def user_events(rng: random.Random, users: list[str], start_ms: int, span_ms: int, count: int) -> list[dict]:
    kinds_ = ["login", "page_view", "page_view", "page_view", "click"]
    return [
        {"user_id": rng.choice(users), "type": rng.choice(kinds_), "ts": start_ms + rng.randrange(span_ms)}
        for _ in range(count)
    ]


def event_batches(seed: int) -> list[list[dict]]:
    """Three batches: eight users busy for 20 minutes (u6, u7 then log out), then only u0-u2
    an hour later (u3-u5 expire once the watermark passes; u2 logs out), then u0, u1 again."""
    rng = random.Random(seed)
    users = [f"u{i}" for i in range(8)]
    first = user_events(rng, users, 0, 20 * MINUTE, 120)
    first += [{"user_id": u, "type": "logout", "ts": 21 * MINUTE} for u in ("u6", "u7")]
    second = user_events(rng, users[:3], 70 * MINUTE, 10 * MINUTE, 30)
    second.append({"user_id": "u2", "type": "logout", "ts": 81 * MINUTE})
    third = user_events(rng, users[:2], 150 * MINUTE, 5 * MINUTE, 10)
    return [first, second, third]


def event_records(batches: list[list[dict]]) -> list[list[tuple]]:
    """The reference's records of user-event batches: (user, {type, ts}, ts)."""
    return [[(r["user_id"], {"type": r["type"], "ts": r["ts"]}, r["ts"]) for r in batch] for batch in batches]


def run_event_batches(spark, settings, bootstrap, topic, batches, schema, build, tmp_path):
    """run_batches over user events in event time, watermark one minute behind."""
    return run_batches(
        spark, settings, bootstrap, topic, batches, schema, build, tmp_path, event_time_ms="ts", watermark_delay="1 minute"
    )


def test_session_tracking_logout_and_inactivity(spark, settings, bootstrap, new_topic, tmp_path):
    batches = event_batches(seed=1)
    rows = run_event_batches(
        spark, settings, bootstrap, new_topic(), batches, sessions.SCHEMA, sessions.track_sessions, tmp_path
    )
    expected = run_update_state_by_key(
        sessions.update_session, event_records(batches), timeout=sessions.INACTIVITY, event_time=True,
        watermark_delay_ms=MINUTE, every_batch=False,
    )
    assert by_key(rows) == by_key(expected)
    tombstones = [r[1] for r in kinds(rows, "snapshot") if r[2] is None]
    # u2 logged out, u3-u5 went idle; u6, u7 logged out in the batch that created them (no state, no tombstone)
    assert sorted(tombstones) == ["u2", "u3", "u4", "u5"]


def test_running_analytics_typed_state(spark, settings, bootstrap, new_topic, tmp_path):
    rng = random.Random(2)
    points = [{"series_id": f"m{rng.randrange(4)}", "ts": i, "value": round(rng.gauss(50, 10), 3)} for i in range(200)]
    rows = run_each_batch_once(
        spark, settings, bootstrap, new_topic(), [points], analytics.SCHEMA, analytics.running_analytics, tmp_path
    )
    expected = run_update_state_by_key(
        analytics.update_analytics, [[(p["series_id"], p["value"]) for p in points]], state_type=analytics.Analytics
    )
    assert by_key(rows) == by_key(expected)
    m0 = [p["value"] for p in points if p["series_id"] == "m0"]
    final = analytics.Analytics.model_validate_json(kinds(by_key_rows(rows, "m0"), "snapshot")[-1][2])
    assert (final.count, final.min, final.max) == (len(m0), min(m0), max(m0))
    assert final.avg == pytest.approx(sum(m0) / len(m0))


def by_key_rows(rows, key):
    return [r for r in rows if r[1] == key]


def test_user_behaviour_summary_on_timeout(spark, settings, bootstrap, new_topic, tmp_path):
    batches = event_batches(seed=3)
    rows = run_event_batches(
        spark, settings, bootstrap, new_topic(), batches, behaviour.SCHEMA, behaviour.analyse_behaviour, tmp_path
    )
    expected = run_map_with_state(behaviour.behaviour_spec(), event_records(batches), watermark_delay_ms=MINUTE)
    assert by_key(rows) == by_key(expected)
    summaries = [r[1] for r in kinds(rows, "output") if '"user_summary"' in r[2]]
    assert sorted(summaries) == ["u2", "u3", "u4", "u5", "u6", "u7"]  # idle since batch 1 (u2: batch 2)


def test_anomaly_detection(spark, settings, bootstrap, new_topic, tmp_path):
    rng = random.Random(4)
    points = []
    for i in range(150):
        for series in ("cpu", "mem"):
            value = round(rng.gauss(100, 5), 2)
            if i in (40, 90, 130):
                value = 400.0 if series == "cpu" else 1.0
            points.append({"series_id": series, "ts": i, "value": value})
    points.append({"series_id": "flat", "ts": 0, "value": 7.0})
    rows = run_once(spark, settings, bootstrap, new_topic(), points, anomalies.SCHEMA, anomalies.detect_anomalies, tmp_path)
    expected = run_map_with_state(
        StateSpec.function(anomalies.detect_anomaly), [[(p["series_id"], p["value"]) for p in points]]
    )
    assert by_key(rows) == by_key(expected)
    outputs = [r[2] for r in kinds(rows, "output") if r[1] == "cpu"]
    assert sum("LEARNING" in o for o in outputs) == anomalies.LEARNING
    assert sum("ANOMALY" in o for o in outputs) >= 3
    snapshot = kinds(by_key_rows(rows, "cpu"), "snapshot")[-1][2]
    assert len(__import__("json").loads(snapshot)["values"]) == anomalies.WINDOW


def test_memory_bounded_state(spark, settings, bootstrap, new_topic, tmp_path):
    rng = random.Random(5)
    items = [{"key": "big", "item": f"i{n}"} for n in range(1100)]
    items += [{"key": "big", "item": f"i{rng.randrange(50)}"} for _ in range(100)]
    items += [{"key": "small", "item": f"s{rng.randrange(5)}"} for _ in range(30)]
    rows = run_once(spark, settings, bootstrap, new_topic(), items, bounded.SCHEMA, bounded.bounded_counts, tmp_path, once=True)
    expected = run_map_with_state(
        StateSpec.function(bounded.count_bounded).timeout(bounded.IDLE), [[(r["key"], r["item"]) for r in items]]
    )
    assert by_key(rows) == by_key(expected)
    sizes = [__import__("json").loads(r[2])[1] for r in kinds(by_key_rows(rows, "big"), "output")]
    assert max(sizes) == bounded.MAX_ENTRIES and bounded.KEEP_ENTRIES in sizes


NUMBERS = [
    [{"key": "a", "number": "1"}, {"key": "a", "number": "2"}, {"key": "b", "number": "10"}, {"key": "a", "number": "x"}],
    [{"key": "a", "number": "4"}, {"key": "b", "number": "2.5"}, {"key": "b", "number": "5"}],
]


def test_error_handling_seed_keeps_state(spark, settings, bootstrap, new_topic, tmp_path):
    rows = run_batches(spark, settings, bootstrap, new_topic(), NUMBERS, robust.SCHEMA, robust.sums, tmp_path)
    expected = run_map_with_state(
        StateSpec.function(robust.robust_sum), [[(r["key"], r["number"]) for r in batch] for batch in NUMBERS]
    )
    assert by_key(rows) == by_key(expected)
    assert [r[2] for r in kinds(rows, "output") if r[1] == "a"] == ['["a",1]', '["a",3]', '["a",3]', '["a",7]']


def test_error_in_user_function_goes_to_dead_letters(spark, settings, bootstrap, new_topic, tmp_path):
    topic = new_topic()
    rows = run_batches(
        spark, settings, bootstrap, topic, NUMBERS, robust.SCHEMA, lambda df: robust.sums(df, strict=True), tmp_path
    )
    expected = run_map_with_state(
        StateSpec.function(robust.strict_sum), [[(r["key"], r["number"]) for r in batch] for batch in NUMBERS]
    )
    assert by_key(rows) == by_key(expected)
    dead = kinds(rows, "dead_letter")
    assert [(r[1], r[2], r[3], r[4], r[6]) for r in dead] == [
        ("a", '"x"', "ValueError: invalid literal for int() with base 10: 'x'", topic, 3),
        ("b", '"2.5"', "ValueError: invalid literal for int() with base 10: '2.5'", topic, 5),
    ]
    assert [r[2] for r in kinds(rows, "output") if r[1] == "b"] == ['["b",10]', '["b",15]']


def test_first_and_last_activity(spark, settings, bootstrap, new_topic, tmp_path):
    rng = random.Random(6)
    activities = ["bike", "walk", "sit"]
    events = [
        {"user": f"user{rng.randrange(3)}", "timestamp": 1_000 * i + rng.randrange(500), "activity": rng.choice(activities)}
        for i in range(80)
    ]
    batches = [events[:50], events[50:]]
    rows = run_each_batch_once(
        spark, settings, bootstrap, new_topic(), batches, first_last.SCHEMA, first_last.first_and_last, tmp_path
    )
    expected = run_update_state_by_key(
        first_last.update_user_state,
        [[(e["user"], {"timestamp": e["timestamp"], "activity": e["activity"]}) for e in batch] for batch in batches],
    )
    assert by_key(rows) == by_key(expected)
