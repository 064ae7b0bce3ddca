"""What an existing checkpoint fixes for good: the number of state partitions, and the
input topics its offsets belong to.

Spark writes the session's ``spark.sql.shuffle.partitions`` into every batch's
``offsets/<batch>`` metadata and, on restart, silently uses that stored value instead of the
configured one (state is partitioned by it; it cannot be re-partitioned in place). A user
who changed ``STREAMSTATE_SHUFFLE_PARTITIONS`` would believe the job runs with the new count.
:func:`state_partitions` makes that a clear error at start instead, and, where no count is
set, runs a new checkpoint with one state partition per core and an existing one with its own.

The input topics' ids are kept next to the checkpoint (``streamstate/topic-ids.json``), so
that a topic recreated under the checkpoint is noticed (see
:mod:`streamstate_jobs.kafka.identity`). Everything is read and written through Hadoop's
FileSystem, so local paths, ``s3a://`` and ``hdfs://`` all work; the metadata files are
written atomically and read back checked (:mod:`streamstate_jobs.checkpoint_metadata`).
"""

from __future__ import annotations

import json
import logging
import time

from pyspark.sql import SparkSession

from streamstate_jobs.checkpoint_metadata import (
    CheckpointError,
    CheckpointMetadataDamaged,
    decode,
    encode,
    engine_shape,
    topic_ids_shape,
)
from streamstate_jobs.kafka.identity import InputTopics, raise_if_changed, topic_ids
from confluent_kafka import KafkaException

from streamstate_pipeline.kafka_clients import KafkaConnection, broker_settings, reason, require_broker
from streamstate_pipeline.settings import NEW_CHECKPOINT_BUCKETS, UNRECORDED_BUCKETS, Settings
from streamstate.state.placement import balanced_labels

SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
log = logging.getLogger("streamstate_jobs")


class StatePartitionsChanged(CheckpointError):
    """The configured state partition count differs from the one the checkpoint was written with."""


TOPIC_IDS_FILE = "streamstate/topic-ids.json"
ENGINE_FILE = "streamstate/engine.json"
ENGINE_FIX = (
    "Restore it from a backup (it holds the bucket count and labels the keys' state was placed by); or, for a "
    "checkpoint whose engine.json never held bucket_labels and knowing the bucket count it started with, delete it "
    "and start with STREAMSTATE_STATE_BUCKETS set to that count; or start from a new checkpoint (state is lost)"
)
TOPIC_IDS_FIX = (
    "Restore it from a backup; or, if no input topic was deleted and created again since the checkpoint "
    "was written, delete it (the topics' ids are recorded afresh); or start from a new checkpoint"
)


class CheckpointFiles:
    """Files under one checkpoint location, through Hadoop's FileSystem (driver side)."""

    def __init__(self, spark: SparkSession, checkpoint: str):
        self._jvm = spark._jvm  # noqa: SLF001 - Hadoop's FileSystem is only reachable through the JVM
        self._root = checkpoint.rstrip("/")
        self._path = self._jvm.org.apache.hadoop.fs.Path  # type: ignore[union-attr]  # PySpark types the JVM handle Optional; it is set while Spark runs
        self._fs = self._path(self._root).getFileSystem(spark._jsc.hadoopConfiguration())  # noqa: SLF001

    def read(self, relative: str) -> str | None:
        return self._read(self._path(f"{self._root}/{relative}"))

    def _read(self, path) -> str | None:
        if not self._fs.exists(path):
            return None
        stream = self._fs.open(path)
        try:
            return self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")  # type: ignore[union-attr]  # PySpark types the JVM handle Optional; it is set while Spark runs
        finally:
            stream.close()

    def where(self, relative: str) -> str:
        return f"{self._root}/{relative}"

    def read_checked(self, relative: str) -> str | None:
        """:meth:`read`, with a file Hadoop finds damaged (its ``.crc`` disagrees) reported as such."""
        try:
            return self.read(relative)
        except Exception as exc:  # noqa: BLE001 - Py4JJavaError of a ChecksumException or an I/O error
            raise CheckpointMetadataDamaged(
                f"{self.where(relative)} cannot be read ({' '.join(str(exc).split())[:200]})"
            ) from None

    def write(self, relative: str, text: str) -> None:
        """Atomically, through Spark's own CheckpointFileManager: a temporary file renamed into
        place (one PUT on S3), so a crash mid-write leaves the old content or the new, never a mix."""
        self._write(self._path(f"{self._root}/{relative}"), text)

    def _write(self, path, text: str) -> None:
        manager = self._jvm.org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager.create(  # type: ignore[union-attr]  # PySpark types the JVM handle Optional; it is set while Spark runs
            path.getParent(), self._fs.getConf()
        )
        manager.mkdirs(path.getParent())
        stream = manager.createAtomic(path, True)
        try:
            stream.write(bytearray(text.encode("utf-8")))
        except BaseException:
            stream.cancel()
            raise
        stream.close()

    def batches(self, log: str) -> list[int]:
        """Batch ids in the checkpoint's ``offsets`` or ``commits`` log."""
        return self.numbered(log)

    def numbered(self, relative: str) -> list[int]:
        """The numbers that name entries of a folder: batch ids in a log, operators in ``state``, partitions in an operator's folder."""
        folder = self._path(f"{self._root}/{relative}")
        if not self._fs.exists(folder):
            return []
        return [int(s.getPath().getName()) for s in self._fs.listStatus(folder) if s.getPath().getName().isdigit()]

    def qualified(self, relative: str) -> str:
        """A location as Spark names it in the state stores' ids: qualified by its file system (``file:/...``, ``s3a://...``)."""
        path = self._path(self._root)
        return self._path(path.makeQualified(self._fs.getUri(), self._fs.getWorkingDirectory()).toUri().toString(), relative).toString()

    def discard_unstarted_leftovers(self) -> list[str]:
        """Delete the temporary files a kill left while Spark wrote the very first batch; returns their names.

        Spark writes ``offsets/0`` and ``commits/0`` through a hidden ``.0.<uuid>.tmp`` that it
        renames when complete. A process killed in between leaves that file behind, and since
        Spark 4.2 a query whose offset log is still empty refuses a non-empty log directory
        (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY), so the job could never start again. With no
        batch written yet nothing was processed, and a hidden file is never a batch: removing
        them loses nothing.
        """
        if self.batches("offsets"):
            return []
        removed = []
        for batch_log in ("offsets", "commits"):
            folder = self._path(f"{self._root}/{batch_log}")
            if not self._fs.exists(folder):
                continue
            for status in self._fs.listStatus(folder):
                name = status.getPath().getName()
                if name.startswith("."):
                    self._fs.delete(status.getPath(), False)
                    removed.append(f"{batch_log}/{name}")
        return removed

    def exists(self) -> bool:
        return self._fs.exists(self._path(self._root))

    def move_aside(self, suffix: str) -> str:
        """Rename the whole checkpoint to ``<checkpoint>.<suffix>``; returns the new location.

        A rename is atomic on a local disk, but on S3 it is a copy and then a delete, and a kill
        during the delete would leave part of the checkpoint in place, for the next start to read
        as if it were whole. So a marker next to the checkpoint names the move while it runs, and
        the next start finishes it (:meth:`finish_interrupted_move`) before reading anything."""
        target = f"{self._root}.{suffix}"
        self._write(self._marker, target)
        self._rename_root(target)
        self._fs.delete(self._marker, False)
        return target

    def finish_interrupted_move(self) -> str | None:
        """Finish a :meth:`move_aside` a kill interrupted; returns where the checkpoint went, or None
        when no move was under way. Where the copy had begun (S3), what remains in place goes."""
        target = self._read(self._marker)
        if target is None:
            return None
        if self._fs.exists(self._path(self._root)):
            if self._fs.exists(self._path(target)):
                self._fs.delete(self._path(self._root), True)
            else:
                self._rename_root(target)
        self._fs.delete(self._marker, False)
        return target

    @property
    def _marker(self):
        return self._path(f"{self._root}.moving-aside")

    def _rename_root(self, target: str) -> None:
        if not self._fs.rename(self._path(self._root), self._path(target)):
            raise OSError(f"could not move checkpoint {self._root} to {target}")


def checkpointed_conf(spark: SparkSession, checkpoint: str) -> dict[str, str] | None:
    """The session configuration stored with the checkpoint's latest batch, or None for a new checkpoint."""
    files = CheckpointFiles(spark, checkpoint)
    batches = files.batches("offsets")
    if not batches:
        return None
    text = files.read(f"offsets/{max(batches)}") or ""
    # Line 1 is the log version ("v1"), line 2 the batch metadata, then one line per source.
    lines = text.splitlines()
    return json.loads(lines[1]).get("conf", {}) if len(lines) > 1 else None


class BatchMarkersMayHaveExpired(CheckpointError):
    """The checkpoint's last batch was planned and never committed, longer ago than the broker
    keeps the committed-batch markers of output transactions: replaying it could write its
    outputs a second time. The runner stops with :attr:`exit_code`; the message names the remedy."""

    condition = "OUTPUT_MARKERS_EXPIRED"
    exit_code = 6


# Kafka's offsets.retention.minutes unless a broker says otherwise (7 days).
DEFAULT_OFFSETS_RETENTION_MINUTES = 7 * 24 * 60


def uncommitted_batch(spark: SparkSession, checkpoint: str) -> tuple[int, int] | None:
    """The batch the checkpoint planned and did not commit (Spark replays it on start), as its
    id and the time it was planned (epoch ms, from its offsets file); None when there is none."""
    files = CheckpointFiles(spark, checkpoint)
    planned = max(files.batches("offsets"), default=-1)
    if planned < 0 or planned <= max(files.batches("commits"), default=-1):
        return None
    lines = (files.read(f"offsets/{planned}") or "").splitlines()
    try:
        return planned, int(json.loads(lines[1])["batchTimestampMs"])
    except (IndexError, KeyError, TypeError, ValueError):
        raise CheckpointMetadataDamaged(f"{files.where(f'offsets/{planned}')} holds no batch metadata") from None


def offsets_retention_ms(settings: Settings) -> int:
    """How long the brokers keep a consumer group's offsets after its last commit (the shortest
    of theirs), where the output transactions keep their committed-batch markers."""
    try:
        minutes = [int(value) for value in broker_settings(settings.kafka, "offsets.retention.minutes")]
    except (KafkaException, TimeoutError) as exc:
        # Kafka's default only where the brokers answer and refuse (an ACL): a broker that does
        # not answer is an outage, and its setting may be far shorter than the default.
        require_broker(settings.kafka)
        log.warning("the brokers' offsets.retention.minutes cannot be read (%s): assuming Kafka's default, 7 days",
                    reason(exc) if isinstance(exc, KafkaException) else "timed out")
        minutes = []
    return min(minutes or [DEFAULT_OFFSETS_RETENTION_MINUTES]) * 60_000


def check_markers_kept(spark: SparkSession, checkpoint: str, settings: Settings, now_ms: int | None = None) -> None:
    """Refuse to replay a batch whose committed-batch markers the broker may have expired.

    A task commits its batch id, in its output transaction, as the offset of a consumer group
    named after its transactional id; a replayed batch whose marker shows it committed writes
    nothing again. The broker drops a group's offsets ``offsets.retention.minutes`` after their
    commit (7 days by default). A job that stopped between Kafka's commit of a batch and Spark's,
    and stayed down longer, would find the markers gone and write that batch's outputs a second
    time. The marker was committed after the batch was planned, so a batch planned less than
    the retention ago (with a tenth of it to spare, at most 10 minutes, for the job's start)
    still has its markers; an older one stops the job (:class:`BatchMarkersMayHaveExpired`),
    unless ``settings.on_expired_batch_markers`` is ``replay``."""
    pending = uncommitted_batch(spark, checkpoint)
    if pending is None:
        return
    batch, planned_ms = pending
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    retention_ms = offsets_retention_ms(settings)
    if now_ms - planned_ms < retention_ms - min(retention_ms // 10, 600_000):
        return
    planned = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(planned_ms / 1000))
    what = (
        f"batch {batch} of the checkpoint {checkpoint} was planned at {planned}, {_age(now_ms - planned_ms)} ago, and never "
        f"committed; the brokers at {settings.bootstrap_servers} keep the output transactions' "
        f"committed-batch markers (consumer group offsets) for offsets.retention.minutes={retention_ms // 60_000} after "
        "their commit, so if the batch's transactions committed before the job stopped, their markers may be gone and "
        "replaying the batch would write its outputs a second time"
    )
    if settings.on_expired_batch_markers == "replay":
        log.warning("%s: replaying it as STREAMSTATE_ON_EXPIRED_BATCH_MARKERS=replay says", what)
        return
    raise BatchMarkersMayHaveExpired(
        f"[{BatchMarkersMayHaveExpired.condition}] {what}. To replay it anyway, accepting that this one batch's outputs "
        "may be seen twice by read_committed consumers, start the job once with STREAMSTATE_ON_EXPIRED_BATCH_MARKERS=replay; "
        "to keep outages up to a length safe, set the brokers' offsets.retention.minutes above it"
    )


def _age(ms: int) -> str:
    minutes = ms / 60_000
    return f"{minutes:.0f} minutes" if minutes < 120 else f"{minutes / 60:.1f} hours"


def query_id(spark: SparkSession, checkpoint: str) -> str:
    """The id Spark gave the query of ``checkpoint`` when it first started it (its ``metadata``
    file): the same for every run on the checkpoint, new when a checkpoint starts over."""
    text = CheckpointFiles(spark, checkpoint).read("metadata")
    if not text:
        raise CheckpointError(f"checkpoint {checkpoint} has no metadata file: the query has not started on it")
    return str(json.loads(text.splitlines()[0])["id"])


def finish_interrupted_move(spark: SparkSession, checkpoint: str) -> None:
    """Complete a start-over's move of ``checkpoint`` that a kill interrupted (see :meth:`CheckpointFiles.move_aside`)."""
    moved = CheckpointFiles(spark, checkpoint).finish_interrupted_move()
    if moved is not None:
        log.warning("checkpoint %s: finished moving it to %s, which a kill had interrupted (starting over)", checkpoint, moved)


def discard_unstarted_leftovers(spark: SparkSession, checkpoint: str) -> None:
    """Let a job killed while writing its first batch start again (see :meth:`CheckpointFiles.discard_unstarted_leftovers`)."""
    removed = CheckpointFiles(spark, checkpoint).discard_unstarted_leftovers()
    if removed:
        log.warning("checkpoint %s: removed %s, left by a kill before its first batch was written", checkpoint, ", ".join(removed))


def state_partitions(spark: SparkSession, checkpoint: str, wanted: int | None) -> int:
    """The state partition count a query on ``checkpoint`` runs with: the checkpoint's own for an
    existing one, else ``wanted``, else ``spark.sql.shuffle.partitions`` where Spark was given it
    (``spark-submit --conf``, spark-defaults.conf), else the cores Spark runs on (``local[N]``: N).

    Raises :class:`StatePartitionsChanged` when ``wanted`` is given and differs from the checkpoint's."""
    conf = checkpointed_conf(spark, checkpoint)
    stored = (conf or {}).get(SHUFFLE_PARTITIONS)
    if stored is None:
        given = spark.sparkContext.getConf().get(SHUFFLE_PARTITIONS)  # None unless set at launch: Spark's 200 is not counted
        return wanted or (int(given) if given else spark.sparkContext.defaultParallelism)
    if wanted is not None and int(stored) != wanted:
        raise StatePartitionsChanged(
            f"checkpoint {checkpoint} holds state in {stored} partitions and Spark keeps that count for the "
            f"checkpoint's life, but {wanted} were asked for: set STREAMSTATE_SHUFFLE_PARTITIONS={stored} "
            "(--shuffle-partitions), leave it unset, or start from a new checkpoint (state is lost; see docs/cluster.md)"
        )
    return int(stored)


def bucket_labels(spark: SparkSession, checkpoint: str, wanted: int | None, partitions: int) -> tuple[int, ...]:
    """The labels of the buckets a job on ``checkpoint`` groups its keys by, one per bucket (a
    key's bucket label is where its state lives). An existing checkpoint keeps its own: its
    recorded labels, else ``0..B-1`` for its recorded count B. A new one gets ``wanted`` buckets,
    else :data:`~streamstate_pipeline.settings.NEW_CHECKPOINT_BUCKETS`, with labels that spread them evenly
    over its ``partitions`` state partitions, and records them.

    Raises :class:`StatePartitionsChanged` when ``wanted`` is given and differs from the checkpoint's count."""
    files = CheckpointFiles(spark, checkpoint)
    stored = files.read_checked(ENGINE_FILE)
    if stored is None:
        if files.batches("commits"):
            # From before the count was recorded, when the jobs' default was 64: nothing to compare with.
            return tuple(range(wanted or UNRECORDED_BUCKETS))
        labels = balanced_labels(wanted or NEW_CHECKPOINT_BUCKETS, partitions)
        files.write(ENGINE_FILE, encode({"state_buckets": len(labels), "bucket_labels": list(labels)}))
        return labels
    engine = decode(stored, files.where(ENGINE_FILE), engine_shape, ENGINE_FIX)
    buckets = engine["state_buckets"]
    if wanted is not None and buckets != wanted:
        raise StatePartitionsChanged(
            f"checkpoint {checkpoint} keeps its keys' state in {buckets} buckets (a key's bucket is where its state "
            f"lives), but {wanted} were asked for: set STREAMSTATE_STATE_BUCKETS={buckets}, leave it unset, or start "
            "from a new checkpoint (state is lost)"
        )
    return tuple(engine.get("bucket_labels", range(buckets)))


class TopicIdentity:
    """Records the input topics' ids with a checkpoint, checks them as a query starts, and hands
    the writer tasks what to check before every batch (:class:`InputTopics`)."""

    def __init__(self, spark: SparkSession, checkpoint: str, broker: KafkaConnection, topics: list[str]):
        """``broker``: the job's connection (``Settings.kafka``: bootstrap servers and client options)."""
        self._files = CheckpointFiles(spark, checkpoint)
        self._checkpoint = checkpoint
        self._broker = broker
        self._topics = topics
        # Read now: a damaged file stops the job at start, not in its first batch.
        stored = self._files.read_checked(TOPIC_IDS_FILE)
        where = self._files.where(TOPIC_IDS_FILE)
        self._recorded: dict[str, str] = decode(stored, where, topic_ids_shape, TOPIC_IDS_FIX) if stored is not None else {}

    def check(self) -> InputTopics:
        """Raise :class:`~streamstate_jobs.kafka.identity.SourceResetError` when an input topic is
        not the one the checkpoint read; record the ids of topics it has not recorded yet; return
        them for the tasks to check."""
        current = topic_ids(self._broker, self._topics)
        raise_if_changed(self._recorded, current, self._checkpoint)
        missing = {name: topic_id for name, topic_id in current.items() if name not in self._recorded}
        if missing:
            self._recorded = {**self._recorded, **missing}
            self._files.write(TOPIC_IDS_FILE, encode(self._recorded))
        return InputTopics(self._broker, tuple(sorted(self._recorded.items())), self._checkpoint)
