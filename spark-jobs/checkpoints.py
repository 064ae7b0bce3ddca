"""What an existing checkpoint fixes for good: the number of state partitions.

Spark writes the session's ``spark.sql.shuffle.partitions`` into every batch's
``offsets/<batch>`` metadata and, on restart, silently uses that stored value instead of the
configured one (state is partitioned by it; it cannot be re-partitioned in place). A user
who changed ``STREAMSTATE_SHUFFLE_PARTITIONS`` would believe the job runs with the new count.
:func:`check_state_partitions` makes that a clear error at start instead.
"""

from __future__ import annotations

import json

from pyspark.sql import SparkSession

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


class StatePartitionsChanged(ValueError):
    """The configured state partition count differs from the one the checkpoint was written with."""


def checkpointed_conf(spark: SparkSession, checkpoint: str) -> dict[str, str] | None:
    """The session configuration stored with the checkpoint's latest batch, or None for a new checkpoint.

    Read through Hadoop's FileSystem, so local paths, ``s3a://`` and ``hdfs://`` all work.
    """
    jvm = spark._jvm  # noqa: SLF001 - Hadoop's FileSystem is only reachable through the JVM
    hadoop_path = jvm.org.apache.hadoop.fs.Path
    offsets = hadoop_path(checkpoint.rstrip("/") + "/offsets")
    fs = offsets.getFileSystem(spark._jsc.hadoopConfiguration())  # noqa: SLF001
    if not fs.exists(offsets):
        return None
    batches = [int(s.getPath().getName()) for s in fs.listStatus(offsets) if s.getPath().getName().isdigit()]
    if not batches:
        return None
    stream = fs.open(hadoop_path(offsets, str(max(batches))))
    try:
        text = jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()
    # Line 1 is the log version ("v1"), line 2 the batch metadata, then one line per source.
    lines = text.splitlines()
    return json.loads(lines[1]).get("conf", {}) if len(lines) > 1 else None


def check_state_partitions(spark: SparkSession, checkpoint: str, wanted: int) -> None:
    """Raise :class:`StatePartitionsChanged` unless ``checkpoint`` is new or was written with ``wanted`` partitions."""
    conf = checkpointed_conf(spark, checkpoint)
    stored = (conf or {}).get(SHUFFLE_PARTITIONS)
    if stored is not None and int(stored) != wanted:
        raise StatePartitionsChanged(
            f"checkpoint {checkpoint} holds state in {stored} partitions and Spark keeps that count for the "
            f"checkpoint's life, but {wanted} were asked for: set STREAMSTATE_SHUFFLE_PARTITIONS={stored} "
            "(--shuffle-partitions) or start from a new checkpoint (state is lost; see docs/cluster.md)"
        )
