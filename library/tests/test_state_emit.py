"""Records a function emits with their own kind and key (``Emit``), pinned on both implementations
without Spark (the engine's per-key run and the in-memory tester): the payload reaches the row
encoded once, exactly as the function gave it, and a bad Emit dead-letters only its record."""

from __future__ import annotations

import json

import pytest

from streamstate_pipeline.contracts import Alert
from streamstate_jobs.kinds import Kind
from streamstate.state import Emit, StateSpec
from streamstate.state.keyrun import KeyRun, Plan
from streamstate.state.tester import StateTester


def engine_rows(spec: StateSpec, key, values) -> list[tuple]:
    rows = [(key, value, None, "t", 0, offset) for offset, value in enumerate(values)]
    run = KeyRun(Plan.of(spec), key, None, None, watermark_ms=-1, processing_time_ms=0)
    run.apply_rows(rows)
    return [row[:4] for row in run.rows]


def in_memory_rows(spec: StateSpec, key, values) -> list[tuple]:
    tester = StateTester(spec)
    return [tuple(row) for row in tester.run_batch([(key, value) for value in values]) if row.kind != Kind.SNAPSHOT]


BOTH = pytest.mark.parametrize("rows_of", [engine_rows, in_memory_rows], ids=["engine", "tester"])

ALERT = Alert.build("anomaly", "série-1", 1_700_000_000_123, "z ≈ 4.2 ✓", value=1e-05, mean=0.1, std=None)


def emitting(key, values, state):
    state.update(state.get_option(0) + len(values))
    for value in values:
        if value == "alert-text":
            yield Emit(Kind.ALERT, ALERT.alert_id, ALERT.model_dump_json())
        elif value == "alert-model":
            yield Emit(Kind.ALERT, ALERT.alert_id, ALERT)
        elif value == "count":
            yield Emit(Kind.COUNT, "late_events", "3")
        elif value == "plain":
            yield {"n": state.get()}
        elif value == "tombstone":
            yield Emit("custom", "elsewhere", None)
        elif value == "as-snapshot":
            yield Emit(Kind.SNAPSHOT, key, "{}")
        elif value == "bad-key":
            yield Emit(Kind.ALERT, 7, "{}")


@BOTH
def test_an_emitted_payload_is_written_as_the_function_encoded_it(rows_of):
    rows = rows_of(StateSpec.batch_function(emitting), "u1", ["alert-text", "alert-model", "count", "plain", "tombstone"])
    wire = ALERT.model_dump_json()
    assert rows == [
        ("alert", ALERT.alert_id, wire, None),
        ("alert", ALERT.alert_id, wire, None),
        ("count", "late_events", "3", None),
        ("output", "u1", '{"n":5}', None),
        ("custom", "elsewhere", None, None),
    ]
    assert json.loads(rows[0][2])["message"] == "z ≈ 4.2 ✓"  # one level of JSON, not a string inside a string
    assert all(type(row[0]) is str for row in rows)  # plain text: it goes into Arrow batches


@BOTH
def test_a_bad_emit_dead_letters_only_its_record(rows_of):
    rows = rows_of(StateSpec.batch_function(emitting), "u1", ["count", "as-snapshot", "bad-key", "count"])
    assert [row[:2] for row in rows] == [("count", "late_events"), ("dead_letter", "u1"), ("dead_letter", "u1"), ("count", "late_events")]
    assert "snapshot" in rows[1][3] and "key must be text" in rows[2][3]


@BOTH
def test_an_emitted_payload_over_the_output_limit_is_refused(rows_of):
    spec = StateSpec.batch_function(emitting).max_output_bytes(len(ALERT.model_dump_json()) - 1)
    rows = rows_of(spec, "u1", ["alert-text", "count"])
    assert [row[0] for row in rows] == ["dead_letter", "count"]
    assert "exceeds max_output_bytes" in rows[0][3]
