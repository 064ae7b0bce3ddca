"""The jobs' output writer (streamstate_jobs.kafka.partition_writer) on a real broker: each
kind's rows reach their topic, in the partition Spark's own Kafka sink picks for the key, the
summary counts what was written, and rows the job does not declare fail the batch before any
of their Arrow batch is written. In transactions: a replayed batch writes nothing again, a task
that fails mid-transaction leaves nothing a read_committed consumer sees, and a stale producer
of the same transactional id cannot commit, a task with nothing to write leaves no call of its
producer under way, a batch id that cannot join its transaction takes the task's records with
it, and a task's producer finds its broker connection up when it asks for its producer id."""

from __future__ import annotations

import json
import time
import uuid

import pyarrow as pa

import pytest
from confluent_kafka import KafkaException, Producer

from streamstate_jobs.kafka import partition_writer, write_kafka
from streamstate_jobs.kafka.partition_writer import (
    BatchTransactions,
    OutputNotDelivered,
    OutputPlan,
    TRANSACTIONAL_TUNING,
    _TransactionalClient,
    _TransactionalOutput,
    _write_task,
    write_partitions,
    written_rows,
)
from streamstate_jobs.routing import count_as
from streamstate_pipeline.kafka_clients import producer_config
from streamstate_stack.launcher import free_port
from tests.integration.kafka_testing import read_topic

pytestmark = pytest.mark.spark

SCHEMA = "kind string, key string, payload string"


def plan_for(alerts: str, states: str, counters=frozenset({"closed"}), read_kinds=frozenset()) -> OutputPlan:
    return OutputPlan("test-job", {"alert": alerts, "metric_state": states, "dead_letter": alerts}, frozenset(counters),
                      frozenset(read_kinds), count_as)


def test_each_kind_reaches_its_topic_and_the_summary_counts_it(spark, settings, bootstrap, new_topic):
    alerts, states = new_topic(partitions=1), new_topic(partitions=3)
    rows = (
        [("alert", f"a{i}", json.dumps({"kind": "anomaly" if i % 2 else "spike", "n": i})) for i in range(7)]
        + [("metric_state", f"series-{i}", json.dumps({"i": i})) for i in range(40)]
        + [("metric_state", "deleted", None)]  # a tombstone
        + [("dead_letter", "bad", json.dumps({"stage": "contract"}))]
        + [("count", "closed:timeout", "3"), ("count", "closed:timeout", "2"), ("count", "closed:logout", "1")]
    )
    batch = spark.createDataFrame(rows, SCHEMA).repartition(3)

    summary = write_partitions(batch, settings, plan_for(alerts, states, read_kinds={"alert"}))

    on_alerts = read_topic(bootstrap, alerts)
    on_states = read_topic(bootstrap, states)
    assert sorted((r.key.decode(), r.value.decode()) for r in on_alerts) == sorted(
        (k, p) for kind, k, p in rows if kind in ("alert", "dead_letter"))
    assert sorted((r.key.decode(), r.value and r.value.decode()) for r in on_states) == sorted(
        ((k, p) for kind, k, p in rows if kind == "metric_state"), key=repr)
    assert summary.counts == {"alert": 7, "metric_state": 41, "dead_letter": 1, "count": 3}
    by_alert_kind = {r["label"]: r["rows"] for r in summary.rows if r["kind"] == "alert"}
    assert by_alert_kind == {"anomaly": 3, "spike": 4}
    assert {r["label"]: r["rows"] for r in summary.rows if r["kind"] == "dead_letter"} == {"contract": 1}
    totals = {r["counter"]: r["total"] for r in summary.rows if r["kind"] == "count"}
    assert totals == {"closed:timeout": 5, "closed:logout": 1}
    assert sorted(json.loads(p)["n"] for p in summary.payloads["alert"]) == list(range(7))


def test_a_key_lands_in_the_partition_spark_s_sink_chooses(spark, settings, bootstrap, new_topic):
    # The snapshot topics are compacted: a key written by an older release (Spark's sink,
    # murmur2) must keep its partition, or two versions of it would live on.
    ours, sparks = new_topic(partitions=5), new_topic(partitions=5)
    keys = [f"user-{i:04d}" for i in range(200)] + ["", "ünïcode-ключ", "x" * 300]
    write_partitions(spark.createDataFrame([("metric_state", k, "v") for k in keys], SCHEMA), settings, plan_for(ours, ours))
    write_kafka(spark.createDataFrame([(k, "v") for k in keys], "key string, value string"), settings, topic=sparks)

    def partition_of(topic):
        return {r.key.decode(): r.partition for r in read_topic(bootstrap, topic)}

    assert partition_of(ours) == partition_of(sparks)
    assert len(set(partition_of(ours).values())) == 5


def test_the_writer_reads_its_three_columns_by_name_from_rows_that_carry_more(spark, settings, bootstrap, new_topic):
    # The writer's columns are named once per query, unresolved: each batch's plan resolves
    # them, in whatever order and beside whatever other columns its rows have.
    alerts, states = new_topic(partitions=1), new_topic(partitions=1)
    plan = plan_for(alerts, states)
    for batch_id in (0, 1):
        rows = spark.createDataFrame(
            [(json.dumps({"batch": batch_id}), batch_id, f"a{batch_id}", "alert", "not-a-kind")],
            "payload string, batch long, key string, kind string, kinds string",
        )
        assert write_partitions(rows, settings, plan).counts == {"alert": 1}
    assert sorted((r.key.decode(), r.value.decode()) for r in read_topic(bootstrap, alerts)) == [
        ("a0", json.dumps({"batch": 0})), ("a1", json.dumps({"batch": 1}))]


def test_undeclared_rows_fail_the_batch_before_their_rows_are_written(spark, settings, bootstrap, new_topic):
    alerts, states = new_topic(partitions=1), new_topic(partitions=1)
    plan = plan_for(alerts, states)
    undeclared_kind = spark.createDataFrame([("alert", "a", "{}"), ("session", "s", "{}")], SCHEMA).coalesce(1)
    with pytest.raises(Exception, match=r"rows of kind \['session'\]: not among the outputs job 'test-job' declares"):
        write_partitions(undeclared_kind, settings, plan)
    undeclared_counter = spark.createDataFrame([("alert", "a", "{}"), ("count", "opened:x", "1")], SCHEMA).coalesce(1)
    with pytest.raises(Exception, match=r"counts of \['opened'\]: not among the counters"):
        write_partitions(undeclared_counter, settings, plan)
    assert read_topic(bootstrap, alerts) == []


def test_a_batch_that_cannot_be_delivered_fails(spark, settings, monkeypatch):
    from streamstate_jobs.kafka import partition_writer

    # Short timeouts so that the failure comes in seconds, not the producer's minutes.
    monkeypatch.setitem(partition_writer.WRITER_TUNING, "message.timeout.ms", 1500)
    dead_broker = settings.model_copy(update={"bootstrap_servers": f"127.0.0.1:{free_port()}"})
    batch = spark.createDataFrame([("alert", "k", "{}")], SCHEMA)
    with pytest.raises(Exception, match=OutputNotDelivered.__name__) as raised:
        write_partitions(batch, dead_broker, plan_for("alerts", "states"))
    assert "0 of 1 records acknowledged, 1 refused" in str(raised.value)


# --------------------------------------------------------------------------- exactly once
def _transactions(batch_id: int, marker: str, prefix: str | None = None) -> BatchTransactions:
    return BatchTransactions(prefix or f"test.{uuid.uuid4().hex}", batch_id, marker)


def _values(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[str]:
    return sorted(r.value.decode() for r in read_topic(bootstrap, topic, isolation=isolation))


def test_a_replayed_batch_writes_nothing_it_had_committed(spark, settings, bootstrap, new_topic):
    alerts, states = new_topic(partitions=1), new_topic(partitions=2)
    plan = plan_for(alerts, states)
    first = _transactions(5, marker=alerts)
    batch = spark.createDataFrame([("alert", f"a{i}", json.dumps({"n": i})) for i in range(30)], SCHEMA).repartition(3)

    written = write_partitions(batch, settings, plan, first)
    replayed = write_partitions(batch, settings, plan, first)  # Spark re-runs batch 5 after a crash

    assert written.counts == replayed.counts == {"alert": 30}, "a replay still counts the batch's rows"
    assert _values(bootstrap, alerts) == sorted(json.dumps({"n": i}) for i in range(30))
    nxt = spark.createDataFrame([("alert", "b", json.dumps({"n": "next"}))], SCHEMA)
    write_partitions(nxt, settings, plan, BatchTransactions(first.prefix, 6, alerts))
    older = spark.createDataFrame([("alert", "c", json.dumps({"n": "older"}))], SCHEMA)
    write_partitions(older, settings, plan, BatchTransactions(first.prefix, 4, alerts))  # a batch before the last commit
    assert _values(bootstrap, alerts).count(json.dumps({"n": "next"})) == 1
    assert json.dumps({"n": "older"}) not in _values(bootstrap, alerts)


def test_a_streaming_query_writes_each_batch_once_under_its_own_id_and_ships_the_writer_once(
        spark, settings, bootstrap, new_topic, monkeypatch, tmp_path):
    # The writer is the query's last step (a noop sink): its function is planned once per query,
    # and each task reads its batch's id and the query's id from Spark's local properties.
    from pyspark.sql import functions as F
    from pyspark.sql.udf import UserDefinedFunction

    from streamstate_jobs.checkpoints import query_id
    from streamstate_jobs.kafka.partition_writer import QueryTransactions

    source, alerts, states = new_topic(partitions=1), new_topic(partitions=1), new_topic(partitions=2)
    shipped: list[object] = []
    create = UserDefinedFunction._create_judf
    monkeypatch.setattr(UserDefinedFunction, "_create_judf", lambda self, func: shipped.append(func) or create(self, func))
    rows = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", source)
            .option("startingOffsets", "earliest").load()
            .select(F.lit("alert").alias("kind"), F.col("key").cast("string").alias("key"), F.col("value").cast("string").alias("payload")))
    name, checkpoint = f"test.{uuid.uuid4().hex}", str(tmp_path / "checkpoint")
    written = written_rows(rows, settings, plan_for(alerts, states), QueryTransactions(name, marker=alerts))
    query = written.writeStream.format("noop").option("checkpointLocation", checkpoint).start()
    producer = Producer(producer_config(settings.kafka))
    try:
        for batch in range(3):
            producer.produce(source, key=f"a{batch}", value=json.dumps({"batch": batch}))
            producer.flush(30)
            query.processAllAvailable()
    finally:
        query.stop()
    assert query.exception() is None
    assert len(shipped) == 1
    assert _values(bootstrap, alerts) == [json.dumps({"batch": b}) for b in range(3)]
    # The ids are the query's own (its checkpoint's): a restarted query's tasks find their batches committed.
    prefix = f"{name}.{query_id(spark, checkpoint)}"
    assert _committed_batch(settings, f"{prefix}.0", alerts) == query.lastProgress["batchId"]


def _committed_batch(settings, transactional_id: str, marker: str) -> int:
    client = _TransactionalClient.start(transactional_id, marker, producer_config(settings.kafka), settings.kafka.client_config())
    return client.committed_batch()


def test_a_task_outside_a_streaming_query_writes_nothing(spark, settings, new_topic):
    from streamstate_jobs.kafka.partition_writer import QueryTransactions

    alerts = new_topic(partitions=1)
    rows = spark.createDataFrame([("alert", "a", "{}")], SCHEMA)
    with pytest.raises(Exception, match="no local property streaming.sql.batchId|no local property sql.streaming.queryId"):
        written_rows(rows, settings, plan_for(alerts, alerts), QueryTransactions("test", marker=alerts)).collect()
    assert _values(settings.bootstrap_servers, alerts) == []


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at-least-once", "transactions"])
def test_a_task_writes_nothing_when_an_input_topic_is_not_the_one_the_checkpoint_read(spark, settings, new_topic, exactly_once):
    # A topic deleted and created again while the job runs: the batch's writer tasks ask the
    # broker for the topic's id before their first record, and fail the batch with SOURCE_RESET.
    from streamstate_jobs.kafka.identity import InputTopics, SourceResetError, topic_ids
    from streamstate_jobs.lost_input import is_source_reset

    source, alerts = new_topic(partitions=1), new_topic(partitions=1)
    rows = spark.createDataFrame([("alert", f"a{i}", json.dumps({"n": i})) for i in range(5)], SCHEMA).coalesce(1)
    transactions = _transactions(0, marker=alerts) if exactly_once else None
    plan = plan_for(alerts, alerts)
    current = topic_ids(settings.kafka, [source])
    assert source in current, "the broker gives topics ids"
    recreated = InputTopics(settings.kafka, ((source, "the-old-topic-id"),), "/checkpoints/test")
    with pytest.raises(Exception) as failed:  # noqa: PT011 - the condition in its text is what is asserted
        written_rows(rows, settings, plan, transactions, recreated).collect()
    assert is_source_reset(failed.value) and "was deleted and created again" in str(failed.value), str(failed.value)[:2000]
    assert _values(settings.bootstrap_servers, alerts, isolation="read_uncommitted") == []
    with pytest.raises(SourceResetError):
        recreated.check()

    same = InputTopics(settings.kafka, tuple(current.items()), "/checkpoints/test")
    summary = written_rows(rows, settings, plan, transactions, same).collect()
    assert sum(row["rows"] for row in summary) == 5
    assert len(_values(settings.bootstrap_servers, alerts)) == 5


def test_a_task_that_fails_mid_transaction_leaves_nothing_a_read_committed_consumer_sees(spark, settings, bootstrap, new_topic):
    alerts, states = new_topic(partitions=1), new_topic(partitions=1)
    plan = plan_for(alerts, states)
    good = [("alert", f"a{i}", json.dumps({"n": i})) for i in range(5)]
    failing = spark.createDataFrame([*good, ("session", "s", "{}")], SCHEMA).coalesce(1)
    transactions = _transactions(0, marker=alerts)
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "5")  # the good rows go out before the bad batch is seen
    try:
        with pytest.raises(Exception, match="rows of kind"):
            write_partitions(failing, settings, plan, transactions)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert _values(bootstrap, alerts) == []
    # The retry of the batch (the bad row fixed upstream) commits its rows, once.
    write_partitions(spark.createDataFrame(good, SCHEMA).coalesce(1), settings, plan, transactions)
    assert _values(bootstrap, alerts) == sorted(p for _, _, p in good)
    uncommitted = _values(bootstrap, alerts, isolation="read_uncommitted")
    assert len(uncommitted) >= len(good), "read_uncommitted sees the committed rows, and what the broker had of the aborted ones"


def test_a_stale_producer_with_the_same_transactional_id_is_fenced(spark, settings, bootstrap, new_topic):
    # A stuck old driver of the same query: it started a transaction before the new run began.
    alerts, states = new_topic(partitions=1), new_topic(partitions=1)
    transactions = _transactions(3, marker=alerts)
    zombie = Producer({**producer_config(settings.kafka), "transactional.id": transactions.transactional_id(0)})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(alerts, key="z", value=json.dumps({"n": "zombie"}))
    assert zombie.flush(30) == 0

    batch = spark.createDataFrame([("alert", "a", json.dumps({"n": "new run"}))], SCHEMA).coalesce(1)
    write_partitions(batch, settings, plan_for(alerts, states), transactions)

    with pytest.raises(KafkaException) as fenced:
        zombie.commit_transaction(30)
    assert fenced.value.args[0].fatal() or "fenced" in str(fenced.value).lower()
    assert _values(bootstrap, alerts) == [json.dumps({"n": "new run"})]


def test_a_task_takes_its_transactional_id_before_its_first_row(settings, bootstrap, new_topic):
    """The task's producer starts while its rows are still being computed (off the batch's
    critical path): an older producer of the id is fenced before the first row arrives."""
    alerts = new_topic(partitions=1)
    transactions = _transactions(0, marker=alerts)
    fatal: list = []
    older = Producer({**producer_config(settings.kafka), "transactional.id": transactions.transactional_id(0), "error_cb": fatal.append})
    older.init_transactions(30)
    older.begin_transaction()

    def older_is_fenced() -> bool:
        try:
            older.produce(alerts, value=b"older")
            older.flush(10)
        except KafkaException:
            return True
        return any(error.fatal() for error in fatal)

    def rows_after_the_older_producer_is_fenced():
        deadline = time.monotonic() + 60
        while not older_is_fenced():
            assert time.monotonic() < deadline, "the task's producer had not started before its first row"
            time.sleep(0.2)
        yield pa.RecordBatch.from_pydict({"kind": ["alert"], "key": ["a"], "payload": [json.dumps({"n": "task"})]})

    output = _TransactionalOutput(producer_config(settings.kafka), settings.kafka.client_config(), transactions)
    _write_task(rows_after_the_older_producer_is_fenced(), plan_for(alerts, alerts), output)
    assert _values(bootstrap, alerts) == [json.dumps({"n": "task"})]


def test_a_task_with_nothing_to_write_ends_only_once_its_producer_has_its_id(settings, bootstrap, new_topic):
    """A task whose partition had no record to write in the batch (an anomalies job's partition
    without an alert) starts its producer all the same. Its ``init_transactions``, left under way
    when the task ended, landed after the next batch's task of the partition had taken the id and
    fenced it mid-write: the job stopped as if another copy of it ran (OUTPUT_FENCED)."""
    alerts = new_topic(partitions=1)
    prefix, plan = f"test.{uuid.uuid4().hex}", plan_for(alerts, alerts)

    def task(batch_id: int, payloads: list[str]) -> _TransactionalOutput:
        output = _TransactionalOutput(producer_config(settings.kafka), settings.kafka.client_config(),
                                      BatchTransactions(prefix, batch_id, alerts))
        rows = [pa.RecordBatch.from_pydict({"kind": ["alert"] * len(payloads), "key": ["k"] * len(payloads), "payload": payloads})]
        _write_task(iter(rows if payloads else []), plan, output)
        return output

    # Batches back to back, a partition's tasks alternating: before the fix a third of the
    # writing tasks were fenced so, on a local broker.
    written = range(0, 40, 2)
    for batch_id in written:
        task(batch_id, [json.dumps({"batch": batch_id})])
        empty = task(batch_id + 1, [])
        # (Its thread may outlive the start by moments, after setting the start's outcome.)
        assert empty.starting.done(), "the task ended with its producer still taking the transactional id"
    assert _values(bootstrap, alerts) == sorted(json.dumps({"batch": b}) for b in written)


def test_a_task_whose_batch_id_cannot_join_its_transaction_commits_none_of_its_records(settings, bootstrap, new_topic, monkeypatch):
    """The batch id goes into the transaction while the task writes its records; when it
    cannot (its marker topic is gone here), the task fails, its transaction is aborted once that
    call has ended, and none of its records is ever seen."""
    # librdkafka retries the refused offset commit until the call's timeout: a shorter one here.
    monkeypatch.setattr(partition_writer, "TRANSACTION_CALL_TIMEOUT_S", 3.0)
    alerts = new_topic(partitions=1)
    transactions = _transactions(0, marker=f"missing-{uuid.uuid4().hex}")
    output = _TransactionalOutput(producer_config(settings.kafka), settings.kafka.client_config(), transactions)
    rows = pa.RecordBatch.from_pydict({"kind": ["alert"] * 3, "key": ["a", "b", "c"], "payload": [json.dumps({"n": n}) for n in range(3)]})

    with pytest.raises(OutputNotDelivered, match="send_offsets_to_transaction"):
        _write_task(iter([rows]), plan_for(alerts, alerts), output)
    assert output.client is not None and not output.client.open, "the task's transaction was left open"
    assert _values(bootstrap, alerts) == []
    assert len(_values(bootstrap, alerts, isolation="read_uncommitted")) == 3, "the records were written, then aborted"


# librdkafka's debug line when a producer that has no broker connection up picks one to ask
# for its producer id: its sparse connections had dropped the bootstrap connection on learning
# the brokers, and it waited for its retry timer (500 ms in about a third of the starts).
WAITED_FOR_A_CONNECTION = "Selected for cluster connection: acquire ProducerID"


def _start_debugged(settings, marker: str) -> None:
    config = {**producer_config(settings.kafka), "debug": "eos,broker"}
    client = _TransactionalClient.start(f"test.{uuid.uuid4().hex}.0", marker, config, settings.kafka.client_config())
    client.producer.flush(10)


def test_a_task_s_producer_has_its_connection_up_before_it_asks_for_its_producer_id(settings, new_topic, capfd, monkeypatch):
    """A task's new transactional producer connects to the brokers as it learns them, so
    init_transactions never waits for a connection timer on the batch's critical path."""
    alerts = new_topic(partitions=1)
    # The control: with librdkafka's default a start finds no connection up in most starts, not
    # all (one start alone missed it once in a loaded full run), so it gets up to five.
    with monkeypatch.context() as librdkafka_default:
        librdkafka_default.setitem(TRANSACTIONAL_TUNING, "enable.sparse.connections", True)
        for _ in range(5):
            _start_debugged(settings, alerts)
            if WAITED_FOR_A_CONNECTION in capfd.readouterr().err:
                break
        else:
            raise AssertionError("librdkafka no longer logs the line this test looks for, in 5 starts with its default")

    for _ in range(4):
        _start_debugged(settings, alerts)
    assert WAITED_FOR_A_CONNECTION not in capfd.readouterr().err
