"""The Kafka writer counts what it writes through the job's counting callback and never reads a
payload; routing's callback labels alerts by kind and dead letters by stage, as the metrics count them."""

from __future__ import annotations

import json

import pyarrow as pa

from streamstate_jobs.kafka.partition_writer import OutputPlan, _summary_batches, _write_task
from streamstate_jobs.routing import count_as


class _Written:
    """An output that keeps what it is handed instead of producing it."""

    drains = False

    def __init__(self) -> None:
        self.records: list[tuple[str, str | None, str | None]] = []

    def produce(self, topic: str, key: str | None, payload: str | None) -> None:
        self.records.append((topic, key, payload))

    def poll(self) -> None:
        pass

    def finish(self) -> None:
        pass

    def abandon(self) -> None:
        pass


def _batch(rows):
    kinds, keys, payloads = zip(*rows)
    return pa.RecordBatch.from_pydict({"kind": list(kinds), "key": list(keys), "payload": list(payloads)})


def _plan(count) -> OutputPlan:
    return OutputPlan("job", {"alert": "alerts", "dead_letter": "dead", "session": "sessions"}, frozenset({"closed"}),
                      frozenset(), count)


def test_the_writer_counts_each_record_under_the_label_the_callback_names():
    seen: list[tuple[str, str | None]] = []

    def label(kind: str, payload: str | None) -> str | None:
        seen.append((kind, payload))
        return "x-ish" if payload and payload.startswith("x") else None

    rows = [("alert", "a", "not json, and the writer does not care"), ("alert", "b", "xx"), ("session", "s", None),
            ("count", "closed:timeout", "4")]
    output = _Written()
    groups, read = _write_task(iter([_batch(rows)]), _plan(label), output)  # type: ignore[arg-type]
    assert groups == {("alert", "x-ish", None): [1, 0], ("alert", None, None): [1, 0], ("session", None, None): [1, 0],
                      ("count", None, "closed:timeout"): [1, 4]}
    assert seen == [(kind, payload) for kind, _, payload in rows if kind != "count"]  # counts are not records
    assert [topic for topic, _, _ in output.records] == ["alerts", "alerts", "sessions"]
    assert read == []


def test_without_a_callback_records_are_counted_by_kind():
    groups, _ = _write_task(iter([_batch([("alert", "a", "{}"), ("dead_letter", "d", "{}")])]), _plan(None), _Written())  # type: ignore[arg-type]
    assert groups == {("alert", None, None): [1, 0], ("dead_letter", None, None): [1, 0]}


def test_the_summary_carries_the_label():
    (summary,) = _summary_batches(({("alert", "spike", None): [2, 0], ("count", None, "closed:x"): [1, 5]}, [("alert", "{}")]))
    assert summary.to_pylist() == [
        {"kind": "alert", "label": "spike", "counter": None, "rows": 2, "total": None, "payload": None},
        {"kind": "count", "label": None, "counter": "closed:x", "rows": 1, "total": 5, "payload": None},
        {"kind": "alert", "label": None, "counter": None, "rows": 0, "total": None, "payload": "{}"},
    ]


def test_routing_labels_alerts_by_kind_and_dead_letters_by_stage():
    assert count_as("alert", json.dumps({"kind": "bot_burst", "user_id": "u"})) == "bot_burst"
    assert count_as("dead_letter", json.dumps({"stage": "late", "reason": "r"})) == "late"
    assert count_as("dead_letter", json.dumps({"reason": "r"})) is None  # the metrics count it as stage "state"
    assert count_as("dead_letter", None) is None
    assert count_as("session", "not read") is None
    assert count_as("metric_state", None) is None
