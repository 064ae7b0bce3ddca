"""Producers against the real embedded broker: read-back completeness and order, and the CLI."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from streamstate_pipeline.contracts import ContractError, Metric, UserEvent, parse_input
from streamstate_producers.generators import MetricGenerator, ProducedRecord, UserEventGenerator
from streamstate_pipeline.kafka_clients import KafkaConnection, reader_config
from streamstate_producers.kafka_writer import produce_records
from streamstate_producers.scenario import read_scenario
from streamstate_pipeline.settings import Settings
from streamstate_stack.launcher import EmbeddedStack, free_port
from streamstate_pipeline.topics import TopicSpec, create_topics, existing_topics

pytestmark = pytest.mark.timeout(180)

Read = tuple[int, int, bytes | None, bytes | None]  # partition, offset, key, value


def read_at_least(bootstrap: str, topic: str, expected: int, timeout_s: float = 30.0) -> list[Read]:
    """Every record of ``topic``, read with assign() until ``expected`` arrived (or the timeout).

    Reading goes on until the expected count, then a little longer (well past
    fetch.wait.max.ms) so that surplus records would show up too.
    """
    consumer = Consumer({**reader_config(KafkaConnection(bootstrap), "producer-tests", **{"fetch.wait.max.ms": 100}), "enable.partition.eof": False})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        records: list[Read] = []
        deadline = time.monotonic() + timeout_s
        surplus_deadline = None
        while time.monotonic() < (surplus_deadline or deadline):
            for message in consumer.consume(1000, timeout=0.2):
                assert message.error() is None, message.error()
                records.append((message.partition(), message.offset(), message.key(), message.value()))
            if len(records) >= expected and surplus_deadline is None:
                surplus_deadline = time.monotonic() + 1.0
        return records
    finally:
        consumer.close()


def contract_reason(model, key: bytes | None, value: bytes | None) -> str | None:
    try:
        parse_input(model, key, value)
    except ContractError as exc:
        return exc.reason
    return None


def assert_read_back(read: list[Read], sent: list[ProducedRecord]) -> None:
    """The same multiset of (key, value), each key in one partition, in the order it was sent."""
    assert Counter((k, v) for _, _, k, v in read) == Counter((r.key, r.value) for r in sent)
    partitions_of_key: dict[bytes | None, set[int]] = defaultdict(set)
    read_order: dict[bytes | None, list[bytes | None]] = defaultdict(list)
    for partition, _, key, value in sorted(read, key=lambda r: (r[0], r[1])):
        partitions_of_key[key].add(partition)
        read_order[key].append(value)
    sent_order: dict[bytes | None, list[bytes | None]] = defaultdict(list)
    for record in sent:
        sent_order[record.key].append(record.value)
    assert all(len(p) == 1 for p in partitions_of_key.values())
    assert read_order == sent_order


# --------------------------------------------------------------------------- library
def test_a_seeded_batch_reads_back_complete_equal_and_in_key_order(bootstrap, new_topic):
    topic = new_topic(4)
    generator = UserEventGenerator(seed=42, users=200, duplicate_rate=0.02, late_rate=0.02, malformed_rate=0.02, topic=topic)
    records = list(generator.take(2000))
    summary = produce_records(KafkaConnection(bootstrap), records, progress=False)
    assert (summary.sent, summary.failed, summary.errors) == (2000, 0, {})
    read = read_at_least(bootstrap, topic, 2000)
    assert_read_back(read, records)
    assert list(UserEventGenerator(seed=42, users=200, duplicate_rate=0.02, late_rate=0.02, malformed_rate=0.02, topic=topic).take(2000)) == records


def test_malformed_records_read_back_fail_the_contract_with_the_expected_reason(bootstrap, new_topic):
    events_topic, metrics_topic = new_topic(2), new_topic(2)
    events = list(UserEventGenerator(seed=3, users=30, malformed_rate=0.3, topic=events_topic).take(300))
    metrics = list(MetricGenerator(seed=3, series=10, malformed_rate=0.3, topic=metrics_topic).take(300))
    summary = produce_records(KafkaConnection(bootstrap), events + metrics, rate=2000, progress=False)
    assert (summary.sent, summary.failed) == (600, 0)
    for topic, model, sent in ((events_topic, UserEvent, events), (metrics_topic, Metric, metrics)):
        expected = Counter((r.key, r.value, r.malformed_reason) for r in sent)
        read = read_at_least(bootstrap, topic, len(sent))
        assert Counter((k, v, contract_reason(model, k, v)) for _, _, k, v in read) == expected
        assert sum(r.malformed_reason is not None for r in sent) > 50


def test_delivery_failures_are_counted_not_lost(bootstrap, new_topic):
    topic = new_topic(1)
    oversized = ProducedRecord(topic, b"k", b"x" * 2_000_000, None, "event")
    fine = list(UserEventGenerator(seed=1, users=5, topic=topic).take(10))
    summary = produce_records(KafkaConnection(bootstrap), [*fine, oversized], progress=False)
    assert (summary.sent, summary.failed) == (10, 1)
    assert not summary.ok and "too large" in summary.line().lower()


# --------------------------------------------------------------------------- CLI
def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "streamstate_producers", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def summary_sent(stderr: str) -> int:
    match = re.search(r"^sent ([\d,]+) records, 0 failed", stderr, re.MULTILINE)
    assert match, stderr
    return int(match.group(1).replace(",", ""))


def test_cli_events_send_what_the_generator_yields_for_the_seed(bootstrap, new_topic):
    topic = new_topic(4)
    result = cli(
        "events", "--count", "500", "--seed", "7", "--users", "50", "--duplicates", "0.02", "--late", "0.02",
        "--malformed", "0.02", "--topic", topic, "--bootstrap", bootstrap, "--rate", "5000",
    )
    assert result.returncode == 0, result.stderr
    assert summary_sent(result.stderr) == 500
    expected = list(UserEventGenerator(seed=7, users=50, duplicate_rate=0.02, late_rate=0.02, malformed_rate=0.02, topic=topic).take(500))
    assert_read_back(read_at_least(bootstrap, topic, 500), expected)


def test_cli_records_a_scenario_and_replays_it(bootstrap, new_topic, tmp_path):
    scenario = tmp_path / "scenario.jsonl"
    recorded = cli("record", str(scenario), "--events", "150", "--metrics", "60", "--seed", "5", "--malformed", "0.1")
    assert recorded.returncode == 0, recorded.stderr
    topic = new_topic(2)
    replayed = cli("replay", str(scenario), "--topic", topic, "--bootstrap", bootstrap, "--no-progress")
    assert replayed.returncode == 0, replayed.stderr
    assert summary_sent(replayed.stderr) == 210
    expected = [ProducedRecord(topic, r.key, r.value, r.malformed_reason, r.kind) for r in read_scenario(scenario)]
    assert_read_back(read_at_least(bootstrap, topic, 210), expected)


def test_cli_metrics_count(bootstrap, new_topic):
    topic = new_topic(2)
    result = cli("metrics", "--count", "120", "--series", "4", "--anomaly-rate", "0.05", "--topic", topic, "--bootstrap", bootstrap, "--seed", "1")
    assert result.returncode == 0, result.stderr
    expected = list(MetricGenerator(seed=2, series=4, anomaly_rate=0.05, topic=topic).take(120))  # metrics use seed + 1
    assert_read_back(read_at_least(bootstrap, topic, 120), expected)


def test_sigterm_flushes_and_summarises(bootstrap, new_topic):
    topic = new_topic(2)
    process = subprocess.Popen(
        [sys.executable, "-m", "streamstate_producers", "events", "--rate", "300", "--topic", topic, "--bootstrap", bootstrap],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert len(read_at_least(bootstrap, topic, 50, timeout_s=30)) >= 50, "the producer never got going"
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    assert "stopped early" in stderr
    sent = summary_sent(stderr)
    assert len(read_at_least(bootstrap, topic, sent)) == sent


def test_sigterm_while_the_broker_is_down_ends_within_a_containers_stop_grace_and_counts_the_undelivered(tmp_path):
    """A stop asked while the broker does not answer: the flush waited the message timeout
    (35 s), so `docker compose stop`'s SIGKILL after 10 s ended it with no summary. It now
    waits a few seconds, then exits 1 naming the records the broker never acknowledged."""
    stack = EmbeddedStack(settings=Settings(), workdir=tmp_path, quiet=True)
    bootstrap = stack.start_broker()
    process = None
    try:
        topic = "stop-while-down"
        create_topics(KafkaConnection(bootstrap), [TopicSpec(topic, 1)])
        process = subprocess.Popen(
            [sys.executable, "-m", "streamstate_producers", "events", "--rate", "300", "--topic", topic,
             "--bootstrap", bootstrap, "--no-progress"],
            stderr=subprocess.PIPE, text=True,
        )
        assert len(read_at_least(bootstrap, topic, 50, timeout_s=30)) >= 50, "the producer never got going"
        stack.processes["broker"].stop()
        time.sleep(1)  # records pile up unacknowledged
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=10)  # Docker's stop grace
    finally:
        if process is not None and process.poll() is None:
            process.kill()
        stack.stop()
    assert process.returncode == 1, stderr
    summary = stderr.strip().splitlines()[-1]
    assert "stopped early" in summary and "not acknowledged by the broker within" in summary, summary
    assert int(re.search(r"([\d,]+) failed", summary).group(1).replace(",", "")) > 0, summary


def test_demo_mode_sends_events_and_metrics_to_the_configured_topics(bootstrap, new_topic):
    events_topic, metrics_topic = new_topic(2), new_topic(2)
    result = cli(
        "--bootstrap", bootstrap, "--duration", "2", "--events-rate", "100", "--metrics-rate", "50", "--no-progress",
        env={"STREAMSTATE_TOPIC_USER_EVENTS": events_topic, "STREAMSTATE_TOPIC_METRICS": metrics_topic},
    )
    assert result.returncode == 0, result.stderr
    sent = summary_sent(result.stderr)
    events = read_at_least(bootstrap, events_topic, 1, timeout_s=10)
    metrics = read_at_least(bootstrap, metrics_topic, 1, timeout_s=10)
    assert len(events) + len(metrics) == sent
    assert len(events) > len(metrics) > 0
    now = time.time() * 1000
    good = [parse_input(Metric, k, v) for _, _, k, v in metrics if contract_reason(Metric, k, v) is None]
    assert good and all(now - 60_000 < m.ts <= now for m in good), "demo mode stamps records with the wall clock"


def test_demo_records_share_requests_at_the_demos_rates(stack, new_topic):
    """At the demo's default rates the generators' 20 ms linger sent one or two records a
    request, and serving them cost the broker a quarter of a core; the demo gathers them.
    Read from the broker's own log: one record batch is what one produce request appended."""
    partitions = 4  # as the stack's topics
    events_topic, metrics_topic = new_topic(partitions), new_topic(partitions)
    result = cli(
        "--bootstrap", stack.settings.bootstrap_servers, "--duration", "5", "--no-progress",
        env={"STREAMSTATE_TOPIC_USER_EVENTS": events_topic, "STREAMSTATE_TOPIC_METRICS": metrics_topic},
    )
    assert result.returncode == 0, result.stderr
    batches = [
        size
        for topic in (events_topic, metrics_topic)
        for partition in range(partitions)
        for size in record_batch_sizes(stack.kafka.data / f"{topic}-{partition}" / f"{0:020d}.log")
    ]
    assert sum(batches) == summary_sent(result.stderr)
    assert sum(batches) / len(batches) >= 3.5, f"{len(batches)} produce requests for {sum(batches)} records"


def record_batch_sizes(segment: Path) -> list[int]:
    """Records in each record batch of a Kafka log segment (message format v2: a batch's base
    offset, length, leader epoch, magic, CRC and attributes, then its last offset delta)."""
    data, sizes, at = segment.read_bytes(), [], 0
    while at + 27 <= len(data):
        length = int.from_bytes(data[at + 8:at + 12], "big")
        assert data[at + 16] == 2, f"{segment}: message format {data[at + 16]} at byte {at}"
        sizes.append(int.from_bytes(data[at + 23:at + 27], "big") + 1)
        at += 12 + length
    return sizes


def unknown_topic(bootstrap: str, tmp_path: Path) -> list[str]:
    return ["events", "--count", "5", "--topic", "no-such-topic", "--bootstrap", bootstrap]


@pytest.mark.parametrize(
    "make_args, message",
    [
        (unknown_topic, r"^error: unknown topic no-such-topic on "),
        (lambda b, p: ["events", "--rate", "-5", "--bootstrap", b], r"^error: argument --rate: expected a positive number, got -5$"),
        (lambda b, p: ["metrics", "--rate", "0", "--bootstrap", b], r"^error: argument --rate: expected a positive number, got 0$"),
        (lambda b, p: ["events", "--count", "ten", "--bootstrap", b], r"^error: argument --count: expected a positive integer, got 'ten'$"),
        (lambda b, p: ["events", "--malformed", "1.5", "--bootstrap", b], r"^error: argument --malformed: expected a fraction"),
        (lambda b, p: ["replay", str(p / "absent.jsonl"), "--bootstrap", b], r"^error: cannot read scenario file .*absent\.jsonl: No such file"),
        (lambda b, p: ["replay", str(p), "--bootstrap", b], r"^error: cannot read scenario file .*: Is a directory$"),
        (
            lambda b, p: ["events", "--count", "5", "--bootstrap", f"127.0.0.1:{free_port()}"],
            r"^error: Kafka broker at 127\.0\.0\.1:\d+ did not answer within 5s",
        ),
        (lambda b, p: ["frobnicate"], r"^error: unknown command 'frobnicate'"),
        (lambda b, p: ["record", str(p / "x.jsonl")], r"^error: record needs --events N and/or --metrics N$"),
        (lambda b, p: ["record", str(p / "no" / "x.jsonl"), "--events", "1"], r"^error: cannot write scenario file .*: No such file or directory$"),
    ],
    ids=[
        "unknown-topic", "negative-rate", "zero-rate", "bad-count", "bad-fraction", "missing-file", "directory",
        "broker-down", "unknown-command", "record-nothing", "unwritable-record",
    ],
)
def test_cli_bad_input_is_one_error_line_and_exit_2(bootstrap, tmp_path, make_args, message):
    result = cli(*make_args(bootstrap, tmp_path))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert re.search(message, result.stderr.strip()), result.stderr


def test_bad_scenario_line_sends_nothing(bootstrap, new_topic, tmp_path):
    topic = new_topic(1)
    scenario = tmp_path / "broken.jsonl"
    scenario.write_text(f'{{"topic": "{topic}", "key": "k", "value": "v"}}\n{{"topic": 5}}\n')
    result = cli("replay", str(scenario), "--bootstrap", bootstrap)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"error: {scenario}, line 2: not a scenario record: 'topic' must be a non-empty string"]
    assert read_at_least(bootstrap, topic, 1, timeout_s=2) == []


def test_unknown_topic_is_not_created_by_the_check(bootstrap):
    cli("events", "--count", "1", "--topic", "never-created", "--bootstrap", bootstrap)
    assert "never-created" not in existing_topics(KafkaConnection(bootstrap))
