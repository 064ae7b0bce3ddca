"""Kafka records Spark's source cannot read: each becomes a dead letter, is skipped, and the query runs on.

Spark 4.2's Kafka source converts every record's timestamp while it builds the row, and a
timestamp at or beyond :data:`~streamstate_jobs.kafka.timestamps.SPARK_LIMIT_MS` (either sign)
fails the task: ``KafkaIllegalStateException: Record at topic T partition P offset O has
timestamp value V that overflows ...`` (condition ``KAFKA_MALFORMED_RECORD_TIMESTAMP``). No
source option avoids it, and Spark re-reads the record at every restart, so on a topic that
accepts such timestamps (Kafka's defaults; see :mod:`streamstate_jobs.kafka.timestamps`) one
record would stop a job for good. :class:`RunPastUnreadableRecords` wraps a query; when the
query fails with that error it

1. writes the record's dead letter (stage ``contract``, its key and value read from Kafka with
   confluent-kafka, the reason, the source coordinates) to the job's dead-letter topic, exactly
   once: in a Kafka transaction that also commits a marker, an offset of a consumer group named
   after the query and the record, and nothing when the marker shows it was written before;
2. makes Spark skip exactly that record by editing the checkpoint's offset log
   (:func:`plan_skip`, :func:`apply_edit`), through Hadoop's FileSystem and Spark's own atomic writes, as
   the job's other checkpoint files;
3. starts the query again, and is from then on the new query for its callers: the same object
   stays active and reports no exception.

Why the edit keeps state and outputs exactly once. Spark writes ``offsets/N`` before it runs batch
N and ``commits/N`` after; a batch that failed on a record never reached its stateful stage nor its
output tasks (the read is the first stage, and the record is read in every attempt), so nothing of
batch N was applied or written, and on restart Spark re-runs N from ``offsets/N-1`` (for N = 0
the source's initial offsets, ``sources/<i>/0``) to ``offsets/N``. Let S be where N starts
reading partition P. If S < O, batch N is cut to end at O: it reads [S, O), is applied and
committed as any batch, and the next batch starts at O and fails there again, the second case.
If S == O, the start moves to O+1 in ``offsets/N-1`` (a committed batch's end, which only says
where N starts) or in the initial offsets: batch N reads [O+1, E). Nothing else in the
checkpoint changes. The dead letter is written before the edit: a kill in between re-runs the
skip, and the marker keeps the dead letter single.

The error is recognised by its text (one pattern, :data:`UNREADABLE_TIMESTAMP`): PySpark's
``StreamingQuery.exception()`` keeps only the JVM error's text, and the fields come from it.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from streamstate_pipeline.contracts import DeadLetter, dead_letter_text
from streamstate_pipeline.errors import SourceError
from streamstate_jobs.checkpoints import CheckpointFiles
from streamstate_jobs.declaration import JobSpec
from streamstate_jobs.kafka.partition_writer import TRANSACTIONAL_TUNING
from streamstate_jobs.kafka.timestamps import SPARK_LIMIT_MS
from streamstate_jobs.rules.dead_letters import coordinates_key
from streamstate_pipeline.kafka_clients import producer_config, reader_config
from streamstate_jobs.kinds import Kind

if TYPE_CHECKING:
    from streamstate_pipeline.settings import Settings

log = logging.getLogger("streamstate_jobs")

# The one place the error's text is matched: Spark 4.2.0's KAFKA_MALFORMED_RECORD_TIMESTAMP as the
# failed query carries it (the condition's name is not in that text): the query's error is the
# source's message alone (PySpark's exception()), or after "terminated with exception: " (raised
# by awaitTermination); a Spark action that met it in a task names the exception's class.
UNREADABLE_TIMESTAMP = re.compile(
    r"(?:^|terminated with exception: |KafkaIllegalStateException: )"
    r"Record at topic (?P<topic>[A-Za-z0-9._-]+) partition (?P<partition>\d+) "
    r"offset (?P<offset>\d+) has timestamp value (?P<timestamp>-?\d+) that overflows when converting to "
    r"Spark's microsecond-precision TimestampType",
    re.MULTILINE,
)
STAGE = "contract"
CALL_TIMEOUT_S = 60.0
READ_TIMEOUT_S = 30.0
CALL_RETRIES = 10
VISITS_PER_RECORD = 2  # cut the batch before it, then skip it: a third failure on it means the edit did not hold


@dataclass(frozen=True)
class UnreadableRecord:
    """Where Spark's Kafka source failed, and the timestamp it could not convert (ms)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int

    @property
    def reason(self) -> str:
        return (
            f"kafka timestamp out of range: {self.timestamp_ms} ms is beyond the +-{SPARK_LIMIT_MS} ms Spark's "
            "Kafka source converts (year 294,247); the record was skipped"
        )

    def __str__(self) -> str:
        return f"{self.topic} partition {self.partition} offset {self.offset}"


def unreadable_record(error: object) -> UnreadableRecord | None:
    """The record a failed query could not read because of its timestamp, or None for any other failure."""
    found = UNREADABLE_TIMESTAMP.search(str(error))
    if found is None:
        return None
    return UnreadableRecord(found["topic"], int(found["partition"]), int(found["offset"]), int(found["timestamp"]))


class CannotSkip(SourceError, RuntimeError):
    """The checkpoint does not have the shape the skip relies on: the failure stands."""


# --------------------------------------------------------------------------- the offset log
@dataclass(frozen=True)
class OffsetLogEdit:
    """One edit of a checkpoint's offset log: ``file``'s offset of the record's partition, in
    its source's line (``line``), from ``old`` to ``new``; ``skips`` when it moves a start past the record."""

    file: str
    line: int
    old: int
    new: int
    skips: bool

    def __str__(self) -> str:
        what = "start moved past the record" if self.skips else "batch cut to end before the record"
        return f"{self.file}: {what} ({self.old} -> {self.new})"


def _kafka_offsets(line: str) -> dict[str, dict[str, int]] | None:
    try:
        parsed = json.loads(line)
    except ValueError:
        return None
    if not isinstance(parsed, dict) or not all(isinstance(p, dict) for p in parsed.values()):
        return None
    return parsed


def plan_skip(files: CheckpointFiles, record: UnreadableRecord) -> OffsetLogEdit:
    """The edit that moves the checkpoint's uncommitted batch off ``record`` (see the module's text)."""
    batches = files.batches("offsets")
    if not batches:
        raise CannotSkip("the checkpoint has no offset log")
    batch = max(batches)
    if batch in files.batches("commits"):
        raise CannotSkip(f"its last batch {batch} is committed, so no batch read the record")
    lines = (files.read(f"offsets/{batch}") or "").split("\n")
    if len(lines) < 3 or lines[0] != "v1":
        raise CannotSkip(f"offsets/{batch} is not a v1 offset log entry")
    partition = str(record.partition)
    sources = [i for i, line in enumerate(lines[2:]) if partition in ((_kafka_offsets(line) or {}).get(record.topic) or {})]
    if len(sources) != 1:
        raise CannotSkip(f"offsets/{batch} has {len(sources)} sources reading {record.topic} partition {partition}")
    source = sources[0]
    end = int(_kafka_offsets(lines[2 + source])[record.topic][partition])  # type: ignore[index]  # found above
    if batch > 0:
        start_file, start_line = f"offsets/{batch - 1}", 2 + source
        start_lines = (files.read(start_file) or "").split("\n")
        if len(start_lines) <= start_line or start_lines[0] != "v1":
            raise CannotSkip(f"{start_file} does not hold source {source}'s offsets")
    else:
        # The source's initial offsets: Spark's KafkaSourceInitialOffsetWriter writes a zero byte, "v1" and the JSON.
        start_file, start_line = f"sources/{source}/0", 1
        start_lines = (files.read(start_file) or "").split("\n")
        if len(start_lines) != 2 or start_lines[0] != "\x00v1":
            raise CannotSkip(f"{start_file} does not hold the source's initial offsets")
    starts = (_kafka_offsets(start_lines[start_line]) or {}).get(record.topic) or {}
    if partition not in starts:
        raise CannotSkip(f"{start_file} has no start for {record.topic} partition {partition} (a partition added since)")
    start = int(starts[partition])
    if not start <= record.offset < end:
        raise CannotSkip(f"offset {record.offset} is outside batch {batch}'s range [{start}, {end}) of the partition")
    if start < record.offset:
        return OffsetLogEdit(f"offsets/{batch}", 2 + source, end, record.offset, skips=False)
    return OffsetLogEdit(start_file, start_line, start, record.offset + 1, skips=True)


def apply_edit(files: CheckpointFiles, record: UnreadableRecord, edit: OffsetLogEdit) -> None:
    """Write ``edit`` atomically, through Spark's CheckpointFileManager, as Spark writes the log: on a
    local disk the new content's checksum file (``.<batch>.crc``) is renamed into place with it."""
    lines = (files.read(edit.file) or "").split("\n")
    offsets = _kafka_offsets(lines[edit.line])
    if offsets is None or int(offsets[record.topic][str(record.partition)]) != edit.old:
        raise CannotSkip(f"{edit.file} changed while the skip was planned")
    offsets[record.topic][str(record.partition)] = edit.new
    lines[edit.line] = json.dumps(offsets, separators=(",", ":"))
    files.write(edit.file, "\n".join(lines))


# --------------------------------------------------------------------------- the dead letter
def read_record(settings: Settings, record: UnreadableRecord) -> tuple[bytes | None, bytes | None]:
    """The record's key and value, read as Spark's source reads (read_uncommitted)."""
    consumer = Consumer(reader_config(settings.kafka, "unreadable-record", **{"isolation.level": "read_uncommitted"}))
    try:
        consumer.assign([TopicPartition(record.topic, record.partition, record.offset)])
        deadline = time.monotonic() + READ_TIMEOUT_S
        while time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    break
                raise CannotSkip(f"reading {record}: {error}")
            if message.offset() == record.offset:
                return message.key(), message.value()
            break  # past it: the record is gone (retention, compaction)
        raise CannotSkip(f"{record} could not be read from Kafka within {READ_TIMEOUT_S:.0f} s")
    finally:
        consumer.close()


def dead_letter(record: UnreadableRecord, key: bytes | None, value: bytes | None) -> DeadLetter:
    return DeadLetter(
        reason=record.reason,
        stage=STAGE,
        source_topic=record.topic,
        source_partition=record.partition,
        source_offset=record.offset,
        key=dead_letter_text(key),
        value=dead_letter_text(value),
        ts=record.timestamp_ms,
    )


def _retried(what: str, action: Callable[[], Any]) -> Any:
    for attempt in range(CALL_RETRIES):
        try:
            return action()
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if error.retriable() and attempt < CALL_RETRIES - 1:
                time.sleep(min(0.05 * 2**attempt, 2.0))
                continue
            raise CannotSkip(f"{what}: {error.str()}") from exc
    raise AssertionError("unreachable")


def write_dead_letter(settings: Settings, topic: str, letter: DeadLetter, transactional_id: str | None) -> bool:
    """Write ``letter`` to ``topic``; False when its marker shows it was written before.

    With ``transactional_id`` (the jobs' output transactions are on) the letter and its marker, the
    offset of the consumer group ``transactional_id`` on ``topic`` partition 0, commit in one
    transaction, so a ``read_committed`` consumer sees the letter once whatever is killed when;
    ``init_transactions`` aborts what an earlier, killed attempt left open. Without, at least once."""
    key, value = coordinates_key(letter), letter.model_dump_json()
    if transactional_id is None:
        producer = Producer(producer_config(settings.kafka))
        producer.produce(topic, key=key, value=value)
        if producer.flush(CALL_TIMEOUT_S):
            raise CannotSkip(f"the dead letter of {letter.source_topic}:{letter.source_partition}:{letter.source_offset} was not delivered")
        return True
    producer = Producer({**producer_config(settings.kafka), **TRANSACTIONAL_TUNING, "transactional.id": transactional_id})
    group = Consumer({**settings.kafka.client_config(), "group.id": transactional_id, "enable.auto.commit": False,
                      "isolation.level": "read_committed"})
    try:
        _retried("init_transactions", lambda: producer.init_transactions(CALL_TIMEOUT_S))
        marker = _retried("reading the marker", lambda: group.committed([TopicPartition(topic, 0)], timeout=CALL_TIMEOUT_S))[0]
        if marker.offset >= 0:
            return False
        producer.begin_transaction()
        producer.produce(topic, key=key, value=value)
        done = TopicPartition(topic, 0, letter.source_offset + 1)
        _retried("send_offsets_to_transaction", lambda: producer.send_offsets_to_transaction(
            [done], group.consumer_group_metadata(), CALL_TIMEOUT_S))
        _retried("commit_transaction", lambda: producer.commit_transaction(CALL_TIMEOUT_S))
        return True
    finally:
        group.close()


# --------------------------------------------------------------------------- the query
@dataclass
class Skipper:
    """What a query needs to skip a record: its checkpoint, the dead-letter topic (None: the query
    skips the record without one, as a job's extra queries drop the bad records its own query
    dead-letters), the output transactions' id prefix (None: at least once) and the job's metrics."""

    spark: SparkSession
    settings: Settings
    checkpoint: str
    dead_letter_topic: str | None
    transactional_prefix: Callable[[], str] | None = None
    metrics: Any = None

    def skip(self, record: UnreadableRecord) -> OffsetLogEdit:
        files = CheckpointFiles(self.spark, self.checkpoint)
        edit = plan_skip(files, record)
        if edit.skips and self.dead_letter_topic is not None:
            letter = dead_letter(record, *read_record(self.settings, record))
            prefix = self.transactional_prefix() if self.transactional_prefix is not None else None
            transactional_id = f"{prefix}.unreadable.{record.topic}.{record.partition}.{record.offset}" if prefix else None
            if write_dead_letter(self.settings, self.dead_letter_topic, letter, transactional_id):
                if self.metrics is not None:
                    self.metrics.dead_letters.labels(stage=STAGE).inc()
                    self.metrics.records_out.labels(topic=self.dead_letter_topic).inc()
            else:
                log.info("the dead letter of %s was written before (its marker is committed)", record)
        apply_edit(files, record, edit)
        return edit


class RunPastUnreadableRecords(StreamingQuery):
    """A streaming query that, failing on a record Spark's Kafka source cannot read, dead-letters
    the record, skips it and starts again (:class:`Skipper`), as the same object for its callers.

    The failure is handled when the query is looked at (``isActive``, ``exception()``,
    ``awaitTermination()``, ``processAllAvailable()``), so what a caller sees of the query never
    includes it. Any other failure, or a skip that cannot be made (:class:`CannotSkip`, or the
    broker unreachable: logged with its reason), is left as Spark reported it, for the runner's
    restart with backoff, whose next query tries the skip again."""

    def __init__(self, start: Callable[[], StreamingQuery], skipper: Skipper) -> None:
        super().__init__(start()._jsq)
        self._start = start
        self._skipper = skipper
        self._lock = threading.RLock()
        self._stopped = False
        self._visits: dict[UnreadableRecord, int] = {}

    def _run_past(self) -> None:
        with self._lock:
            while not self._stopped and not self._jsq.isActive() and self._jsq.exception().isDefined():
                record = unreadable_record(StreamingQuery.exception(self))
                if record is None:
                    return
                self._visits[record] = visits = self._visits.get(record, 0) + 1
                if visits > VISITS_PER_RECORD:
                    log.error("query %s: failed again on %s after it was skipped; the failure stands", self._what, record)
                    return
                try:
                    self._jsq.awaitTermination()  # until Spark has let go of the query and its checkpoint: it raises the failure
                except Exception:  # noqa: BLE001, S110 - the failure being handled
                    pass
                try:
                    edit = self._skipper.skip(record)
                except Exception as exc:  # noqa: BLE001 - e.g. the broker unreachable: the failure stands, a restart tries again
                    log.error("query %s cannot skip %s, whose Kafka timestamp %d ms Spark cannot read, so its failure stands: %s",
                              self._what, record, record.timestamp_ms, exc, exc_info=not isinstance(exc, CannotSkip))
                    return
                if edit.skips:
                    log.warning(
                        "query %s: skipped %s, whose Kafka timestamp %d ms Spark's Kafka source cannot convert (it would "
                        "fail every restart): the record is on %s as a dead letter, and the checkpoint's %s; restarting",
                        self._what, record, record.timestamp_ms, self._skipper.dead_letter_topic or "the job's dead-letter topic "
                        "(its own query writes it)", edit,
                    )
                else:
                    log.warning(
                        "query %s: %s has a Kafka timestamp (%d ms) Spark's Kafka source cannot convert; the checkpoint's "
                        "%s, so that the records before it are processed; then it is skipped. Restarting",
                        self._what, record, record.timestamp_ms, edit,
                    )
                try:
                    self._jsq = self._start()._jsq
                except Exception:  # noqa: BLE001 - the failed query stays, for its caller to handle as any failure
                    log.exception("query %s could not be started again after the skip", self._what)
                    return

    @property
    def _what(self) -> str:
        return f"{self.name or 'unnamed'} (checkpoint {self._skipper.checkpoint})"

    @property
    def isActive(self) -> bool:
        self._run_past()
        return super().isActive

    def exception(self):
        self._run_past()
        return super().exception()

    def awaitTermination(self, timeout: int | None = None) -> bool | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            jsq = self._jsq
            try:
                if deadline is None:
                    return super().awaitTermination()
                return super().awaitTermination(max(0.0, deadline - time.monotonic()))  # type: ignore[arg-type]  # seconds, as a float too
            except Exception:  # noqa: BLE001 - the query failed: perhaps on a record it skips
                self._run_past()
                if self._jsq is jsq:  # not restarted: the failure is the query's own
                    raise

    def processAllAvailable(self) -> None:
        while True:
            try:
                return super().processAllAvailable()
            except Exception:
                jsq = self._jsq
                self._run_past()
                if self._jsq is jsq:
                    raise

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
        super().stop()


def run_past_unreadable_records(
    start: Callable[[], StreamingQuery],
    spark: SparkSession,
    settings: Any,
    job: JobSpec,
    query: str,
    checkpoint: str,
    transactional_prefix: Callable[[], str] | None = None,
    metrics: Any = None,
) -> StreamingQuery:
    """``start()``'s query (``job``'s query named ``query``), as a :class:`RunPastUnreadableRecords`
    when it reads Kafka. The job's own query writes the dead letters, to the job's dead-letter
    topic, in its output transactions when it has them; an extra query only skips the record."""
    if settings.source != "kafka":
        return start()
    topic = job.output_topics(settings).get(Kind.DEAD_LETTER, settings.topic_dead_letters) if query == job.name else None
    return RunPastUnreadableRecords(start, Skipper(spark, settings, checkpoint, topic, transactional_prefix, metrics))
