"""The anomalies job: metrics -> anomaly alerts, metric-state, dead-letters.

    streamstate-anomalies-job --help

One streaming query: Kafka source -> contract validation (non-numeric or missing values
become dead letters and never reach the state; they pass the one stateful operator under a
reserved key, so the topic is read once) -> ``map_with_state`` per series running
:mod:`streamstate_jobs.anomalies.rules` on each value in arrival order -> routed to the
output topics. A series idle for ``series_idle_timeout_ms`` of event time is expired and
tombstoned on ``metric-state``. The job's declaration is :data:`JOB`.
"""

from __future__ import annotations

import operator
from functools import partial
from typing import Any

from pyspark.sql import DataFrame

from streamstate_pipeline.contracts import Metric
from streamstate_jobs.context import JobContext
from streamstate_jobs.declaration import JobSpec
from streamstate_jobs.anomalies import rules as anomalies
from streamstate_jobs.rules.dead_letters import refused_point
from streamstate_jobs.runner import job_main
from streamstate_jobs.validation import dead_letter_row
from streamstate_jobs.kinds import Kind
from streamstate_pipeline.settings import Settings
from streamstate.state import Columns, Emit, State, StateSpec


_ARRIVAL_ORDER = operator.itemgetter(0, 1)  # (partition, offset)


def on_series(rule: anomalies.AnomalyRule, series_id: str, points: Columns, state: State):
    """Columnar function: fold the series' new values in arrival (offset) order."""
    if state.is_timing_out():
        return  # idle: not updating removes the series (tombstone)
    current = state.get() if state.exists() else anomalies.new_state()
    arrived = sorted(zip(points["partition"], points["offset"], points["ts"], points["value"], range(points.num_rows)), key=_ARRIVAL_ORDER)
    for position, outcome in anomalies.fold(current, series_id, [(ts, value) for _, _, ts, value, _ in arrived], rule):
        if isinstance(outcome, anomalies.Rejected):
            partition, offset, ts, value, row = arrived[position]
            source = (points["topic"][row], partition, offset, points["kafka_ts"][row])
            yield dead_letter_row(refused_point(str(outcome), series_id, ts, value, source))
        else:
            yield Emit(Kind.ALERT, outcome.alert_id, outcome.model_dump_json())
    if current["count"]:
        state.update(current)


def series_snapshot(rule: anomalies.AnomalyRule, series_id: str, state: Any) -> str | None:
    return None if state is None else anomalies.snapshot(series_id, state, rule).model_dump_json()


# What the rule reads of a validated point (map_validated adds the dead-letter columns).
STATE_COLUMNS = ("series_id", "ts", "value", "topic", "partition", "offset")


def state_spec(settings: Settings) -> StateSpec:
    rule = anomalies.AnomalyRule.from_settings(settings)
    return (
        StateSpec.columnar_function(partial(on_series, rule))
        .event_time("ts")
        .timeout(settings.series_idle_timeout_ms)
        .snapshots(partial(series_snapshot, rule))
        .buckets(settings.bucket_count)
        .hot_keys(settings.state_hot_keys)
    )


def build(ctx: JobContext) -> DataFrame:
    return ctx.keyed_state_rows(Metric, "series_id", STATE_COLUMNS, state_spec(ctx.settings), snapshots=Kind.METRIC_STATE)


JOB = JobSpec(
    name="anomalies",
    description="Anomalies job: rolling-window z-score alerts and running statistics per metric series.",
    build=build,
    inputs=("topic_metrics",),
    outputs={"alert": "topic_alerts", "metric_state": "topic_metric_state", "dead_letter": "topic_dead_letters"},
    metrics_port="anomalies_metrics_port",
    alert_kinds=("anomaly",),
)

main = job_main(JOB)

if __name__ == "__main__":
    main()
