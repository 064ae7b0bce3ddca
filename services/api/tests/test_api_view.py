"""The API's view (on its RocksDB store), record decoding and cursors (no broker, no server)."""

from __future__ import annotations

import json
import shutil
import tempfile
from itertools import islice
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamstate_api.cursor import BadCursor, decode_cursor, encode_cursor
from streamstate_api.record_contracts import AlertRecord, Source, Tombstone, decode
from streamstate_api.store import open_store
from streamstate_api.view import StateView
from streamstate_pipeline.contracts import ContractError, SessionSnapshot
from tests.api_builders import alert, metric_snapshot, session_snapshot

IDENTITY = {"format": 1, "topics": {"sessions": "s", "series": "m", "alerts": "a"}}
_opened = []


def new_view(max_alerts: int, path: Path | None = None, clock_ms=None) -> StateView:
    """A view on a store of its own (a fresh temporary directory unless ``path`` is given);
    ``clock_ms``: the wall clock it reads (the real one unless given)."""
    temporary = path is None
    if path is None:
        path = Path(tempfile.mkdtemp(prefix="view-")) / "store"
    opened = open_store(path, 8, IDENTITY)
    _opened.append((opened.store, temporary))
    return StateView(opened.store, max_alerts, **({} if clock_ms is None else {"clock_ms": clock_ms}))


def close_stores() -> None:
    while _opened:
        store, temporary = _opened.pop()
        store.close()
        if temporary:
            shutil.rmtree(store.path.parent, ignore_errors=True)


@pytest.fixture(autouse=True)
def _close_stores():
    yield
    close_stores()


def feed(view: StateView, source: Source, *records, partition: int = 0) -> list[AlertRecord]:
    """Decode and apply records as the follower would, at consecutive offsets."""
    start = view.positions(source).get(partition, 0)
    batch = []
    for i, (key, value) in enumerate(records):
        batch.append((source, partition, start + i, decode(source, key.encode(), value)))
    return view.apply(batch)


def put_sessions(view: StateView, *snapshots: SessionSnapshot) -> None:
    feed(view, Source.SESSIONS, *[(s.user_id, s.to_json()) for s in snapshots])


def walk(view: StateView, limit: int, active_only: bool = False, between_pages=lambda: None) -> list[str]:
    seen, after = [], None
    while True:
        page, _ = view.sessions(after, limit, active_only)
        seen += [json.loads(body)["user_id"] for body in page.items]
        if page.last_key is None:
            return seen
        after = page.last_key
        between_pages()


# ------------------------------------------------------------------------ decoding
def test_decode_keeps_the_validated_bytes_and_the_active_flag():
    snapshot = session_snapshot("u1", active=True)
    record = decode(Source.SESSIONS, b"u1", snapshot.to_json())
    assert record.body == snapshot.to_json()
    assert SessionSnapshot.model_validate_json(record.body) == snapshot
    assert record.active is True
    assert decode(Source.SESSIONS, b"u2", session_snapshot("u2", active=False).to_json()).active is False


def test_null_value_is_a_tombstone():
    assert decode(Source.SERIES, b"s1", None) == Tombstone("s1")


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (None, b"{}", "key is null"),
        (b"u1", b"not json", "not valid JSON"),
        (b"u1", b'{"user_id": "u1"}', "missing required field 'ts'"),
        (b"u1", session_snapshot("u2").to_json(), "does not match user_id"),
        # Served bytes must match the schema, so no coercion: a quoted number is refused.
        (b"u1", session_snapshot("u1").to_json().replace(b'"ts":1000', b'"ts":"1000"'), "field 'ts'"),
        (b"\xff", b"{}", "key is not valid UTF-8"),
    ],
)
def test_bad_records_raise_a_one_line_reason(key, value, reason):
    with pytest.raises(ContractError) as caught:
        decode(Source.SESSIONS, key, value)
    assert reason in caught.value.reason
    assert "\n" not in caught.value.reason


@pytest.mark.parametrize("ts", [2**63, 2**64 + 5, -(2**63) - 1])
@pytest.mark.parametrize("source", [Source.SESSIONS, Source.SERIES])
def test_a_snapshot_time_the_store_cannot_hold_is_refused_as_a_bad_record(source, ts):
    """The store keeps ``ts`` as a signed 64-bit integer (``store.TS``): a snapshot beyond it
    passed strict validation and then failed every write of its batch, for ever."""
    snapshot = session_snapshot("u1") if source is Source.SESSIONS else metric_snapshot("u1", 1.0)
    value = snapshot.to_json().replace(f'"ts":{snapshot.ts}'.encode(), f'"ts":{ts}'.encode(), 1)
    with pytest.raises(ContractError) as caught:
        decode(source, b"u1", value)
    assert "field 'ts'" in caught.value.reason and "64-bit" in caught.value.reason
    edge = 2**63 - 1 if ts > 0 else -(2**63)
    record = decode(source, b"u1", value.replace(str(ts).encode(), str(edge).encode(), 1))
    assert record.ts == edge, "the store's own bounds are accepted"


# ------------------------------------------------------------------------ sessions
def test_session_lookup_update_and_tombstone():
    view = new_view(max_alerts=10)
    put_sessions(view, session_snapshot("u1", ts=1), session_snapshot("u1", ts=2))
    record, positions = view.session("u1")
    assert json.loads(record.body)["ts"] == 2
    assert positions == {0: 2}
    feed(view, Source.SESSIONS, ("u1", None))
    assert view.session("u1")[0] is None
    assert view.sizes()["sessions"] == 0 and view.sizes()["active_sessions"] == 0


def test_active_listing_follows_open_session_changes():
    view = new_view(max_alerts=10)
    put_sessions(view, session_snapshot("a", active=True), session_snapshot("b", active=False), session_snapshot("c"))
    assert walk(view, 10, active_only=True) == ["a", "c"]
    put_sessions(view, session_snapshot("a", active=False), session_snapshot("b", active=True))
    assert walk(view, 10, active_only=True) == ["b", "c"]
    assert walk(view, 10) == ["a", "b", "c"]
    assert view.sizes() == {"sessions": 3, "active_sessions": 2, "series": 0, "alerts": 0}


def test_pages_cover_every_user_once_in_order():
    view = new_view(max_alerts=10)
    ids = [f"user-{i:03d}" for i in range(25)]
    put_sessions(view, *[session_snapshot(u) for u in reversed(ids)])
    assert walk(view, 7) == ids
    assert walk(view, 25) == ids
    last_page, _ = view.sessions("user-017", 100, False)
    assert last_page.last_key is None and len(last_page.items) == 7


@settings(max_examples=60, deadline=None)
@given(
    initial=st.sets(st.text(min_size=1, max_size=6), min_size=1, max_size=40),
    inserted=st.lists(st.text(min_size=1, max_size=6), max_size=40),
    removed=st.lists(st.text(min_size=1, max_size=6), max_size=20),
    limit=st.integers(1, 9),
)
def test_walk_is_stable_under_concurrent_inserts_and_removals(initial, inserted, removed, limit):
    view = new_view(max_alerts=10)
    put_sessions(view, *[session_snapshot(u) for u in initial])
    survivors = set(initial) - set(removed)
    changes = iter([("put", u) for u in inserted] + [("drop", u) for u in removed])

    def mutate() -> None:
        for action, user in list(islice(changes, 3)):
            if action == "put":
                put_sessions(view, session_snapshot(user))
            else:
                feed(view, Source.SESSIONS, (user, None))

    try:
        seen = walk(view, limit, between_pages=mutate)
        assert seen == sorted(seen) and len(seen) == len(set(seen)), "no repeats, in key order"
        assert survivors <= set(seen), "every user present for the whole walk is returned"
    finally:
        close_stores()


# ------------------------------------------------------------------------ series
def test_series_and_the_extreme_zscores_kept_as_records_apply(tmp_path):
    view = new_view(max_alerts=10, path=tmp_path / "store")
    feed(
        view, Source.SERIES,
        *[(s.series_id, s.to_json()) for s in (metric_snapshot("a", 1.0), metric_snapshot("b", -7.5),
                                               metric_snapshot("c", None), metric_snapshot("d", 4.0))],
    )
    assert json.loads(view.series("b")[0].body)["last_anomaly"]["z"] == -7.5
    assert view.extreme_zscores() == [("b", -7.5), ("d", 4.0)]  # |z| above the threshold (3), largest first
    assert view.extreme_zscores(1) == [("b", -7.5)]
    feed(view, Source.SERIES, ("d", metric_snapshot("d", 2.0).to_json()))
    assert view.extreme_zscores() == [("b", -7.5)]
    close_stores()
    view = new_view(max_alerts=10, path=tmp_path / "store")
    assert view.extreme_zscores() == [("b", -7.5)], "a reopened store knows its extreme series"
    feed(view, Source.SERIES, ("b", None))
    assert view.series("b")[0] is None


def test_extreme_zscores_of_equal_size_come_in_series_order_whatever_the_arrival(tmp_path):
    """The same state gives the same list (and the same top N on /metrics), whether its records
    came one by one, in one batch or from a reopened store (found by test_record_contracts)."""
    for order in (("c", "a", "b"), ("b", "c", "a")):
        view = new_view(max_alerts=10, path=tmp_path / "-".join(order))
        for series_id in order:
            feed(view, Source.SERIES, (series_id, metric_snapshot(series_id, -4.0 if series_id == "b" else 4.0).to_json()))
        assert view.extreme_zscores() == [("a", 4.0), ("b", -4.0), ("c", 4.0)], order
        assert view.extreme_zscores(2) == [("a", 4.0), ("b", -4.0)], order
        close_stores()


# ------------------------------------------------------------------------ alerts
def test_alerts_deduplicated_newest_first_and_filtered():
    view = new_view(max_alerts=100)
    first, second, third = alert("u1", 10), alert("u2", 30), alert("s1", 20, kind="anomaly")
    new = feed(view, Source.ALERTS, *[(a.alert_id, a.to_json()) for a in (first, second, first, third, second)])
    assert [a.alert_id for a in new] == [first.alert_id, second.alert_id, third.alert_id]
    ids = lambda bodies: [json.loads(b)["alert_id"] for b in bodies]  # noqa: E731
    assert ids(view.alerts(None, None, None, 10)[0]) == [second.alert_id, third.alert_id, first.alert_id]
    assert ids(view.alerts("anomaly", None, None, 10)[0]) == [third.alert_id]
    assert ids(view.alerts(None, "u1", None, 10)[0]) == [first.alert_id]
    assert ids(view.alerts(None, None, 20, 10)[0]) == [second.alert_id, third.alert_id]
    assert ids(view.alerts(None, None, None, 1)[0]) == [second.alert_id]
    assert view.positions(Source.ALERTS) == {0: 5}


def _lines_run(call, *args):
    """``call(*args)`` and the number of Python lines it ran, in any module: the work a query does,
    counted without a clock (a walk over every kept alert runs lines per alert)."""
    import sys

    count = 0

    def trace(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return trace

    sys.settrace(trace)
    try:
        result = call(*args)
    finally:
        sys.settrace(None)
    return result, count


def test_an_alert_filter_costs_the_size_of_its_answer_not_of_the_log():
    """Issue 51: ``?kind=`` and ``?entity=`` walked all 100,000 kept alerts, on the event loop and
    holding the lock the follower needs (about 50 ms a request)."""
    kept = 5_000
    view = new_view(max_alerts=kept)
    common = [alert(f"u{i % 500}", 1_000 + i) for i in range(kept - 6)]
    rare = [alert("u-rare", 10 + i, kind="rare_kind") for i in range(3)]  # the oldest: a walk meets them last
    other = [alert("s-odd", 20 + i, kind="anomaly") for i in range(3)]
    feed(view, Source.ALERTS, *[(a.alert_id, a.to_json()) for a in (*rare, *other, *common)])
    assert view.sizes()["alerts"] == kept
    ids = lambda bodies: [json.loads(b)["alert_id"] for b in bodies]  # noqa: E731
    newest_first = lambda alerts: [a.alert_id for a in sorted(alerts, key=lambda a: (a.ts, a.alert_id), reverse=True)]  # noqa: E731
    queries = {
        ("rare_kind", None, None, 100): newest_first(rare),
        (None, "u-rare", None, 100): newest_first(rare),
        ("rare_kind", "u-rare", None, 100): newest_first(rare),
        ("anomaly", "u-rare", None, 100): [],
        ("bot_burst", "u7", None, 2): newest_first([a for a in common if a.entity == "u7"])[:2],
        ("nothing", None, None, 100): [],
        (None, None, 1_000 + kept - 10, 100): newest_first([a for a in common if a.ts >= 1_000 + kept - 10]),
        ("rare_kind", None, 11, 100): newest_first(rare[1:]),
    }
    for (kind, entity, since, limit), expected in queries.items():
        (bodies, _), lines = _lines_run(view.alerts, kind, entity, since, limit)
        assert ids(bodies) == expected, (kind, entity, since)
        assert lines < 40 * (len(expected) + 5), f"{kind=} {entity=} {since=}: {lines} lines for {len(expected)} alerts"
    # The indexes follow evictions and tombstones.
    newer = [alert("u-rare", 100_000 + i, kind="rare_kind") for i in range(2)]
    feed(view, Source.ALERTS, *[(a.alert_id, a.to_json()) for a in newer])  # evicts the two oldest (rare ones)
    assert ids(view.alerts("rare_kind", None, None, 100)[0]) == newest_first([*newer, rare[2]])
    feed(view, Source.ALERTS, (newer[0].alert_id, None))
    assert ids(view.alerts(None, "u-rare", None, 100)[0]) == newest_first([newer[1], rare[2]])
    assert ids(view.alerts("rare_kind", "u-rare", None, 100)[0]) == newest_first([newer[1], rare[2]])


def test_alert_log_keeps_the_newest_max_alerts():
    view = new_view(max_alerts=3)
    alerts = [alert(f"u{i}", ts) for i, ts in enumerate([50, 10, 40, 30, 20])]
    new = feed(view, Source.ALERTS, *[(a.alert_id, a.to_json()) for a in alerts])
    kept = [json.loads(b)["ts"] for b in view.alerts(None, None, None, 10)[0]]
    assert kept == [50, 40, 30]
    assert alerts[4].alert_id not in {a.alert_id for a in new}, "an alert older than all kept never enters"
    assert view.sizes()["alerts"] == 3


def test_bad_record_advances_the_position_and_changes_nothing():
    view = new_view(max_alerts=3)
    view.apply([(Source.SESSIONS, 1, 41, None)])
    assert view.positions(Source.SESSIONS) == {1: 42}
    assert view.sizes()["sessions"] == 0


def test_tracked_partitions_start_at_zero():
    view = new_view(max_alerts=3)
    view.track(Source.ALERTS, [0, 1])
    assert view.positions(Source.ALERTS) == {0: 0, 1: 0}


# ------------------------------------------------------------------------ cursors
@given(st.text())
def test_cursor_round_trips_any_key(key):
    assert decode_cursor(encode_cursor(key)) == key


@given(st.from_regex(r"\A(?:[0-9a-fA-F]{2})*\Z"))
def test_every_cursor_the_schema_allows_decodes(cursor):
    decode_cursor(cursor)


# Whitespace among or around the pairs: bytes.fromhex skips it, the schema's pattern does not.
@pytest.mark.parametrize("cursor", ["abc", "zz", "not a cursor", "\x0b", "ab\n", " ab", "a b", "ab\t", "\n"])
def test_malformed_cursor_is_refused_with_a_reason(cursor):
    with pytest.raises(BadCursor, match="not valid"):
        decode_cursor(cursor)


# ------------------------------------------------------------------------ freshness, per partition
def test_positions_are_per_partition_and_never_go_back():
    view = new_view(max_alerts=3)
    feed(view, Source.SESSIONS, ("a", session_snapshot("a").to_json()), partition=1)
    feed(view, Source.SESSIONS, ("b", session_snapshot("b").to_json()), ("c", session_snapshot("c").to_json()), partition=0)
    assert view.positions(Source.SESSIONS) == {0: 2, 1: 1}
    view.apply([(Source.SESSIONS, 0, 0, None)])  # a re-delivered old offset does not move the position back
    assert view.positions(Source.SESSIONS) == {0: 2, 1: 1}
    assert view.positions(Source.SERIES) == {} and view.positions(Source.ALERTS) == {}


def test_alert_ids_are_deduplicated_across_batches():
    view = new_view(max_alerts=10)
    first = alert("u1", 10)
    assert [a.alert_id for a in feed(view, Source.ALERTS, (first.alert_id, first.to_json()))] == [first.alert_id]
    assert feed(view, Source.ALERTS, (first.alert_id, first.to_json())) == []
    assert len(view.alerts(None, None, None, 10)[0]) == 1


# ------------------------------------------------------------------------ event time wins
def test_an_older_snapshot_arriving_later_does_not_replace_a_newer_one():
    view = new_view(max_alerts=3)
    feed(view, Source.SESSIONS, ("u1", session_snapshot("u1", active=True, ts=2_000).to_json()), partition=0)
    feed(view, Source.SESSIONS, ("u1", session_snapshot("u1", active=False, ts=1_000).to_json()), partition=1)
    record, positions = view.session("u1")
    assert record.ts == 2_000 and record.active is True
    assert positions == {0: 1, 1: 1}, "the ignored record is still consumed"
    assert view.stale_records == 1
    # Equal event time: the later arrival wins (a session closed by the watermark keeps its ts).
    feed(view, Source.SESSIONS, ("u1", session_snapshot("u1", active=False, ts=2_000).to_json()))
    assert view.session("u1")[0].active is False
    assert walk(view, 10, active_only=True) == []
    assert view.sizes()["active_sessions"] == 0 and view.sizes()["sessions"] == 1


def test_a_tombstone_deletes_and_an_older_copy_arriving_later_stays_deleted():
    view = new_view(max_alerts=3)
    feed(view, Source.SESSIONS, ("u1", session_snapshot("u1", ts=2_000).to_json()), ("u1", None))
    assert view.session("u1")[0] is None
    feed(view, Source.SESSIONS, ("u1", session_snapshot("u1", ts=2_000).to_json()), partition=1)
    feed(view, Source.SESSIONS, ("u1", session_snapshot("u1", ts=1_500).to_json()), partition=1)
    assert view.session("u1")[0] is None and view.stale_records == 2
    # A newer snapshot brings the user back: it returned after expiry.
    feed(view, Source.SESSIONS, ("u1", session_snapshot("u1", ts=2_001).to_json()), partition=1)
    assert view.session("u1")[0].ts == 2_001
    assert walk(view, 10) == ["u1"] and view.sizes()["sessions"] == 1


def test_graves_are_forgotten_once_their_deletion_is_older_than_the_retention_by_the_wall_clock():
    now = [1_000_000]
    view = new_view(max_alerts=3, clock_ms=lambda: now[0])
    feed(view, Source.SESSIONS, *[(u, session_snapshot(u, ts=1_000).to_json()) for u in ("old", "recent")])
    feed(view, Source.SESSIONS, ("old", None))
    feed(view, Source.SERIES, ("cpu", metric_snapshot("cpu", 1.0).to_json()), ("cpu", None))  # ts 5
    now[0] += 5_000
    feed(view, Source.SESSIONS, ("recent", session_snapshot("recent", ts=5_000).to_json()), ("recent", None))
    assert view.graves() == 3
    now[0] += 2_000
    assert view.prune_graves(retention_ms=6_000) == 2, "old's and cpu's graves are 7 s old; recent's 2 s"
    assert view.graves() == 1 and view.sizes()["sessions"] == 0
    feed(view, Source.SESSIONS, ("recent", session_snapshot("recent", ts=4_000).to_json()))
    assert view.session("recent")[0] is None, "a kept grave still refuses an older copy"
    feed(view, Source.SESSIONS, ("old", session_snapshot("old", ts=900).to_json()))
    assert view.session("old")[0].ts == 900, "a forgotten key takes any snapshot again"
    assert view.prune_graves(retention_ms=6_000) == 0


def test_a_grave_of_a_store_written_before_deletion_times_is_kept_a_retention_from_the_first_pruning(tmp_path):
    from streamstate_api.store import SESSION_GRAVE, TS

    now = [1_000_000]
    view = new_view(max_alerts=3, path=tmp_path / "store", clock_ms=lambda: now[0])
    view._store.write({SESSION_GRAVE + b"gone": TS.pack(2_000)}, {}, {"graves": 1})  # as the previous version wrote it
    close_stores()
    view = new_view(max_alerts=3, path=tmp_path / "store", clock_ms=lambda: now[0])
    assert view.prune_graves(retention_ms=6_000) == 0 and view.graves() == 1
    feed(view, Source.SESSIONS, ("gone", session_snapshot("gone", ts=1_500).to_json()))
    assert view.session("gone")[0] is None, "the old grave still refuses an older copy"
    now[0] += 7_000
    assert view.prune_graves(retention_ms=6_000) == 1 and view.graves() == 0


def test_a_far_future_snapshot_does_not_bring_back_an_older_copy_of_a_deleted_user():
    """Issue 51: graves were pruned behind the newest snapshot time seen, so one snapshot stamped
    in the year 9999 pruned every grave, after which an older copy of a deleted user was served."""
    view = new_view(max_alerts=3)
    feed(view, Source.SESSIONS, ("gone", session_snapshot("gone", ts=2_000).to_json()), ("gone", None))
    feed(view, Source.SERIES, ("cpu", metric_snapshot("cpu", 1.0).to_json()), ("cpu", None))
    year_9999 = 253_402_300_799_999
    feed(view, Source.SESSIONS, ("future", session_snapshot("future", ts=year_9999).to_json()))
    feed(view, Source.SERIES, ("far", metric_snapshot("far", 1.0).model_copy(update={"ts": year_9999}).to_json()))
    assert view.prune_graves(retention_ms=7 * 24 * 3_600_000) == 0
    feed(view, Source.SESSIONS, ("gone", session_snapshot("gone", ts=1_500).to_json()))
    feed(view, Source.SERIES, ("cpu", metric_snapshot("cpu", 9.0).model_copy(update={"ts": 4}).to_json()))
    assert view.session("gone")[0] is None and view.series("cpu")[0] is None
    assert view.graves() == 2


def test_series_follow_the_same_event_time_rule():
    view = new_view(max_alerts=3)
    newer = metric_snapshot("cpu", 2.0).model_copy(update={"ts": 50})
    older = metric_snapshot("cpu", 9.0).model_copy(update={"ts": 40})
    feed(view, Source.SERIES, ("cpu", newer.to_json()), ("cpu", older.to_json()))
    assert view.series("cpu")[0].last_z == 2.0
    feed(view, Source.SERIES, ("cpu", None), ("cpu", older.to_json()))
    assert view.series("cpu")[0] is None and view.sizes()["series"] == 0


# ------------------------------------------------------------------------ the store
def test_a_reopened_store_has_the_same_view_and_offsets(tmp_path):
    view = new_view(max_alerts=2, path=tmp_path / "store")
    put_sessions(view, session_snapshot("a"), session_snapshot("b", active=False))
    feed(view, Source.SERIES, ("cpu", metric_snapshot("cpu", 3.0).to_json()))
    alerts = [alert(f"u{i}", ts) for i, ts in enumerate([10, 30, 20])]
    feed(view, Source.ALERTS, *[(a.alert_id, a.to_json()) for a in alerts])
    before = (walk(view, 10), walk(view, 10, True), view.series("cpu"), view.alerts(None, None, None, 10), view.sizes())
    positions = {source: view.positions(source) for source in Source}
    close_stores()

    again = new_view(max_alerts=2, path=tmp_path / "store")
    assert (walk(again, 10), walk(again, 10, True), again.series("cpu"), again.alerts(None, None, None, 10), again.sizes()) == before
    assert {source: again.positions(source) for source in Source} == positions
    assert not again.empty
    # A replayed alert that was evicted stays out; a known one stays a duplicate.
    assert feed(again, Source.ALERTS, (alerts[0].alert_id, alerts[0].to_json()), (alerts[1].alert_id, alerts[1].to_json())) == []


def test_reset_forgets_values_and_offsets():
    view = new_view(max_alerts=3)
    put_sessions(view, session_snapshot("a"))
    view.reset()
    assert view.empty and view.session("a")[0] is None and view.sizes()["sessions"] == 0
    assert view.positions(Source.SESSIONS) == {}


def test_a_reset_for_recreated_topics_clears_and_records_the_new_ids_in_one_write(tmp_path):
    """Killed right after the reset, the directory holds no old view under the new ids (which
    would be served, and resumed at the deleted topic's offsets): a kill leaves the files as
    they are, so a copy taken before closing is what a restart would open."""
    path = tmp_path / "store"
    view = new_view(max_alerts=3, path=path)
    view.remember_topic_ids({"s": "old-id"})
    put_sessions(view, session_snapshot("a"))
    view.reset({"s": "new-id"})
    shutil.copytree(path, tmp_path / "killed")
    opened = open_store(tmp_path / "killed", 8, IDENTITY)
    try:
        again = StateView(opened.store, 3)
        assert opened.rebuild_reason is None
        assert again.empty and again.session("a")[0] is None and again.positions(Source.SESSIONS) == {}
        assert again.topic_ids() == {"s": "new-id"}
    finally:
        opened.store.close()


def test_an_unreadable_or_foreign_store_is_set_aside_and_rebuilt(tmp_path):
    path = tmp_path / "store"
    view = new_view(max_alerts=3, path=path)
    put_sessions(view, session_snapshot("a"))
    _opened.remove((view._store, False))
    view._store.close()
    for name in path.iterdir():
        if name.name.startswith("MANIFEST"):
            name.write_bytes(b"\x00garbage" * 100)
    opened = open_store(path, 8, IDENTITY)
    try:
        assert opened.rebuild_reason is not None and "unreadable" in opened.rebuild_reason
        assert StateView(opened.store, 3).empty
        assert (tmp_path / "store.corrupt" / "CURRENT").exists(), "the corrupt store is kept for a look"
    finally:
        opened.store.close()
    foreign = open_store(path, 8, {**IDENTITY, "topics": {"sessions": "other"}})
    try:
        assert "built from topics" in foreign.rebuild_reason
    finally:
        foreign.store.close()
    assert open_store(tmp_path / "none", 8, IDENTITY).rebuild_reason.startswith("no store")
