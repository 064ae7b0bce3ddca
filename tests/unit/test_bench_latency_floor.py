"""The latency floors forward exactly the sampled points, as alerts the latency clock reads."""

from __future__ import annotations

import json

import pandas as pd

from bench.latency import phase_medians
from bench.latency_floor import SAMPLE_EVERY, ForwardSampled, machinery_spec
from streamstate_jobs.kinds import Kind
from streamstate.state.tester import StateTester
from streamstate_pipeline.settings import Settings


def _points(offsets: list[int]) -> list[dict]:
    return [{"series_id": "s-1", "ts": 1_000 + o, "partition": 3, "offset": o} for o in offsets]


def test_the_machinery_rule_forwards_the_sampled_points_and_keeps_no_state():
    # Through the spec the floor runs (the job's, with its rule replaced), so that a rule of
    # another form than the job's function fails here: it dead-lettered every point once.
    tester = StateTester(machinery_spec(Settings()))
    points = _points([0, 1, SAMPLE_EVERY - 1, SAMPLE_EVERY, 3 * SAMPLE_EVERY])
    rows = tester.run_batch([("s-1", point, point["ts"]) for point in points])
    assert [row.kind for row in rows] == [Kind.ALERT] * 3
    assert [json.loads(row.payload) for row in rows] == [
        {"kind": "anomaly", "series_id": "s-1", "ts": 1_000 + o} for o in (0, SAMPLE_EVERY, 3 * SAMPLE_EVERY)
    ]
    assert len({row.key for row in rows}) == 3
    assert tester.state_of("s-1") is None


def test_the_spark_processor_forwards_the_same_points():
    frame = pd.DataFrame(_points([5, SAMPLE_EVERY, 7, 2 * SAMPLE_EVERY]))
    out = pd.concat(list(ForwardSampled().handleInputRows((0,), iter([frame, frame.iloc[:1]]), None)))
    assert list(out["key"]) == ["s-1", "s-1"]
    assert [json.loads(v)["ts"] for v in out["value"]] == [1_000 + SAMPLE_EVERY, 1_000 + 2 * SAMPLE_EVERY]


def test_phase_medians_skip_the_row_count_and_missing_phases():
    batches = [{"rows": 9, "addBatch": 10, "commitTimeMs": 4}, {"rows": 1, "addBatch": 30}, {"rows": 5, "addBatch": 20, "commitTimeMs": 6}]
    assert phase_medians(batches) == {"addBatch": 20, "commitTimeMs": 5}
