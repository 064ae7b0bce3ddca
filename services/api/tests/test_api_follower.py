"""The view follower's handling of what it consumed, without a broker: validated records handed
to its apply step as its consuming step hands them over."""

from __future__ import annotations

import gc
import time
from pathlib import Path

from confluent_kafka import Message

import streamstate_api.view as view_module
from streamstate_api.broadcast import AlertBroadcaster
from streamstate_api.context import tune_collector
from streamstate_api.follower import READ_BATCH, ViewFollower
from streamstate_api.metrics import ApiMetrics
from streamstate_api.record_contracts import Source, build, summarize
from streamstate_api.store import open_store
from streamstate_api.view import StateView
from streamstate_pipeline.settings import Settings
from tests.api_builders import session_snapshot

IDENTITY = {"format": 1, "topics": {"sessions": "s", "series": "m", "alerts": "a"}}


def _follower(tmp_path: Path) -> tuple[ViewFollower, StateView, ApiMetrics, Settings]:
    settings = Settings(api_store_path=tmp_path / "store", topic_session_state="s", topic_metric_state="m", topic_alerts="a")
    view = StateView(open_store(settings.api_store_path, 8, IDENTITY).store, 10)
    metrics = ApiMetrics(view)
    return ViewFollower(settings, view, metrics, AlertBroadcaster()), view, metrics, settings


def test_a_record_the_store_cannot_hold_is_a_counted_bad_record_and_later_records_go_on(tmp_path):
    """Issue 51: a snapshot whose ``ts`` the store's 64-bit field cannot hold failed the write of
    its whole batch; the follower retried that batch for ever, so nothing after it was served and
    nothing counted it. Here the summary is what an older strict check let through."""
    follower, view, metrics, _ = _follower(tmp_path)
    good, later = session_snapshot("u1", ts=1_000), session_snapshot("u3", ts=3_000)
    huge = session_snapshot("u2", ts=2_000).to_json().replace(b'"ts":2000', b'"ts":%d' % 2**63)
    batch = [
        (Source.SESSIONS, 0, 0, build(Source.SESSIONS, summarize(Source.SESSIONS, b"u1", good.to_json()), good.to_json())),
        (Source.SESSIONS, 0, 1, build(Source.SESSIONS, ("s", "u2", True, 2**63), huge)),
        (Source.SESSIONS, 0, 2, build(Source.SESSIONS, summarize(Source.SESSIONS, b"u3", later.to_json()), later.to_json())),
    ]
    try:
        follower._apply(batch)
        assert view.session("u1")[0] is not None and view.session("u3")[0] is not None, "later records are served"
        assert view.session("u2")[0] is None
        assert view.positions(Source.SESSIONS) == {0: 3}, "the unstorable record is consumed, not retried"
        assert metrics.registry.get_sample_value("streamstate_api_bad_records_total", {"topic": "s"}) == 1
        assert view.sizes()["sessions"] == 2
    finally:
        view.close()


def _sessions(partition: int, first: int, count: int) -> list:
    records = [(f"p{partition}-u{offset}", session_snapshot(f"p{partition}-u{offset}").to_json()) for offset in range(first, first + count)]
    return [
        (Source.SESSIONS, partition, first + i, build(Source.SESSIONS, summarize(Source.SESSIONS, key.encode(), value), value))
        for i, (key, value) in enumerate(records)
    ]


def test_rebuild_progress_counts_only_what_a_flush_kept_even_for_a_partition_at_its_end(tmp_path, monkeypatch):
    """A cold rebuild writes its store without the log: progress reported must survive a kill.
    A partition whose end the consumer reached was counted done whatever the store had kept of
    it, so a kill right after /readyz said 50 % restarted from nothing (the suite's kill
    mid-rebuild, 2026-12-06)."""
    monkeypatch.setattr(view_module, "_FLUSH_EVERY_S", 3_600.0)  # the first batch's flush, then none
    follower, view, _, _ = _follower(tmp_path)
    try:
        follower._targets = {("s", 0): 4, ("s", 1): 2}
        follower._progress_start = (time.monotonic(), 6)
        follower._apply(_sessions(0, 0, 2))
        deadline = time.monotonic() + 30
        while view.kept_positions(Source.SESSIONS).get(0) != 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        follower._apply(_sessions(1, 0, 2))  # applied, not flushed
        follower._done_at_eof.add(("s", 1))  # the consumer reached partition 1's end
        progress = follower.readiness()
        assert progress.remaining == {"s": {"0": 2, "1": 2}}, progress
        assert ": 2 of 6 records" in progress.reason, progress.reason

        view.rebuilt()  # flushed: all that was applied is kept
        assert follower.readiness().remaining == {"s": {"0": 2}}
    finally:
        view.close()


def test_a_rebuild_batch_is_freed_before_a_young_collection_sees_it(tmp_path):
    """Issue 54: the collector's youngest generation ran every 700 tracked allocations, about 14
    times a batch (its consumer messages and their tuples, alive together): each promoted the
    batch in flight, whose survivors then set off full collections, 4 % of a 1M rebuild's time.
    With the collector as the API tunes it at start, whole batches come and go between two
    collections."""
    follower, view, _, _ = _follower(tmp_path)
    snapshots = [(f"u{i}".encode(), session_snapshot(f"u{i}", ts=1_000 + i).to_json()) for i in range(READ_BATCH)]
    collections = [0, 0, 0]

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            collections[info["generation"]] += 1

    threshold = gc.get_threshold()
    try:
        tune_collector()
        gc.callbacks.append(count)
        for batch in range(4):
            messages = [Message(topic="s", partition=0, offset=batch * READ_BATCH + i, key=key, value=value) for i, (key, value) in enumerate(snapshots)]
            follower._apply(follower._consumed(messages))
            del messages
    finally:
        gc.callbacks.remove(count)
        gc.set_threshold(*threshold)
        gc.unfreeze()
        view.close()
    assert view.sizes()["sessions"] == READ_BATCH and view.positions(Source.SESSIONS) == {0: 4 * READ_BATCH}
    assert collections == [0, 0, 0], f"collections (young, middle, full) while applying 4 batches: {collections}"
