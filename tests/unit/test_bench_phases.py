"""The latency figure's phases: the event log's batches and stages, and each batch split into phases."""

from __future__ import annotations

import json

import pytest

from bench.phases import (
    Batch,
    Stage,
    _StageTotals,
    _union_ms,
    batch_phases,
    breakdown,
    epoch_ms,
    parse_events,
    phases_line,
    stage_kind,
    summed_phases,
    timed_in_task,
)
from bench.measure import run_figures
from bench.report import _engine, _latency_floor_rows, _phases, _production_rows, _transaction_rows

QUERY = "453aad0b-f203-4789-b64b-306539f53db8"
STARTED = "2026-11-28T06:05:37.765Z"
SCAN = [{"Name": "DataSourceRDD", "Scope": '{"id":"spark_plan_680","name":"MicroBatchScan"}'},
        {"Name": "MapPartitionsRDD", "Scope": '{"id":"spark_plan_704","name":"MapInArrow"}'}]
STATEFUL = [{"Name": "ShuffledRowRDD", "Scope": '{"id":"spark_plan_712","name":"Exchange"}'},
            {"Name": "StateStoreRDD", "Scope": '{"id":"spark_plan_716","name":"TransformWithStateInPySpark"}'},
            {"Name": "SQLExecutionRDD"}]


def progress(batch: int, rows: int = 100, query: str = QUERY, **durations: int) -> str:
    return json.dumps({"Event": "org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent", "progress": {
        "id": query, "batchId": batch, "timestamp": STARTED, "sources": [{"numInputRows": rows}],
        "durationMs": {"triggerExecution": 500, "walCommit": 5, "commitOffsets": 3, **durations},
        "stateOperators": [{"allUpdatesTimeMs": 200, "allRemovalsTimeMs": 0, "commitTimeMs": 40}],
    }})


def job(batch: int, stages: dict[int, list[dict]], query: str = QUERY) -> str:
    return json.dumps({"Event": "SparkListenerJobStart", "Job ID": batch, "Submission Time": 0,
                       "Stage Infos": [{"Stage ID": sid, "RDD Info": rdds} for sid, rdds in stages.items()],
                       "Properties": {"sql.streaming.queryId": query, "streaming.sql.batchId": str(batch)}})


def stage(stage_id: int, submitted: int, completed: int, attempt: int = 0) -> str:
    return json.dumps({"Event": "SparkListenerStageCompleted", "Stage Info": {
        "Stage ID": stage_id, "Stage Attempt ID": attempt, "Submission Time": submitted, "Completion Time": completed}})


def task(stage_id: int, launched: int, finished: int, attempt: int = 0) -> str:
    return json.dumps({"Event": "SparkListenerTaskEnd", "Stage ID": stage_id, "Stage Attempt ID": attempt,
                       "Task Info": {"Launch Time": launched, "Finish Time": finished}})


def test_stages_are_known_by_what_they_run():
    assert stage_kind(SCAN) == "source"
    assert stage_kind(STATEFUL) == "state"
    # A stage that scans and holds state (no shuffle between) counts as the stateful one.
    assert stage_kind(SCAN + STATEFUL) == "state"
    assert stage_kind([{"Name": "MapPartitionsRDD", "Scope": '{"id":"1","name":"MapInArrow"}'}, {"Name": "SQLExecutionRDD"}]) == "other"


def test_the_log_gives_each_batch_of_the_query_with_data_its_stages_and_task_times():
    lines = [
        progress(0, rows=0), job(0, {0: SCAN, 1: STATEFUL}), stage(0, 0, 10), stage(1, 10, 20),
        job(1, {2: SCAN, 3: STATEFUL}), task(2, 100, 180), task(2, 100, 190), stage(2, 95, 200),
        task(3, 205, 400), task(3, 210, 380), stage(3, 200, 410),
        job(1, {9: SCAN}, query="another-query"), stage(9, 100, 900), progress(1, query="another-query"),
        progress(1),
        progress(2)[:40],  # the log's last line, still being written
    ]
    batches = parse_events(lines, QUERY, validation_by_stage={2: 30.0})
    assert [b.progress["batchId"] for b in batches] == [1]
    assert batches[0].stages == [Stage("source", 95, 200, 170.0, 30.0), Stage("state", 200, 410, 365.0)]
    assert batches[0].started_ms == epoch_ms(STARTED) == 1_795_845_937_765


def test_a_retried_stage_counts_each_attempt_and_its_own_tasks():
    lines = [job(4, {7: STATEFUL}), task(7, 0, 50), stage(7, 0, 60), task(7, 70, 100, attempt=1), stage(7, 65, 110, attempt=1),
             progress(4)]
    (batch,) = parse_events(lines, QUERY, {7: 12.0})
    assert batch.stages == [Stage("state", 0, 60, 50.0, 12.0), Stage("state", 65, 110, 30.0)]


def batch(*stages: Stage, trigger: int = 500) -> Batch:
    (parsed,) = parse_events([progress(1, triggerExecution=trigger)], QUERY)
    return Batch(parsed.progress, list(stages))


def test_a_batchs_phases_add_up_to_its_trigger_execution():
    phases = batch(Stage("source", 100, 200, 160.0, 40.0), Stage("state", 200, 400, 400.0))
    result = batch_phases(phases, timed_validation=True)
    # source stage: 100 ms wall, validation a quarter of its task time
    assert result["validation"] == 25.0 and result["source"] == 75.0
    # state stage: 200 ms wall; updates 200 and the store's commit 40 of 400 ms of tasks
    assert result["state"] == 100.0 and result["write"] == 80.0
    # commit: the offset and commit logs (5 + 3) and the store's share (20)
    assert result["commit"] == 28.0
    # driver: 500 - 300 ms of stages - 8 ms of logs
    assert result["driver"] == 192.0
    assert sum(result.values()) == 500


def test_without_a_timed_validation_step_the_source_stage_is_all_source():
    result = batch_phases(batch(Stage("source", 0, 100, 160.0, 0.0), Stage("state", 100, 300, 400.0)), timed_validation=False)
    assert "validation" not in result and result["source"] == 100.0


def test_shares_never_exceed_their_stage_and_other_stages_are_kept_apart():
    # The operator's timings claim more than its stage's tasks: state takes the stage, nothing is negative.
    result = batch_phases(batch(Stage("state", 0, 100, 50.0), Stage("other", 100, 130, 30.0)), timed_validation=False)
    assert result["state"] == 100.0 and result["write"] == 0.0 and result["other"] == 30.0
    assert min(result.values()) >= 0


def test_overlapping_stages_count_their_wall_time_once():
    assert _union_ms([(0, 100), (50, 150), (200, 210)]) == 160
    assert _union_ms([(0, 100), (10, 20)]) == 100
    assert _union_ms([]) == 0


def test_breakdown_gives_each_phases_median_and_keeps_every_batch():
    batches = [batch(Stage("source", 0, wall, 2.0 * wall, 0.0), Stage("state", wall, 2 * wall, 2.0 * wall), trigger=3 * wall)
               for wall in (100, 300, 200)]
    result = breakdown(batches, timed_validation=True)
    assert result["batches"] == 3 and len(result["per_batch"]) == 3
    assert result["medians_ms"]["source"] == 200.0 and result["medians_ms"]["validation"] == 0.0
    assert result["medians_ms"]["triggerExecution"] == 600
    assert breakdown([], timed_validation=True) == {"batches": 0, "medians_ms": {}, "per_batch": []}


def test_the_phases_line_lists_the_phases_in_order():
    medians = {"commit": 12.4, "driver": 88.0, "state": 190.2, "source": 150.0, "write": 60.0, "triggerExecution": 520}
    assert phases_line(medians) == "driver 88 · source 150 · state 190 · write 60 · commit 12 ms"
    assert phases_line({}) == ""


def test_a_throughput_runs_phases_are_all_its_batches_summed():
    # An availableNow run: its batch of data, then the batch without data that moves the watermark on,
    # where a stateful job folds, closes and writes what the first batch held: both are the run's work.
    lines = [
        job(0, {0: SCAN, 1: STATEFUL}), task(0, 0, 1_000), stage(0, 0, 1_000), task(1, 1_000, 3_000), stage(1, 1_000, 3_000),
        progress(0, triggerExecution=3_200),
        job(1, {2: STATEFUL}), task(2, 3_300, 3_900), stage(2, 3_300, 3_900), progress(1, rows=0, triggerExecution=700),
    ]
    assert [b.progress["batchId"] for b in parse_events(lines, QUERY)] == [0]  # the latency's batches: with data only
    whole_run = parse_events(lines, QUERY, batches_without_data=True)
    assert [b.progress["batchId"] for b in whole_run] == [0, 1]
    phases = summed_phases(whole_run)
    # Batch 0: source 1 s; state stage 2 s split 200 : 40 : the rest of 2 s of tasks; driver 3.2 s - 3 s of stages - 8 ms of logs.
    # Batch 1: its state stage 0.6 s split the same way (200 : 40 : 360), driver 700 - 600 - 8 ms.
    assert phases == {"driver": 284.0, "source": 1_000.0, "state": 400.0, "write": 2_120.0, "commit": 96.0}
    assert sum(phases.values()) == 3_200 + 700
    assert summed_phases([]) == {}
    # A query without state (Spark's noop sink after the source): no state or write phase.
    (stateless,) = parse_events([job(0, {0: SCAN}), task(0, 0, 900), stage(0, 0, 900), progress(0, triggerExecution=950)], QUERY)
    stateless.progress["stateOperators"] = []
    assert summed_phases([stateless]) == {"driver": 42.0, "source": 900.0, "commit": 8.0}


def test_a_throughput_runs_rate_counts_every_batch_to_its_last_output():
    def batch_progress(rows: int, trigger: int) -> dict:
        return {"numInputRows": rows, "durationMs": {"triggerExecution": trigger, "addBatch": trigger - 10}, "stateOperators": []}

    figures = run_figures([batch_progress(1_000, 8_000), batch_progress(0, 2_000)], records=1_000)
    assert figures["seconds"] == 10.0 and figures["rows_per_s"] == 100
    assert figures["batches"] == 2 and figures["batches_without_data"] == 1 and figures["without_data_ms"] == 2_000
    assert figures["duration_ms"] == {"triggerExecution": 10_000, "addBatch": 9_980}
    # A run of one batch (an engine that emits everything in it) has nothing without data.
    alone = run_figures([batch_progress(1_000, 5_000)], records=1_000)
    assert alone["rows_per_s"] == 200 and alone["batches_without_data"] == 0 and alone["without_data_ms"] == 0
    with pytest.raises(RuntimeError, match="read nothing"):
        run_figures([batch_progress(0, 100)], records=1_000)


def test_a_throughput_row_says_where_the_median_runs_time_went():
    runs = {"median_rows_per_s": 100_000, "runs": [
        {"rows_per_s": 80_000, "phases_ms": {"driver": 1.0}},
        {"rows_per_s": 100_000, "phases_ms": {"driver": 300.0, "source": 3_400.0, "state": 4_300.0, "write": 800.0, "commit": 20.0}},
        {"rows_per_s": 120_000},
    ]}
    label, rate, goal, setup = _engine("Sessions job", runs, "1,000,000 events")
    assert rate == "100,000/s (runs 80,000-120,000)" and goal == ""
    assert setup == "1,000,000 events; the median run: driver 300 · source 3,400 · state 4,300 · write 800 · commit 20 ms"
    # Runs measured without an event log (and older results) keep the plain row.
    assert _engine("Quix", {"median_rows_per_s": 5, "runs": [{"rows_per_s": 5}]}, "setup")[3] == "setup"


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_task_timer_counts_the_functions_own_time_not_its_waits_on_input():
    clock, added = FakeClock(), []

    def arriving():  # each input batch takes 5 s to arrive
        for value in (1, 2, 3):
            clock.now += 5
            yield value

    def doubled(batches):  # 2 s of work per batch
        for value in batches:
            clock.now += 2
            yield value * 2

    run = timed_in_task(doubled, added.append, lambda: 7, clock=clock)
    assert list(run(arriving())) == [2, 4, 6]
    assert added == [{7: 6_000.0}]


def test_the_task_timer_sums_per_stage():
    totals = _StageTotals()
    merged = totals.addInPlace(totals.zero({}), {1: 5.0})
    merged = totals.addInPlace(merged, {1: 2.5, 2: 1.0})
    assert merged == {1: 7.5, 2: 1.0}


def test_the_report_shows_the_phases_of_the_job_and_its_floors():
    medians = {"driver": 88.0, "source": 150.0, "validation": 20.0, "state": 190.0, "write": 60.0, "commit": 12.0,
               "triggerExecution": 520}
    latency = {"median_p50_ms": 800.0, "median_p99_ms": 1200.0, "batch_phase_medians_ms": {"triggerExecution": 480},
               "phases": {"batches": 40, "medians_ms": medians}}
    figure = {**latency, "floors": {"spark": {**latency, "phases": {"batches": 41, "medians_ms": {"driver": 50.0, "triggerExecution": 300}}},
                                    "machinery": {**latency, "phases": {"error": "no event log"}}}}
    rows = _latency_floor_rows(figure)
    # The median batch of the same batches as the phases, not of the last ones (480 ms).
    assert rows[0][1] == "520 ms: driver 88 · source 150 · validation 20 · state 190 · write 60 · commit 12 ms"
    assert rows[0][3] == "medians over the measured periods' 40 batches; each batch's phases add up to it (notes)"
    assert rows[1][1] == "800 / 1,200 ms, batch 300 ms: driver 50 ms"
    # A measurement without phases keeps its median batch alone.
    assert rows[2][1] == "800 / 1,200 ms, batch 480 ms"
    assert _phases({"median_p50_ms": 1.0}) == ""


@pytest.mark.parametrize("error", [{"error": "the SparkSession writes no event log"}, {"batches": 0, "medians_ms": {}, "per_batch": []}])
def test_a_latency_without_phases_shows_none(error):
    assert _phases({"phases": error}) == ""


def test_the_production_rows_show_the_phases_of_both_checkpoint_managers():
    def latency(commit: float) -> dict:
        medians = {"driver": 300.0, "commit": commit, "triggerExecution": 900}
        return {"median_p50_ms": 1000.0, "median_p99_ms": 1500.0,
                "batch_phase_medians_ms": {"walCommit": 5, "commitOffsets": 3, "commitTimeMs": 40, "triggerExecution": 880},
                "phases": {"batches": 12, "medians_ms": medians}}

    figures = {"production": {"latency": latency(150.0), "latency_spark_file_manager": latency(310.0)}}
    rows = {row[0]: row[1] for row in _production_rows(figures, "latency")}
    assert rows["Event-to-alert latency, production path: the median batch, by phase"] == "900 ms: driver 300 · commit 150 ms"
    assert rows["... with Spark's checkpoint file manager"].endswith("; batch 900 ms: driver 300 · commit 310 ms")


def test_the_transactions_rows_show_the_phases_with_and_without():
    def latency(write: float) -> dict:
        return {"median_p50_ms": 900.0, "median_p99_ms": 1400.0,
                "phases": {"batches": 30, "medians_ms": {"write": write, "triggerExecution": 700}}}

    figure = {"sessions_job": {"on": {"median_rows_per_s": 90.0}, "off": {"median_rows_per_s": 100.0}},
              "ratio_throughput_on_vs_off": 0.9, "latency": {"on": latency(106.0), "off": latency(84.0)}}
    rows = {row[0]: row[1] for row in _transaction_rows(figure)}
    assert rows["... transactions on: the median batch, by phase"] == "700 ms: write 106 ms"
    assert rows["... transactions off: the median batch, by phase"] == "700 ms: write 84 ms"
