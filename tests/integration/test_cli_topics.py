"""`streamstate topics create|list` against the real embedded broker."""

from __future__ import annotations

import subprocess
import sys
import uuid

from streamstate_stack.launcher import free_port
from streamstate_pipeline.kafka_clients import KafkaConnection
from streamstate_pipeline.topics import existing_topics


def streamstate(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "streamstate_pipeline.cli", *argv], capture_output=True, text=True, timeout=120
    )


def topic_file(tmp_path, **partitions: int):
    path = tmp_path / "topics.toml"
    path.write_text(
        "".join(
            f'[topics."{name}"]\npartitions = {count}\nconfig = {{ "retention.ms" = "60000" }}\n'
            for name, count in partitions.items()
        )
    )
    return path


def test_create_is_idempotent_and_list_reports_partitions(bootstrap, tmp_path):
    first, second = f"cli-a-{uuid.uuid4().hex[:6]}", f"cli-b-{uuid.uuid4().hex[:6]}"
    path = topic_file(tmp_path, **{first: 3, second: 1})
    common = ["--bootstrap-servers", bootstrap, "--topics-file", str(path)]

    created = streamstate("topics", "create", *common)
    assert created.returncode == 0, created.stderr
    assert f"{first}\t3\tcreated" in created.stdout
    present = existing_topics(KafkaConnection(bootstrap))
    assert (present[first], present[second]) == (3, 1)

    again = streamstate("topics", "create", *common)
    assert again.returncode == 0, again.stderr
    assert f"{first}\t3\texists" in again.stdout

    listed = streamstate("topics", "list", *common)
    assert listed.returncode == 0, listed.stderr
    assert f"{second}\t1\tok" in listed.stdout


def test_list_exits_1_when_a_defined_topic_is_missing(bootstrap, tmp_path):
    missing = f"cli-missing-{uuid.uuid4().hex[:6]}"
    path = topic_file(tmp_path, **{missing: 2})
    listed = streamstate("topics", "list", "--bootstrap-servers", bootstrap, "--topics-file", str(path))
    assert listed.returncode == 1
    assert f"{missing}\t-\tmissing" in listed.stdout


def test_unreachable_broker_is_one_error_line_and_exit_2(tmp_path):
    path = topic_file(tmp_path, never=1)
    result = streamstate(
        "topics", "create", "--bootstrap-servers", f"127.0.0.1:{free_port()}", "--topics-file", str(path),
        "--wait", "1",
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "did not answer" in lines[0], result.stderr


def test_unreadable_topic_file_is_one_error_line_and_exit_2(bootstrap, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[topics\n")
    result = streamstate("topics", "create", "--bootstrap-servers", bootstrap, "--topics-file", str(bad))
    assert result.returncode == 2
    assert result.stderr.startswith("error: cannot read topic definitions from") and result.stderr.count("\n") == 1


def test_a_create_the_broker_refuses_is_one_error_line_with_its_reason(bootstrap, tmp_path):
    """A refusal no retry can change (three replicas asked of one broker) ends the command
    with the broker's reason; pipeline/tests/test_topics.py pins that it is not retried."""
    path = topic_file(tmp_path, **{f"cli-rf-{uuid.uuid4().hex[:6]}": 1})
    result = streamstate(
        "topics", "create", "--bootstrap-servers", bootstrap, "--topics-file", str(path), "--replication-factor", "3",
    )
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "replication factor" in lines[0].lower(), result.stderr
