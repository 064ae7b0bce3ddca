"""What a job's builder is handed: :class:`JobContext`, the Spark side of its declaration.

Collaborators travel together: the builder gets the SparkSession, the settings and its own
declaration in one object, and reads its inputs through it, so a builder never names a topic
or a setting the declaration already names (quixstreams hands its collaborators over the same
way, in ``processing/context.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from streamstate_jobs.declaration import JobDeclarationError, JobSpec
from streamstate_jobs.inputs import read_input
from streamstate_jobs.routing import state_rows
from streamstate_jobs.validation import map_validated
from streamstate_jobs.kinds import Kind
from streamstate_pipeline.settings import Settings

if TYPE_CHECKING:
    from streamstate_pipeline.contracts import Metric, UserEvent
    from streamstate.state import StateSpec


@dataclass(frozen=True)
class JobContext:
    """One job's SparkSession, settings and declaration, as its builders see them."""

    spark: SparkSession
    settings: Settings
    job: JobSpec
    # The checkpoint's bucket labels (see streamstate_jobs.checkpoints.bucket_labels); None: the spec's own.
    bucket_labels: tuple[int, ...] | None = None
    # The query's state partitions (the checkpoint's count); None: not known, the reads follow the cores.
    state_partitions: int | None = None

    def read_input(self) -> DataFrame:
        """The job's declared input from its beginning: one Kafka topic or Kinesis stream."""
        topics = self.job.input_topics(self.settings)
        if len(topics) != 1:
            raise JobDeclarationError(f"job {self.job.name!r} declares {len(topics)} inputs; read_input reads exactly one")
        return read_input(self.spark, self.settings, topics[0], self.state_partitions)

    def keyed_state_rows(
        self, contract: type[UserEvent] | type[Metric], key: str, columns: Sequence[str], spec: StateSpec, snapshots: Kind | None
    ) -> DataFrame:
        """The shape of a keyed stateful job, as (kind, key, payload) rows: the input validated
        against ``contract`` (bad records become dead letters), ``spec`` run per ``key`` over
        ``columns`` under the event-time watermark, state snapshots as rows of kind ``snapshots``
        (None: not published)."""
        settings = self.settings
        if self.bucket_labels is not None:
            spec = spec.buckets(len(self.bucket_labels), self.bucket_labels)
        result = map_validated(
            self.read_input(),
            contract,
            settings.max_clock_skew_ms,
            key=key,
            columns=columns,
            spec=spec,
            watermark_delay_ms=settings.watermark_delay_ms,
        )
        if snapshots is None:
            return state_rows(result, Kind.SNAPSHOT).filter(F.col("kind") != Kind.SNAPSHOT.value)
        return state_rows(result, snapshots)
