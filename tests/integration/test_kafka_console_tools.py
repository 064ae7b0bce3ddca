"""infra/kafka/kafka.sh runs Kafka's own command-line tools from the installed jars against a
real broker: the console producer writes keyed records that the console consumer prints back
(key and value, nothing else on stdout), `topics --list` sees the topic, and an unknown tool
is refused with the usage (exit 2)."""

from __future__ import annotations

import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "infra" / "kafka" / "kafka.sh"
TIMEOUT = 60


def kafka_tool(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), *argv], input=stdin, capture_output=True, text=True, timeout=TIMEOUT
    )


def test_console_producer_and_consumer_round_trip_keyed_records(bootstrap, new_topic):
    topic = new_topic(partitions=1)
    records = [("k1", "v1"), ("k2", "v2"), ("k3", "v3")]

    produced = kafka_tool(
        "console-producer", "--bootstrap-server", bootstrap, "--topic", topic,
        "--property", "parse.key=true", "--property", "key.separator=:",
        stdin="".join(f"{key}:{value}\n" for key, value in records),
    )
    assert produced.returncode == 0, produced.stderr

    consumed = kafka_tool(
        "console-consumer", "--bootstrap-server", bootstrap, "--topic", topic, "--from-beginning",
        "--max-messages", "3", "--property", "print.key=true", "--timeout-ms", "30000",
    )
    assert consumed.returncode == 0, consumed.stderr
    # print.key's default separator is a tab; stdout holds the records and nothing else.
    assert consumed.stdout.splitlines() == [f"{key}\t{value}" for key, value in records], consumed.stderr
    assert "Processed a total of 3 messages" in consumed.stderr


def test_topics_list_contains_the_topic(bootstrap, new_topic):
    topic = new_topic(partitions=1)
    listed = kafka_tool("topics", "--bootstrap-server", bootstrap, "--list")
    assert listed.returncode == 0, listed.stderr
    assert topic in listed.stdout.splitlines()


def test_unknown_tool_exits_2_with_usage():
    refused = kafka_tool("no-such-tool")
    assert refused.returncode == 2
    assert refused.stdout == ""
    assert "usage:" in refused.stderr
    for tool in ("console-consumer", "console-producer", "topics", "consumer-groups"):
        assert tool in refused.stderr
