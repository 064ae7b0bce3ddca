"""Writing a micro-batch's output rows to Kafka from the tasks that computed them.

The rows of a batch leave the stateful stage in (kind, key, payload) form. Each task produces
its rows with confluent-kafka and hands back one small summary (rows per kind and label, and
per counter; the payloads a gauge reads), so a whole batch is ONE Spark job: no persist of
the batch, no counting pass, no second pass to write, no collect of payloads. The writer never
reads a payload: the job's wiring gives it a counting callback (:attr:`OutputPlan.count_as`)
that names the label each written record is counted under (an alert's kind, a dead letter's
stage), and hands it the payloads its gauges read as they were written.
Spark's own Kafka sink needs each of those as a job of its own, and each costs a stage's
scheduling and its tasks' start whatever the rows, which at low rates is most of a batch.

A task returns only once every record it produced is acknowledged (``acks=all``, idempotent,
so a retry inside the producer neither duplicates nor reorders a key's records); any delivery
error fails the task, so Spark retries it and, failing that, the batch. Records go to the
partition Kafka's Java clients choose for their key (murmur2), as Spark's sink put them, so a
key of a compacted topic stays in the partition where its earlier records are.

Exactly once (:class:`BatchTransactions`): each task writes its rows of a batch in ONE Kafka
transaction, under a transactional id of its own (the query's id and the task's partition, the
same in every run of the query, since a replayed batch is planned from the same offsets and
state partitions), and commits in that same transaction the batch id as the offset of a
consumer group named after the transactional id (as Kafka Streams commits its input offsets).
A replayed batch's task reads that offset first: when its batch is already committed, it
writes nothing again. ``init_transactions`` when a task's producer starts fences any older
producer with the id (a crashed run's, a stuck old driver's), aborting its open transaction,
so a ``read_committed`` consumer sees each record once, whatever was killed when. A task
starts its producer, ``init_transactions`` and the committed-batch lookup in a thread of its
own as soon as it starts, while the stateful operator in front of it still computes its rows:
``init_transactions`` takes 10-40 ms on a local broker (see ``TRANSACTIONAL_TUNING`` for why
it took 500 ms in a third of the tasks before). The task ends only once that start is done,
even with nothing to write (:meth:`_TransactionalOutput._settle`). It begins its transaction
only once it has all its rows (:attr:`_Output.drains`), so the transaction is open while it
writes, never while they are computed, and sends the batch id into it while it writes (the
coordinators' two round trips beside the records' own); :func:`records_per_batch` bounds a
batch by the transactions' timeout.

A fatal producer error fails the task with its cause (:func:`classify`): fenced by another
copy of the job, the transaction timed out, refused by the ACLs, not supported by the broker;
each an :class:`FatalOutputError` whose message starts with a ``[condition]`` code the runner
finds across the JVM (:func:`fatal_condition`) and stops on with that condition's exit code.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable, Iterator, Mapping, TypeVar, Union

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from pyspark import TaskContext
from pyspark.sql import DataFrame

from streamstate_pipeline.errors import JobError, coded, conditions_in
from streamstate_jobs.declaration import count_key
from streamstate_jobs.kafka.identity import InputTopics
from streamstate_pipeline.kafka_clients import COORDINATOR_NOT_READY, ClientConfig, producer_config, require_broker
from streamstate_jobs.kinds import Kind
from streamstate.state.packing import python_values

if TYPE_CHECKING:  # pydantic stays out of the Python workers that import this module for its tasks
    from streamstate_pipeline.settings import Settings

# A task's summary: one row per (kind, label, counter) with its rows and counter total, and one
# row per payload a gauge reads (rows 0).
_SUMMARY_ARROW = pa.schema(
    [("kind", pa.string()), ("label", pa.string()), ("counter", pa.string()),
     ("rows", pa.int64()), ("total", pa.int64()), ("payload", pa.string())]
)
SUMMARY_SCHEMA = ", ".join(f"{f.name} {'long' if f.type == pa.int64() else 'string'}" for f in _SUMMARY_ARROW)
SUMMARY_COLUMNS = tuple(_SUMMARY_ARROW.names)
# A record is delivered or refused within this (retries included), so a broker outage shorter
# than it delays the batch, and a longer one fails the task.
MESSAGE_TIMEOUT_MS = 120_000
WRITER_TUNING = {
    "enable.idempotence": True,
    "partitioner": "murmur2_random",  # the Java client's partition for a key
    "linger.ms": 2,  # a task flushes its records at its end: lingering would only delay the first send
    "queue.buffering.max.messages": 1_000_000,
    "queue.buffering.max.kbytes": 1_048_576,
    "message.timeout.ms": MESSAGE_TIMEOUT_MS,
}
FLUSH_MARGIN_S = 30.0  # past message.timeout.ms: every record has its outcome by then
# A transaction left open by a killed task blocks read_committed consumers of its partitions
# until its id is used again (the job's restart) or the broker aborts it after
# Settings.output_transaction_timeout_ms; it must cover message.timeout.ms (librdkafka refuses
# less) and stay under the broker's transaction.max.timeout.ms (15 minutes by default). A test
# scales it down, and the records' delivery timeout with it (:func:`transaction_timeouts`).
TRANSACTIONAL_TUNING = {
    # A task's new producer connects at once to every broker its first metadata names. With
    # sparse connections (librdkafka's default) it drops its bootstrap connection on learning the
    # brokers, connects to none, and finds no broker to ask for its producer id until its
    # retry timer fires 500 ms later: init_transactions took 500 ms in about a third of the
    # tasks (docs/profile.md).
    "enable.sparse.connections": False,
}
TRANSACTION_CALL_TIMEOUT_S = 60.0
PROBE_TIMEOUT_S = 20.0
CALL_RETRIES = 10
# The fatal errors of a transactional producer, by cause (:func:`classify`). A broker that aborts
# a transaction past its timeout bumps the producer's epoch, as a newer producer of the id does:
# the producer sees the same codes, and only how long its transaction was open tells them apart.
FENCED_CODES = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
AUTHORIZATION_CODES = (
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED,
)
UNSUPPORTED_CODES = (
    KafkaError.UNSUPPORTED_VERSION, KafkaError._UNSUPPORTED_FEATURE, KafkaError.UNSUPPORTED_FOR_MESSAGE_FORMAT,
    KafkaError.INVALID_TRANSACTION_TIMEOUT,
)
COORDINATOR_MOVING = (*COORDINATOR_NOT_READY, KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT)

# One producer per Python worker process and configuration: Spark reuses its Python workers
# across tasks and batches, and a new producer would pay its broker connections every batch.
_producers: dict[str, Producer] = {}


class OutputNotDeclared(JobError, ValueError):
    """A row of a kind (or a count of a counter) that the job does not declare."""


class OutputNotDelivered(JobError, RuntimeError):
    """Kafka refused or lost records of a batch: the task fails and Spark retries it."""


class TransactionsUnavailable(JobError):
    """The broker cannot run the transactions that output_transactions=on asks for."""


class FatalOutputError(OutputNotDelivered):
    """A transactional producer's fatal error whose cause a restart would meet again: its
    transaction is aborted (nothing of it is seen) and the runner stops the job with
    :attr:`exit_code` instead of restarting it. The message starts with ``[condition]``, a
    stable code like PySpark's error classes: the task's error reaches the driver as the text
    of a Python exception inside a JVM one, and the runner recognises the condition there
    (:func:`fatal_condition`), never the wording. Each subclass says the remedy."""

    condition: ClassVar[str] = "OUTPUT_FATAL"
    exit_code: ClassVar[int] = 1
    remedy: ClassVar[str] = ""

    def __init__(self, detail: str) -> None:
        super().__init__(coded(self.condition, f"{detail}; {self.remedy}"))


class OutputFenced(FatalOutputError):
    """A newer attempt of this task took its transactional id (another copy of the job on the
    same checkpoint): this one's transaction is aborted, nothing of it is seen."""

    condition = "OUTPUT_FENCED"
    exit_code = 2
    remedy = ("another producer took the id (a newer attempt of this task, in another copy of the job on the same "
              "checkpoint), so this transaction is aborted")


class OutputNotAuthorized(FatalOutputError):
    """The broker refuses this client a transactional id, its consumer group or an output topic."""

    condition = "OUTPUT_NOT_AUTHORIZED"
    exit_code = 3
    remedy = ("the broker's ACLs refuse the job's principal: grant it Write and Describe on the transactional ids "
              "prefixed 'streamstate.', Read on the consumer groups prefixed 'streamstate.' and Write on the output "
              "topics (kafka-acls.sh --resource-pattern-type prefixed), or set STREAMSTATE_OUTPUT_TRANSACTIONS=off to "
              "write at least once")


class OutputTransactionTimedOut(FatalOutputError):
    """The broker aborted the task's transaction, open longer than its timeout."""

    condition = "OUTPUT_TRANSACTION_TIMED_OUT"
    exit_code = 4
    remedy = ("the broker aborts a transaction open longer than STREAMSTATE_OUTPUT_TRANSACTION_TIMEOUT_MS (bumping the "
              "producer's epoch, which librdkafka reports as fencing; no other producer of the id committed the batch), and a task's "
              "transaction is open while it writes its rows of the batch: lower STREAMSTATE_MAX_OFFSETS_PER_TRIGGER so "
              "that a batch's writes fit in it, or raise the timeout (at most the broker's transaction.max.timeout.ms)")


class OutputTransactionsUnsupported(FatalOutputError):
    """The broker cannot run the transactions as the job asks for them."""

    condition = "OUTPUT_TRANSACTIONS_UNSUPPORTED"
    exit_code = 5
    remedy = ("the broker cannot run these transactions (a broker too old for them, or a transaction timeout above "
              "its transaction.max.timeout.ms): upgrade the broker, lower STREAMSTATE_OUTPUT_TRANSACTION_TIMEOUT_MS, or "
              "set STREAMSTATE_OUTPUT_TRANSACTIONS=off to write at least once")


FATAL_CONDITIONS: dict[str, type[FatalOutputError]] = {
    kind.condition: kind for kind in (OutputFenced, OutputNotAuthorized, OutputTransactionTimedOut, OutputTransactionsUnsupported)
}


def fatal_condition(error: object) -> type[FatalOutputError] | None:
    """The fatal output condition a failed query's error carries (None: none): its type, or the
    ``[CONDITION]`` code its text holds wherever the JVM put the Python error's text."""
    if isinstance(error, FatalOutputError):
        return type(error)
    # Boundary: the task's FatalOutputError reaches the driver only as text inside a JVM
    # exception (a PythonException's traceback); the code we put into its message is matched there.
    for code in conditions_in(str(error)):
        if code in FATAL_CONDITIONS:
            return FATAL_CONDITIONS[code]
    return None


def is_fenced(error: object) -> bool:
    """Whether a failed query's output was fenced by another copy of the job."""
    return fatal_condition(error) is OutputFenced


def classify(error: KafkaError, open_s: float | None = None, timeout_ms: int | None = None) -> type[FatalOutputError] | None:
    """The fatal condition of a transactional producer's error (None: not one a restart would
    meet again). ``open_s``: how long the producer's transaction had been open; the broker
    aborts one open past ``timeout_ms`` by bumping the producer's epoch, which the producer
    sees as fencing: a transaction open that long timed out, a younger one was fenced."""
    code = error.code()
    if code in AUTHORIZATION_CODES:
        return OutputNotAuthorized
    if code in UNSUPPORTED_CODES:
        return OutputTransactionsUnsupported
    if code in FENCED_CODES:
        if open_s is not None and timeout_ms is not None and open_s * 1000 >= timeout_ms:
            return OutputTransactionTimedOut
        return OutputFenced
    return None


def kafka_error(exc: BaseException | None) -> KafkaError | None:
    """The KafkaError behind ``exc``: a KafkaException's, or, for the SystemError confluent-kafka
    raises when it calls a delivery callback with a fatal error already raised, the one in its context."""
    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
            return exc.args[0]
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


@dataclass(frozen=True)
class BatchTransactions:
    """Write a batch exactly once: ``prefix`` names the query (job, query and its checkpoint's
    query id), each task appends its partition to make its transactional id; the committed
    batch id is kept as the offset of that id's consumer group on ``marker`` (partition 0 of an
    output topic: an offset commit needs an existing topic, and nothing reads these groups)."""

    prefix: str
    batch_id: int
    marker: str

    def transactional_id(self, partition: int) -> str:
        return f"{self.prefix}.{partition}"

    def of_task(self) -> BatchTransactions:
        return self


CountAs = Callable[[str, str | None], str | None]


@dataclass(frozen=True)
class OutputPlan:
    """Where a job's rows go: a topic per kind, the counters its COUNT rows may name, and the
    kinds whose payloads its gauges read. Anything else fails the task before it writes the
    Arrow batch that holds it.

    ``count_as``: the job wiring's counting callback, called in the task with the kind and
    payload of each record it writes; it returns the label the record is counted under in the
    batch's summary (None: by its kind alone). It runs on the executors, so it must pickle (a
    module-level function); without it records are counted by kind."""

    job: str
    topics: Mapping[str, str]
    counters: frozenset[str]
    read_kinds: frozenset[str] = frozenset()
    count_as: CountAs | None = None

    def check(self, batch: pa.RecordBatch) -> None:
        kinds = set(pc.unique(batch.column("kind")).to_pylist())
        unknown = kinds - set(self.topics) - {Kind.COUNT.value}
        if unknown:
            raise OutputNotDeclared(f"rows of kind {sorted(unknown, key=str)}: not among the outputs job {self.job!r} declares {sorted(self.topics)}")
        if Kind.COUNT.value in kinds:
            keys = pc.filter(batch.column("key"), pc.equal(batch.column("kind"), Kind.COUNT.value))
            names = {count_key(key)[0] for key in pc.unique(keys).to_pylist()}
            if names - self.counters:
                raise OutputNotDeclared(
                    f"counts of {sorted(names - self.counters)}: not among the counters and gauges job {self.job!r} declares "
                    f"{sorted(self.counters)}"
                )


@dataclass
class BatchSummary:
    """What a batch's tasks wrote and counted, merged on the driver."""

    rows: list[dict[str, Any]] = field(default_factory=list)  # kind, label, counter, rows, total
    payloads: dict[str, list[str]] = field(default_factory=dict)  # per read kind, as written

    @classmethod
    def merged(cls, rows: Iterable[Mapping[str, Any]]) -> BatchSummary:
        """The summary of a batch from its tasks' summary rows (:data:`SUMMARY_SCHEMA`)."""
        summary = cls()
        merged: dict[Group, dict[str, Any]] = {}  # the tasks' rows of one group as one
        for row in rows:
            if row["payload"] is not None:
                summary.payloads.setdefault(row["kind"], []).append(row["payload"])
                continue
            group = (row["kind"], row["label"], row["counter"])
            if group in merged:
                merged[group]["rows"] += row["rows"]
                if row["total"] is not None:
                    merged[group]["total"] += row["total"]
            else:
                merged[group] = dict(row)
        summary.rows = list(merged.values())
        return summary

    @property
    def counts(self) -> dict[str, int]:
        totals: Counter[str] = Counter()
        for row in self.rows:
            totals[row["kind"]] += row["rows"]
        return dict(totals)


def written_rows(rows: DataFrame, settings: Settings, plan: OutputPlan, transactions: Transactions | None = None,
                 inputs: InputTopics | None = None) -> DataFrame:
    """``rows`` (kind, key, payload) as their tasks' summaries (:data:`SUMMARY_SCHEMA`), each
    task having written its rows to the topic of each row's kind; rows of kind ``count`` are
    counted, not written. A streaming query ends with it (its sink discards the summaries,
    which its metrics observe), so the tasks that compute a batch's rows write them, and the
    batch's offsets and state commit only once every task has written.

    With ``transactions`` each task writes its rows in one Kafka transaction and a task of a
    batch that had committed writes nothing again (its rows are still counted). With ``inputs``
    each task checks first that the input topics are the ones the checkpoint read, and fails
    before writing anything when one is not (:class:`~streamstate_jobs.kafka.identity.InputTopics`)."""
    tuning = {**WRITER_TUNING, **(transaction_timeouts(settings) if transactions is not None else {})}
    config = producer_config(settings.kafka, **{key.replace(".", "__"): value for key, value in tuning.items()})
    group_config = settings.kafka.client_config()
    plan = OutputPlan(plan.job, dict(plan.topics), plan.counters, plan.read_kinds, plan.count_as)  # a plain dict pickles

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        if transactions is None:
            output = _Output(config, inputs)
        else:
            output = _TransactionalOutput(config, group_config, transactions.of_task(), inputs)
        yield from _summary_batches(_write_task(batches, plan, output))

    return rows.select(*WRITTEN_COLUMNS).mapInArrow(write, SUMMARY_SCHEMA)


def write_partitions(rows: DataFrame, settings: Settings, plan: OutputPlan, transactions: BatchTransactions | None = None) -> BatchSummary:
    """Write one batch of ``rows`` outside a streaming query (tests, tools): :func:`written_rows`,
    its summaries collected and merged."""
    return BatchSummary.merged(row.asDict() for row in written_rows(rows, settings, plan, transactions).collect())


# Spark's local properties on the tasks of a streaming query's batch (its stream thread sets them
# for every job of a batch): the batch's id, and the query's id, the one its checkpoint keeps.
BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"
WRITTEN_COLUMNS = ("kind", "key", "payload")


@dataclass(frozen=True)
class QueryTransactions:
    """Write every batch of a streaming query exactly once: each task's transactional ids are
    ``name`` (job and query) and the query's own id, and its batch is the one Spark runs (both
    read from the task's local properties: the same in every run of the query, which a replayed
    batch needs); ``marker`` as for :class:`BatchTransactions`."""

    name: str
    marker: str

    def of_task(self) -> BatchTransactions:
        return BatchTransactions(f"{self.name}.{_local_property(QUERY_ID_PROPERTY)}", int(_local_property(BATCH_ID_PROPERTY)), self.marker)


Transactions = Union[BatchTransactions, QueryTransactions]


def _local_property(name: str) -> str:
    context = TaskContext.get()
    value = context.getLocalProperty(name) if context is not None else None
    if value is None:
        # Never guessed: a wrong batch or query id would skip a batch's rows or write them twice.
        raise OutputNotDelivered(f"the task has no local property {name}: Spark sets it on a streaming query's tasks")
    return value


def transaction_timeouts(settings: Settings) -> dict[str, int]:
    """The transactional producers' ``transaction.timeout.ms`` and a record's delivery timeout
    within it: librdkafka refuses a message.timeout.ms above the transaction's, and a record
    still retried when the broker aborts its transaction would be retried for nothing."""
    timeout_ms = int(settings.output_transaction_timeout_ms)
    return {
        "transaction.timeout.ms": timeout_ms,
        "message.timeout.ms": min(MESSAGE_TIMEOUT_MS, timeout_ms * 2 // 3),
    }


# Admission control, as Kafka Streams bounds a transaction by its commit interval: a batch's
# records are bounded so that its tasks' transactions, open while they write its rows, end
# well within their timeout. Sized from the sessions job's throughput with transactions on,
# compute included (README, Delivery guarantees, "Cost": 70.1k events/s on 2 cores, 2026-12-06,
# every batch of a run counted: in a backlog each batch also settles the events the batch before
# it held), so that a whole batch of it takes a quarter of the timeout: its write alone takes far
# less, and the margin covers a slower machine or a heavier job.
MEASURED_RECORDS_PER_S = 70_100
TIMEOUT_SHARE = 4


def records_per_batch(settings: Settings) -> int | None:
    """Input records a micro-batch reads at most: ``max_offsets_per_trigger`` where set, else,
    with output transactions, the bound sized from their timeout (None: unbounded, at least once)."""
    if settings.max_offsets_per_trigger is not None:
        return int(settings.max_offsets_per_trigger)
    if settings.output_transactions == "off":
        return None
    return max(1, settings.output_transaction_timeout_ms * MEASURED_RECORDS_PER_S // 1000 // TIMEOUT_SHARE)


Group = tuple[str, str | None, str | None]  # kind, label (OutputPlan.count_as), counter


def _write_task(batches: Iterator[pa.RecordBatch], plan: OutputPlan, output: _Output) -> tuple[dict[Group, list[int]], list[tuple[str, str]]]:
    """Produce a task's rows; return its (rows, total) per group and the payloads the plan's gauges read.

    An output that :attr:`~_Output.drains` gets every row of the task before its first record:
    its transaction then opens once the rows are computed and is open only while it writes them,
    whatever the computing took (the stateful operator's rows arrive as it computes them)."""
    groups: dict[Group, list[int]] = {}
    read: list[tuple[str, str]] = []
    count_as = plan.count_as
    try:
        if output.drains:
            batches = iter(list(batches))  # Arrow batches of the batch's output rows: compact, bounded by the batch's size
        for batch in batches:
            plan.check(batch)
            for kind, key, payload in zip(*(python_values(batch.column(name)) for name in ("kind", "key", "payload")), strict=True):
                if kind == Kind.COUNT:
                    counted = groups.setdefault((kind, None, key), [0, 0])
                    counted[0] += 1
                    counted[1] += int(payload or 0)
                    continue
                if kind in plan.read_kinds and payload is not None:
                    read.append((kind, payload))
                label = count_as(kind, payload) if count_as is not None else None
                groups.setdefault((kind, label, None), [0, 0])[0] += 1
                output.produce(plan.topics[kind], key, payload)
            output.poll()
        output.finish()
    except BaseException:
        output.abandon()
        raise
    return groups, read


def _summary_batches(written: tuple[dict[Group, list[int]], list[tuple[str, str]]]) -> Iterator[pa.RecordBatch]:
    groups, read = written
    rows: list[tuple[Any, ...]] = [(*group, n, total if group[0] == Kind.COUNT else None, None) for group, (n, total) in groups.items()]
    rows += [(kind, None, None, 0, None, payload) for kind, payload in read]
    columns = {name: [row[i] for row in rows] for i, name in enumerate(_SUMMARY_ARROW.names)}
    yield pa.RecordBatch.from_pydict(columns, schema=_SUMMARY_ARROW)


class _Delivery:
    """Counts a task's records as they are acknowledged, keeping the first errors."""

    def __init__(self) -> None:
        self.sent = self.acknowledged = self.failed = 0
        self.first_errors: list[str] = []
        self.errors: list[KafkaError] = []

    def __call__(self, error, message) -> None:
        if error is None:
            self.acknowledged += 1
            return
        self.failed += 1
        if len(self.first_errors) < 3:
            self.first_errors.append(f"{message.topic()}: {error}")
            self.errors.append(error)

    def check(self, unflushed: int, waited_s: float, fatal=None) -> None:
        """Raise unless every record was acknowledged: ``fatal(error)`` (if given) names the
        condition of a refusal that a retry would meet again."""
        if self.failed or unflushed or self.acknowledged != self.sent:
            detail = (
                f"{self.acknowledged} of {self.sent} records acknowledged, {self.failed} refused, {unflushed} still "
                f"queued after {waited_s:.0f} s" + (f": {'; '.join(self.first_errors)}" if self.first_errors else "")
            )
            kinds = [kind for kind in map(fatal or (lambda _: None), self.errors) if kind is not None]
            raise kinds[0](detail) if kinds else OutputNotDelivered(detail)


class _Output:
    """A task's records, at least once: produced with the worker's shared producer, the task
    done when every one is acknowledged. Its records go out as its rows are computed."""

    drains = False

    def __init__(self, config: ClientConfig, inputs: InputTopics | None = None) -> None:
        self.config = config
        self.delivery = _Delivery()
        self._producer: Producer | None = None
        # Asked as the task starts, while its rows are computed; answered before its first record.
        self.inputs_checked: Future[None] | None = _in_thread("check input topics", inputs.check) if inputs is not None else None

    def require_inputs(self) -> None:
        """Raise what the input topics' check found (a topic recreated under the checkpoint)
        before anything of the task is written."""
        if self.inputs_checked is not None:
            self.inputs_checked.result()
            self.inputs_checked = None

    @property
    def producer(self) -> Producer:
        if self._producer is None:
            self._producer = _producer(self.config)
        return self._producer

    @property
    def producing(self) -> Producer | None:
        """The producer the task's records went to, if any went out."""
        return self._producer

    def produce(self, topic: str, key: str | None, payload: str | None) -> None:
        if self.inputs_checked is not None:
            self.require_inputs()
        while True:
            try:
                self.producer.produce(topic, value=payload, key=key, on_delivery=self.delivery)
                self.delivery.sent += 1
                return
            except BufferError:  # the local queue is full: let deliveries drain it
                self.producer.poll(0.05)
            except KafkaException as error:
                raise self.failure(error, f"producing to {topic}") from error

    def failure(self, exc: BaseException, what: str) -> BaseException:
        """What the task fails with when a call of its producer raised ``exc``."""
        return OutputNotDelivered(f"{what}: {exc}")

    def poll(self) -> None:
        if self.producing is not None:
            self.producing.poll(0)  # serve delivery reports as they come, not all at the end

    @property
    def flush_timeout_s(self) -> float:
        """Past the records' delivery timeout: every record has its outcome by then."""
        return int(self.config.get("message.timeout.ms", MESSAGE_TIMEOUT_MS)) / 1000 + FLUSH_MARGIN_S

    def finish(self) -> None:
        self.require_inputs()
        if self.producing is not None:
            self.delivery.check(self.producing.flush(self.flush_timeout_s), self.flush_timeout_s)

    def abandon(self) -> None:
        """The task failed: records already sent are out (at least once), nothing to undo."""


class _TransactionalOutput(_Output):
    """A task's records in one transaction, begun at its first record once all its rows are
    computed (:attr:`drains`: the transaction is open only while the task writes, so the time
    its rows take to compute never counts against the transaction's timeout; a task without
    rows writes nothing) and committed with the batch id; none when the batch was committed before.

    Every task starts a producer of its own for the transactional id: ``init_transactions``
    then fences whatever attempt of the partition came before (a crashed run's, a task of a
    stopped run still flushing, a stuck old driver's), so the newest attempt is the one that can
    commit, and the committed batch it reads after that is the broker's latest. A producer kept
    between tasks would go stale: Spark runs a partition's task in any free Python worker."""

    drains = True

    def __init__(self, config: ClientConfig, group_config: ClientConfig, transactions: BatchTransactions,
                 inputs: InputTopics | None = None) -> None:
        super().__init__(config, inputs)
        self.transactions = transactions
        context = TaskContext.get()
        self.partition = context.partitionId() if context is not None else 0
        self.transactional_id = transactions.transactional_id(self.partition)
        self.group_config = group_config
        self.client: _TransactionalClient | None = None
        self.skipping = False
        self.batch_marked: Future[None] | None = None  # the batch id sent into the open transaction
        # Made as the task starts: the producer takes the transactional id and reads the
        # committed batch in the background while the task's rows are still being computed.
        self.starting = self._start_in_background()

    @property
    def producer(self) -> Producer:
        return self._begin().producer

    @property
    def producing(self) -> Producer | None:
        return None if self.client is None or self.skipping else self.client.producer

    def _start_in_background(self) -> Future[tuple[_TransactionalClient, bool]]:
        """The task's client and whether its batch was committed before, once started."""

        def start() -> tuple[_TransactionalClient, bool]:
            client = _TransactionalClient.start(self.transactional_id, self.transactions.marker, self.config, self.group_config,
                                                self.transactions.batch_id)
            return client, client.committed_batch() >= self.transactions.batch_id

        return _in_thread(f"start {self.transactional_id}", start)

    def _begin(self) -> _TransactionalClient:
        if self.client is None:
            self.require_inputs()
            client, self.skipping = self.starting.result()
            if not self.skipping:
                _call(client, "begin_transaction", client.producer.begin_transaction)
                client.open = True
                client.opened_at = time.monotonic()
                self.batch_marked = self._mark_batch_in_background(client)
            self.client = client
        return self.client

    def _mark_batch_in_background(self, client: _TransactionalClient) -> Future[None]:
        """The batch id sent into the transaction (as its marker group's offset) while the task
        produces and flushes its records: the two round trips to the coordinators cost as much
        as writing a batch's records, and their order inside a transaction does not matter.
        A failure is raised at the commit; the task that meets it aborts the transaction."""
        done = TopicPartition(self.transactions.marker, 0, self.transactions.batch_id + 1)
        return _in_thread(f"mark {self.transactional_id}", lambda: _call(
            client, "send_offsets_to_transaction", lambda: client.producer.send_offsets_to_transaction(
                [done], client.group.consumer_group_metadata(), TRANSACTION_CALL_TIMEOUT_S), abort=False))

    def failure(self, exc: BaseException, what: str) -> BaseException:
        """A fatal error of the producer is named by its condition (:func:`classify`), whichever
        call met it first: ``produce`` says only _FATAL, and poll or flush raise it as the
        SystemError of the delivery callback confluent-kafka calls next, the error in its context."""
        client = self.client
        if client is None:
            return exc if isinstance(exc, OutputNotDelivered) else OutputNotDelivered(f"{what}: {exc}")
        error = kafka_error(exc)
        if error is None or error.code() == KafkaError._FATAL:  # produce() names no cause, a SystemError may not either
            self._settle()  # fatal_error's abort would meet the batch id's sending
            error = client.fatal_error() or error
        if error is None:
            return OutputNotDelivered(f"{what} of transactional id {client.transactional_id}: {exc}")
        kind = client.classify(error) if error.fatal() else None
        detail = f"{what} of transactional id {client.transactional_id}: {error.str()}"
        return kind(detail) if kind is not None else OutputNotDelivered(detail)

    def produce(self, topic: str, key: str | None, payload: str | None) -> None:
        self._begin()
        if not self.skipping:
            try:
                super().produce(topic, key, payload)
            except SystemError as exc:  # from a delivery callback served while the local queue was full
                raise self.failure(exc, f"producing to {topic}") from exc

    def poll(self) -> None:
        try:
            super().poll()
        except (KafkaException, SystemError) as exc:
            raise self.failure(exc, "delivering records") from exc

    def finish(self) -> None:
        self.require_inputs()
        try:
            if self.producing is not None:  # every record acknowledged (written, not yet visible), or the task fails
                waited = self.flush_timeout_s
                self.delivery.check(self.producing.flush(waited), waited, self._begin().classify)
        except (KafkaException, SystemError) as exc:
            raise self.failure(exc, "delivering records") from exc
        if self.producing is not None:
            self.commit()
        else:
            self._settle()

    def commit(self) -> None:
        client = self._begin()
        (self.batch_marked or self._mark_batch_in_background(client)).result()
        _call(client, "commit_transaction", lambda: client.producer.commit_transaction(TRANSACTION_CALL_TIMEOUT_S))
        client.open = False

    def abandon(self) -> None:
        """The task failed: its open transaction is aborted, so nothing of it is ever seen (once
        the batch id's sending is done: librdkafka refuses a second transactional call at once)."""
        self._settle()
        if self.client is not None and self.client.open:
            self.client.abort()

    def _settle(self) -> None:
        """Wait for the calls the task runs beside its own (its producer's start, the batch id's
        sending), so that none outlives the task or meets another transactional call (librdkafka
        refuses a second one while one runs). A task that ends without having used its producer
        (no record to write, or failed) waits for it to finish starting: an ``init_transactions``
        still under way (retried while the id's previous transaction completes) would otherwise
        land after the next batch's task of the partition took the id, and fence that task
        mid-write. Their failures, if any, are not raised here."""
        if self.client is None:
            self.starting.exception()
        if self.batch_marked is not None:
            self.batch_marked.exception()


@dataclass
class _TransactionalClient:
    """A task's producer for its transactional id, and the consumer group that keeps the id's
    committed batch."""

    transactional_id: str
    producer: Producer
    group: Consumer
    marker: str
    timeout_ms: int
    errors: list[KafkaError]  # the producer's error_cb: fatal errors where confluent-kafka reports them so
    open: bool = False
    opened_at: float | None = None  # time.monotonic() at begin_transaction
    batch_id: int = -1  # the batch its transaction writes

    @classmethod
    def start(cls, transactional_id: str, marker: str, config: ClientConfig, group_config: ClientConfig,
              batch_id: int = -1) -> _TransactionalClient:
        errors: list[KafkaError] = []
        producer = _transactional_producer({**config, "error_cb": errors.append}, transactional_id)
        timeout_ms = int(config.get("transaction.timeout.ms", 60_000))  # librdkafka's default
        client = cls(transactional_id, producer, _group(transactional_id, group_config), marker, timeout_ms, errors, batch_id=batch_id)
        _call(client, "init_transactions", lambda: producer.init_transactions(TRANSACTION_CALL_TIMEOUT_S))
        return client

    def classify(self, error: KafkaError) -> type[FatalOutputError] | None:
        """:func:`classify` with how long this client's transaction has been open; a transaction
        open past its timeout was fenced all the same when another producer of the id has
        committed its batch since (a stuck old driver's task woken after a new copy took over).
        So was a fatal error :func:`classify` cannot name: which error a fenced producer meets
        first is a race, and librdkafka has reported the batch id's offset commit refused as
        INVALID_TXN_STATE before the _FENCED of its records."""
        open_s = time.monotonic() - self.opened_at if self.opened_at is not None else None
        kind = classify(error, open_s, self.timeout_ms)
        if (kind is OutputTransactionTimedOut or (kind is None and error.fatal())) and self._committed_by_another():
            return OutputFenced
        return kind

    def _committed_by_another(self) -> bool:
        """Whether the id's committed batch is this client's (it never committed it: another did)."""
        if self.batch_id < 0:
            return False
        try:
            offset = self.group.committed([TopicPartition(self.marker, 0)], timeout=PROBE_TIMEOUT_S)[0].offset
        except KafkaException:
            return False
        return offset - 1 >= self.batch_id

    def fatal_error(self) -> KafkaError | None:
        """The producer's fatal error, if it has one: from its error_cb, else from the call that
        reports it to every caller once the producer is done (this aborts an open transaction,
        which a producer asked this has failed anyway)."""
        for error in self.errors:
            if error.fatal():
                return error
        try:
            self.producer.abort_transaction(1.0)
        except KafkaException as exc:
            error = exc.args[0]
            return error if error.fatal() else None
        finally:
            self.open = False
        return None

    def committed_batch(self) -> int:
        """The last batch the id committed (-1: none); read_committed makes the fetch wait out
        an offset commit still in a transaction."""
        offsets: list[TopicPartition] = []
        _call(self, "reading the committed batch", lambda: offsets.extend(
            self.group.committed([TopicPartition(self.marker, 0)], timeout=TRANSACTION_CALL_TIMEOUT_S)))
        offset = offsets[0].offset
        return offset - 1 if offset >= 0 else -1

    def abort(self) -> None:
        self.open = False
        try:
            self.producer.abort_transaction(TRANSACTION_CALL_TIMEOUT_S)
        except KafkaException:  # a fenced or broken producer: its successor or the broker aborts the transaction
            pass


T = TypeVar("T")


def _in_thread(name: str, work: Callable[[], T]) -> Future[T]:
    """``work`` run in a daemon thread of its own; its result, or what it raised (handed to the
    task's thread by ``result()`` or looked at by ``exception()``), in the future returned."""
    future: Future[T] = Future()

    def run() -> None:
        try:
            future.set_result(work())
        except BaseException as error:
            future.set_exception(error)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


def _call(client: _TransactionalClient, what: str, action, abort: bool = True) -> None:
    """One transactional call, retried while Kafka says a retry may succeed (a new group's
    coordinator, still loading or moved, answers so too). A call that fails otherwise aborts an
    open transaction unless ``abort`` is False (a call beside the task's writes: the task aborts)."""
    for attempt in range(CALL_RETRIES):
        try:
            action()
            return
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if (error.retriable() or error.code() in COORDINATOR_MOVING) and attempt < CALL_RETRIES - 1:
                time.sleep(min(0.05 * 2**attempt, 2.0))
                continue
            kind = client.classify(error) if error.fatal() or error.code() in FENCED_CODES else None
            if kind is not None:
                raise kind(f"{what} of transactional id {client.transactional_id}: {error.str()}") from exc
            if abort and client.open:
                client.abort()
            raise OutputNotDelivered(f"{what} of transactional id {client.transactional_id}: {error.str()}") from exc


def _identity(config: ClientConfig) -> str:
    """A client configuration as a cache key: equal settings, one client per process."""
    return json.dumps(config, sort_keys=True, default=str)


def _transactional_producer(config: ClientConfig, transactional_id: str) -> Producer:
    """A producer for ``transactional_id``, tuned as every transactional producer here is."""
    return Producer({**config, **TRANSACTIONAL_TUNING, "transactional.id": transactional_id})


def _producer(config: ClientConfig) -> Producer:
    identity = _identity(config)
    producer = _producers.get(identity)
    if producer is None:
        producer = _producers[identity] = Producer(config)
    return producer


# The consumers that read and commit the ids' batches: no transactions, nothing to fence, so
# kept per Python worker (a consumer's connections cost more than its one read), with when each
# was last asked for. A worker lives as long as its SparkSession, which may run query after
# query (a notebook, a test session, the benchmark): each query's ids would keep a consumer, its
# threads and its connections for good, reconnecting for ever to a broker that has gone. One
# unused for GROUP_IDLE_S is closed, as Spark's own pool of Kafka producers closes an idle one
# after 10 minutes; an id used every batch keeps its consumer.
GROUP_IDLE_S = 600.0
_groups: dict[str, tuple[Consumer, float]] = {}
_groups_lock = threading.Lock()


def _group(group_id: str, group_config: ClientConfig, idle_s: float = GROUP_IDLE_S) -> Consumer:
    key = _identity({**group_config, "group.id": group_id})
    now = time.monotonic()
    with _groups_lock:
        idle = [other for other, (_, used) in _groups.items() if other != key and now - used > idle_s]
        closing = [_groups.pop(other)[0] for other in idle]
        held = _groups.get(key)
        consumer = held[0] if held is not None else Consumer(
            {**group_config, "group.id": group_id, "enable.auto.commit": False, "isolation.level": "read_committed"})
        _groups[key] = (consumer, now)
    if closing:  # off the task's path: a consumer whose broker has gone may take a while to close
        _in_thread("close idle group consumers", lambda: _close_all(closing))
    return consumer


def _close_all(consumers: list[Consumer]) -> None:
    for consumer in consumers:
        consumer.close()


_probed: dict[str, str | None] = {}


def transactions_problem(settings: Settings) -> str | None:
    """Why the broker cannot run output transactions (None: it can), asked once per process by
    starting a transactional producer: brokers before 0.11 lack them, and a cluster with fewer
    brokers than its transaction log's replication factor (3 unless set) cannot start one."""
    config = producer_config(settings.kafka)
    identity = _identity(config)
    if identity not in _probed:
        probe = _transactional_producer(config, f"streamstate.probe.{uuid.uuid4().hex}")
        try:
            probe.init_transactions(PROBE_TIMEOUT_S)
            _probed[identity] = None
        except KafkaException as exc:
            # A broker that does not answer at all tells nothing about transactions: taken as
            # "cannot", a job started during an outage wrote at least once for its whole life.
            require_broker(settings.kafka)
            _probed[identity] = exc.args[0].str()
    return _probed[identity]

