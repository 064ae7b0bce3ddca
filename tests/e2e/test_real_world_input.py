"""Real producers send valid but hostile input: one client whose clock runs an hour fast, one
a day fast, purchases at the top of the double range, metric series at the extremes. The
scripted scenario is produced in three stages (the first half, processed; then the hostile
records; then the rest) to both jobs on real Spark; every output equals the plain-Python
reference, the hostile records that cannot be applied are dead-lettered with their reasons,
and the queries never fail.

Kafka timestamps follow the producing relay's clock: the newest valid event time produced so
far, so honest records are never ahead of their Kafka timestamp and the skewed ones are.
"""

from __future__ import annotations

import json
import time

import pytest

from streamstate_pipeline.contracts import ContractError, Metric, UserEvent, parse_input
from streamstate_producers.produced_record import ProducedRecord
from tests.scenario import (
    Scenario,
    assert_outputs_match,
    build_scenario,
    collect_outputs,
    pipeline_topics,
    produce_scenario,
    records_read,
    start_jobs_in_process,
)

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

HOUR_MS = 3_600_000


def event(user_id: str, event_id: str, kind: str, ts: int, amount: float | None = None) -> ProducedRecord:
    body = UserEvent.model_construct(event_id=event_id, user_id=user_id, type=kind, ts=ts, page=None, amount=amount)
    return ProducedRecord("user-events", user_id.encode(), body.model_dump_json(exclude_none=True).encode(), None, "normal")


def point(series_id: str, ts: int, value: float) -> ProducedRecord:
    body = Metric.model_construct(series_id=series_id, ts=ts, value=value)
    return ProducedRecord("metrics", series_id.encode(), body.model_dump_json().encode(), None, "normal")


def event_time(record: ProducedRecord) -> int | None:
    model = UserEvent if record.topic == "user-events" else Metric
    try:
        return parse_input(model, record.key, record.value).ts
    except ContractError:
        return None


def relay_clocks(records: list[ProducedRecord]) -> list[dict[str, int]]:
    """Per record, the newest valid event time produced so far on each input topic."""
    clocks, now = [], {"user-events": 0, "metrics": 0}
    for record in records:
        ts = event_time(record)
        if ts is not None:
            now = {**now, record.topic: max(now[record.topic], ts)}
        clocks.append(now)
    return clocks


def kafka_timestamps(records: list[ProducedRecord], clocks: list[dict[str, int]]) -> list[int]:
    """Kafka timestamps as an honest relay stamps them: its clock is never behind what it relayed."""
    return [max(clock.values()) for clock in clocks]


def hostile(clock: dict[str, int], user: str) -> tuple[list[ProducedRecord], list[int]]:
    """The hostile records, each stamped with its own topic's clock, and those timestamps."""
    users, metrics = clock["user-events"], clock["metrics"]
    stamped = [
        (event(user, "skewed-hour", "page_view", users + HOUR_MS), users),  # a client clock an hour fast
        (point("series-skewed", metrics + 25 * HOUR_MS, 1.0), metrics),  # a day fast: would expire every series
        (event(user, "huge-1", "purchase", users + 1, 1e308), users),
        (event(user, "huge-2", "purchase", users + 2, 1e308), users),  # purchase_total would overflow
        *[(point("extreme-wide", metrics + i, v), metrics) for i, v in enumerate([1e200, 0.0] * 7)],
        *[(point("extreme-tiny", metrics + i, v), metrics) for i, v in enumerate([5e-324, -0.0, 0.0] * 5)],
        (point("extreme-sum", metrics, 1e308), metrics),
        (point("extreme-sum", metrics + 1, 1.7976931348623157e308), metrics),  # the running sum would overflow
    ]
    return [record for record, _ in stamped], [stamp for _, stamp in stamped]


def wait_read(queries: list, produced: list, settings, timeout_s: float = 300) -> None:
    """Until the sessions and anomalies queries have read every record produced so far, and
    one more batch has run (a batch's watermark applies from the next batch on)."""
    counts = [sum(r.topic == topic for r in produced) for topic in (settings.topic_user_events, settings.topic_metrics)]
    deadline = time.monotonic() + timeout_s
    while any(records_read(q) < n for q, n in zip(queries, counts)):
        for query in queries:
            assert query.exception() is None, query.exception()
        assert time.monotonic() < deadline, f"not read in {timeout_s}s: {[records_read(q) for q in queries]} of {counts}"
        time.sleep(0.5)
    batches = [q.lastProgress["batchId"] for q in queries]
    while any(q.lastProgress["batchId"] <= b for q, b in zip(queries, batches)):
        assert time.monotonic() < deadline, "no batch ran after the stage was read"
        time.sleep(0.5)


def test_hostile_valid_records_leave_everyone_else_exact(spark, bootstrap, settings, new_topic, tmp_path):
    pipeline = settings.model_copy(
        update={**pipeline_topics(new_topic), "checkpoint_root": str(tmp_path), "trigger_interval": "1 second"}
    )
    scenario = build_scenario(seed=23, events=4_000, metrics=900, users=300)
    half = len(scenario.records) // 2
    first, rest = scenario.records[:half], scenario.records[half:]
    clocks = relay_clocks(scenario.records)
    stamps = kafka_timestamps(scenario.records, clocks)
    active_user = next(json.loads(r.value)["user_id"] for r in reversed(first) if r.topic == "user-events" and event_time(r))
    extra, extra_stamps = hostile(clocks[half - 1], active_user)

    queries = start_jobs_in_process(spark, pipeline)
    try:
        # Each stage is read (and its batch has moved the watermark) before the next is produced.
        produced = produce_scenario(bootstrap, Scenario(23, first), pipeline, stamps[:half])
        wait_read(queries, produced, pipeline)
        produced += produce_scenario(bootstrap, Scenario(23, extra), pipeline, extra_stamps)
        wait_read(queries, produced, pipeline)
        produced += produce_scenario(bootstrap, Scenario(23, rest), pipeline, stamps[half:])
        scenario.records = first + extra + rest
        scenario.produced = produced
        outputs = collect_outputs(bootstrap, pipeline, scenario=scenario, timeout_s=300)
        for query in queries:
            assert query.isActive and query.exception() is None, query.exception()
    finally:
        for query in queries:
            query.stop()

    assert_outputs_match(scenario, outputs, pipeline)
    refused = {(letter.stage, json.loads(letter.value).get("event_id") or json.loads(letter.value).get("series_id")): letter
               for letter in outputs.dead_letters.values() if letter.stage != "contract"}
    assert set(refused) == {
        ("clock_skew", "skewed-hour"), ("clock_skew", "series-skewed"), ("state", "huge-2"), ("state", "extreme-sum")
    }, sorted(refused)
    assert "3600000 ms ahead of the record's Kafka timestamp" in refused[("clock_skew", "skewed-hour")].reason
    assert "purchase_total" in refused[("state", "huge-2")].reason
    assert {"extreme-wide", "extreme-tiny", "extreme-sum"} <= set(outputs.metric_state)
    wide = outputs.metric_state["extreme-wide"]
    assert wide.mean == 5e199 and wide.std == 5e199
