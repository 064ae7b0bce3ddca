"""Running analytics per metric (count, sum, min, max, avg) with updateStateByKey (seed 000).

The state is a typed record (:class:`Analytics`); its ``avg`` is part of every snapshot.

    python -m examples.analytics --topic metrics
"""

from __future__ import annotations

import sys

from pydantic import BaseModel, computed_field
from pyspark.sql import DataFrame, SparkSession

from examples.runner import main_for, read_json_topic
from streamstate.state import StateResult, update_state_by_key

SCHEMA = "series_id STRING, ts LONG, value DOUBLE"


class Analytics(BaseModel):
    """Running figures of one metric."""

    count: int = 0
    sum: float = 0.0
    min: float = sys.float_info.max
    max: float = -sys.float_info.max

    @computed_field
    @property
    def avg(self) -> float:
        return self.sum / self.count if self.count > 0 else 0.0


def update_analytics(values: list[float], state: Analytics | None) -> Analytics:
    """Fold the batch's values into the running figures."""
    current = state or Analytics()
    for value in values:
        current = Analytics(
            count=current.count + 1,
            sum=current.sum + value,
            min=min(current.min, value),
            max=max(current.max, value),
        )
    return current


def running_analytics(metrics: DataFrame) -> StateResult:
    return update_state_by_key(metrics, key="series_id", func=update_analytics, value="value", state_type=Analytics)


def build(spark: SparkSession, bootstrap_servers: str, topic: str) -> StateResult:
    return running_analytics(read_json_topic(spark, bootstrap_servers, topic, SCHEMA))


if __name__ == "__main__":
    main_for("running analytics with updateStateByKey", build)
