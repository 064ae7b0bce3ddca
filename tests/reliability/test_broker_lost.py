"""Exactly once with a broker lost: the leader of an output partition is SIGKILLed while a
task of the job holds an open transaction with records on that partition (issue 51).

The cluster is three Apache Kafka nodes from the jars, each a KRaft broker and controller
(:meth:`EmbeddedStack.start_kafka_cluster`): every topic, the consumer offsets and the
transaction log included, has three replicas, and a write is acknowledged once two have it
(``min.insync.replicas`` 2, ``transaction.state.log.min.isr`` 2). The sessions job runs as
a process on fresh topics with replication factor 3, with output transactions on.

Landing the kill inside a transaction, every time: the job runs with the
``stall-mid-transaction`` point of :mod:`tests.reliability.crash_at`. The first task that
produces a record to the sessions topic waits until that record and every one before it is
acknowledged (``acks=all``) inside its still open transaction, writes a marker file and stops
there. The test then sees the open transaction from outside, as a consumer does: on exactly
one partition of the sessions topic the last stable offset (what a ``read_committed``
ListOffsets answers) stays below the high watermark (``read_uncommitted``), i.e. records
past the LSO that nobody has committed or aborted. It SIGKILLs the node that leads that
partition and lets the task go on at once: whatever it still has to write to partitions the
dead node led waits in its producer's retries until Kafka fences the node and elects new
leaders, and its commit (its batch offset, then the transaction markers on every partition it
wrote, the killed one's included; the coordinators may have been on the dead node too) has to
reach the survivors. The rest of the input follows on the two remaining nodes.

Why it can fail: with the job's output at least once (``output_transactions=off``) and a
producer that gives up on a record within 3 s, the task fails on the records the dead
leader's partitions owe, the batch is re-run, and this test then sees duplicates (measured:
97 copies of 93 sessions, 4 of 3 alerts).

The outputs a ``read_committed`` consumer sees must equal the plain-Python reference
(:mod:`tests.reference_rules`) computed from the produced input, each record once: no
acknowledged record lost with its leader, none written twice by a retry or a re-run task.
The node stays dead to the end; the job process must still run. Its query may have been
restarted by the job's runner meanwhile (the test prints how often): in one run of three the
per-batch input-topic id check (spark-jobs/src/streamstate_jobs/kafka/identity.py, a describe_topics with a
10 s timeout) timed out against the dead node, failed the batch, and the restarted query
replayed it; exactly once must hold through that too. The input holds the scenario's user
events only (the sessions job's input): the anomalies job, a second Spark JVM, would add
minutes on two cores and nothing about the broker's loss.
"""

from __future__ import annotations

import sys
import time

import pytest
from confluent_kafka import Consumer, TopicPartition

from streamstate_pipeline.kafka_clients import KafkaConnection, admin
from streamstate_pipeline.settings import Settings
from streamstate_stack.launcher import EmbeddedStack, free_port
from streamstate_pipeline.topics import TopicSpec, create_topics
from tests.conftest import _started_pids
from tests.integration.api_harness import wait_until
from tests.reliability.crash_at import MARKER_ENV, STALL_MID, STALL_TOPIC_ENV
from tests.scenario import Feeder, Scenario, build_scenario, collect_outputs, differences, pipeline_topics, read_outputs

# Four JVMs at once (three brokers and the job's): never beside the compose test.
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.usefixtures("heavy_beside_no_stack")]

SEED = 7
EVENTS = 800
NODE_HEAP = "256m"
JOB = "sessions"


def user_events_only(scenario: Scenario) -> Scenario:
    return Scenario(scenario.seed, [record for record in scenario.records if record.topic == "user-events"])


def replicated_topics(bootstrap: str):
    """``new_topic`` for :func:`tests.scenario.pipeline_topics`, each partition on all three nodes."""
    made = 0

    def make(partitions: int = 1, prefix: str = "t", config: dict[str, str] | None = None) -> str:
        nonlocal made
        made += 1
        name = f"{prefix}-{made}"
        create_topics(KafkaConnection(bootstrap), [TopicSpec(name, partitions, config or {})], replication_factor=3)
        return name

    return make


def open_partitions(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    """Partitions of ``topic`` whose last stable offset is below their high watermark (an open
    transaction has records there): partition -> (LSO, high watermark)."""
    ends = {}
    for isolation in ("read_committed", "read_uncommitted"):
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "broker-lost-probe", "isolation.level": isolation})
        try:
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            ends[isolation] = {
                p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1] for p in partitions
            }
        finally:
            consumer.close()
    stable, high = ends["read_committed"], ends["read_uncommitted"]
    return {p: (stable[p], high[p]) for p in high if stable[p] < high[p]}


def one_open_partition(bootstrap: str, topic: str) -> tuple[int, tuple[int, int]] | None:
    found = open_partitions(bootstrap, topic)
    return next(iter(found.items())) if len(found) == 1 else None


def leader(bootstrap: str, topic: str, partition: int) -> int:
    return admin(KafkaConnection(bootstrap)).list_topics(topic, timeout=10).topics[topic].partitions[partition].leader


def test_a_partition_leader_killed_inside_an_open_transaction_loses_and_duplicates_nothing(tmp_path):
    started = time.monotonic()
    stack = EmbeddedStack(
        settings=Settings(
            shuffle_partitions=2, checkpoint_root=str(tmp_path / "checkpoints"), api_store_path=tmp_path / "api-store",
            trigger_interval="1 second", output_transactions="on",
            sessions_metrics_port=0, anomalies_metrics_port=0, api_port=free_port(),
        ),
        workdir=tmp_path,
        quiet=True,
    )
    try:
        bootstrap = stack.start_kafka_cluster(heap=NODE_HEAP)
        stack.settings = settings = stack.settings.model_copy(update=pipeline_topics(replicated_topics(bootstrap)))
        scenario = user_events_only(build_scenario(SEED, events=EVENTS, metrics=EVENTS // 2))
        feeder = Feeder(bootstrap, settings, scenario, 2)
        feeder.feed(0)

        marker = tmp_path / f"{JOB}-stalled"
        job = stack.spawn(
            f"{JOB}-job", [sys.executable, "-m", "tests.reliability.crash_at", STALL_MID, JOB],
            extra_env={MARKER_ENV: str(marker), STALL_TOPIC_ENV: settings.topic_sessions},
        )
        wait_until(lambda: (marker.exists() and marker.read_text()) or not job.alive(), 300,
                   f"a task to stall in its open transaction:\n{job.tail(30)}")
        assert job.alive(), f"{JOB} job exited before it stalled:\n{job.tail(40)}"
        # The task's sessions record is past the LSO; the batch's other tasks commit meanwhile.
        stalled = wait_until(lambda: one_open_partition(bootstrap, settings.topic_sessions), 60,
                             f"one sessions partition with an open transaction: {open_partitions(bootstrap, settings.topic_sessions)}")
        partition, (stable, high) = stalled
        victim = leader(bootstrap, settings.topic_sessions, partition)
        spanned = {topic: sorted(open_partitions(bootstrap, topic)) for topic in (
            settings.topic_sessions, settings.topic_session_state, settings.topic_alerts, settings.topic_dead_letters,
            settings.topic_event_counts)}

        stack.kill_kafka_node(victim)  # the task waits for the release below: its transaction is still open
        marker.with_name(marker.name + ".release").touch()  # the task goes on: the rest of its records, then its commit
        feeding = time.monotonic()
        feeder.feed(1)  # waits for every record, those of partitions the dead node led included
        fed_in = time.monotonic() - feeding

        outputs = collect_outputs(bootstrap, settings, scenario=scenario, timeout_s=300)
        uncommitted = read_outputs(bootstrap, settings, isolation="read_uncommitted")
        assert job.alive(), f"{JOB} job exited after the broker was lost:\n{job.tail(40)}"
        new_leader = leader(bootstrap, settings.topic_sessions, partition)
        restarts = job.log_path.read_text(errors="replace").count(f"query {JOB} started") - 1
        print(
            f"\nbroker lost: {marker.read_text().strip()}; sessions partition {partition} had LSO {stable} < high watermark "
            f"{high}; the open transaction spanned {spanned}; node {victim} (its leader) SIGKILLed, new leader {new_leader}; "
            f"query restarts {restarts}; {len(scenario.produced)} input records (the second half delivered in {fed_in:.0f} s); "
            f"{len(outputs.sessions)} sessions, "
            f"{len(outputs.alerts)} alerts, {len(outputs.dead_letters)} dead letters in {outputs.records()} records; "
            f"read_uncommitted also sees {uncommitted.records() - outputs.records()} aborted records; "
            f"{time.monotonic() - started:.0f} s"
        )
        assert new_leader not in (victim, -1), f"partition {partition} has no new leader: {new_leader}"
        expected = scenario.expected(settings)
        # The scenario exercises the sessions job's paths, or matching it proves little.
        assert {s.ended_by for s in expected.sessions.values()} == {"logout", "timeout"}
        assert expected.alerts and expected.dead_letters and expected.session_state
        problems = differences(expected, outputs)
        assert not problems, "outputs differ from the reference:\n" + "\n".join(problems)
        assert outputs.duplicates() == {}, f"a read_committed consumer sees records more than once: {outputs.duplicates()}"
    finally:
        # Scratch checkpoints and data, nothing to keep: no graceful stop to wait for (a node's
        # controlled shutdown without its peers waits out the launcher's grace period).
        for proc in stack.processes.values():
            proc.kill()
        _started_pids.extend(stack.pids())  # checked after the session: nothing may be left running
