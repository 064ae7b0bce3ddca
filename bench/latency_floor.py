"""The floor under the event-to-alert latency: the latency figure's input, trigger and clock
with less in the query, measured beside the anomalies job in the same run.

- ``spark``: Spark's own minimum for a Python stateful query on this input. The Kafka
  source, ``transformWithStateInPandas`` grouped by 8 buckets of series (as many as a new
  checkpoint of the job has, placed as it places them) over as many state partitions as the job picks, a processor
  that registers no state and forwards the sampled points as alerts, and Spark's Kafka
  sink. No validation, no packing, no routing.
- ``machinery``: the anomalies job as it runs (validation, dead letters, packing, buckets
  with their hot sets and timers, the router and its metrics), with a rule that keeps no
  state and forwards the same sampled points.

A sampled point is one whose offset is a multiple of :data:`SAMPLE_EVERY`: at 5,000 points/s
about 10 alerts a second, as many as the job's injected anomalies (``ANOMALY_RATE``), so the
alert consumer measures the same way for all three.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from typing import Any, Iterator

from pyspark import cloudpickle
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle, StreamingQuery

from streamstate_pipeline.contracts import Metric
from streamstate_jobs.anomalies import job as anomalies_job
from streamstate_jobs.checkpoints import state_partitions
from streamstate_jobs.context import JobContext
from streamstate_jobs.runner import start_query
from streamstate_jobs.kinds import Kind
from streamstate_pipeline.settings import NEW_CHECKPOINT_BUCKETS, Settings
from streamstate.state import Columns, Emit, State, StateSpec
from streamstate.state.operators import bucket_of
from streamstate.state.placement import balanced_labels

SAMPLE_EVERY = 500

# The workers unpickle this module's processor and rule by value: they cannot import bench.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def sampled_alert(series_id: str, ts: int) -> str:
    """The alert a floor query writes for a sampled point: what the latency clock reads."""
    return json.dumps({"kind": "anomaly", "series_id": series_id, "ts": ts})


class ForwardSampled(StatefulProcessor):
    """A processor with no state: each sampled point of a group becomes one alert row."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:  # noqa: N802, N803 - Spark's names
        import pandas as pd

        for frame in rows:
            sampled = frame[frame["offset"] % SAMPLE_EVERY == 0]
            if len(sampled):
                yield pd.DataFrame({
                    "key": sampled["series_id"],
                    "value": [sampled_alert(s, int(t)) for s, t in zip(sampled["series_id"], sampled["ts"], strict=True)],
                })

    def close(self) -> None:
        pass


def start_spark_floor(spark: SparkSession, settings: Settings, checkpoint: str) -> StreamingQuery:
    """The ``spark`` floor on ``settings.topic_metrics``, its alerts to ``settings.topic_alerts``."""
    partitions = state_partitions(spark, checkpoint, settings.shuffle_partitions)
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    points = (
        spark.readStream.format("kafka")
        .options(**settings.kafka.spark_options(), subscribe=settings.topic_metrics, startingOffsets="earliest")
        .load()
        .select(
            F.col("key").cast("string").alias("series_id"),
            F.get_json_object(F.col("value").cast("string"), "$.ts").cast("long").alias("ts"),
            "offset",
        )
    )
    # The job's buckets: as many, placed as a new checkpoint places them (labels filling every
    # state partition within one; labels 0..7 split 3 and 5 over two partitions, and the fuller
    # task held the floor's batch back).
    groups = StateSpec.function(lambda key, value, state: None).buckets(
        NEW_CHECKPOINT_BUCKETS, balanced_labels(NEW_CHECKPOINT_BUCKETS, partitions))
    alerts = points.withColumn("bucket", bucket_of(F.col("series_id"), groups)).groupBy("bucket").transformWithStateInPandas(
        ForwardSampled(), "key string, value string", "Append", "None",
    )
    return (
        alerts.writeStream.format("kafka")
        .options(**settings.kafka.spark_options(), topic=settings.topic_alerts)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=settings.trigger_interval)
        .start()
    )


def forward_sampled(series_id: str, points: Columns, state: State) -> Iterator[Emit]:
    """The ``machinery`` floor's rule: no state read or written. A columnar function, as the
    job's own is (the spec it replaces the function of says so)."""
    for partition, offset, ts in zip(points["partition"], points["offset"], points["ts"]):
        if offset % SAMPLE_EVERY == 0:
            yield Emit(Kind.ALERT, f"floor-{partition}-{offset}", sampled_alert(series_id, ts))


def machinery_spec(settings: Settings) -> StateSpec:
    """The job's own spec (buckets, timeout, snapshots, event time) with the floor's rule."""
    return replace(anomalies_job.state_spec(settings), func=forward_sampled)


def _build_machinery(ctx: JobContext):
    spec = machinery_spec(ctx.settings)
    return ctx.keyed_state_rows(Metric, "series_id", anomalies_job.STATE_COLUMNS, spec, snapshots=Kind.METRIC_STATE)


MACHINERY_JOB = replace(anomalies_job.JOB, build=_build_machinery)


def start_machinery_floor(spark: SparkSession, settings: Settings, checkpoint: str) -> StreamingQuery:
    return start_query(spark, settings, MACHINERY_JOB, checkpoint)


# What each floor leaves out, least first.
FLOORS = {"machinery": start_machinery_floor, "spark": start_spark_floor}
