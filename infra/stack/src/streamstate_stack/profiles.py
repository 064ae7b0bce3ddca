"""The stack's two profiles: where a run keeps its checkpoints.

Both run the same broker and Kafka path: Apache Kafka as a KRaft broker with its data on
disk (``var/kafka`` for ``make run``) and Spark's built-in ``kafka`` source and sink. They
differ only where users differ:

- ``embedded`` (``make run``, most tests): checkpoints on the local disk.
- ``production``: what ``docker compose up`` runs, natively: ``s3a://`` checkpoints in MinIO.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Profile:
    name: str
    s3_checkpoints: bool  # checkpoints in the object store (MinIO) rather than on the local disk
    summary: str


EMBEDDED = Profile(
    name="embedded",
    s3_checkpoints=False,
    summary="Apache Kafka (KRaft), Spark's built-in Kafka connector, checkpoints on the local disk",
)
PRODUCTION = Profile(
    name="production",
    s3_checkpoints=True,
    summary="Apache Kafka (KRaft), Spark's built-in Kafka connector, s3a:// checkpoints in MinIO",
)
PROFILES = {profile.name: profile for profile in (EMBEDDED, PRODUCTION)}
