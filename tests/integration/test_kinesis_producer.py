"""``streamstate-produce --sink kinesis`` against the real local Kinesis server."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from streamstate_producers.kinesis_writer import kinesis_entry
from streamstate_producers.produced_record import ProducedRecord
from tests.kinesis_testing import read_back


def test_events_go_to_the_stream_of_the_topics_name_every_one_delivered(kinesis_settings, new_stream):
    stream = new_stream(shards=2)
    env = {**os.environ, "STREAMSTATE_KINESIS_ENDPOINT_URL": kinesis_settings.kinesis_endpoint_url}
    result = subprocess.run(
        [sys.executable, "-m", "streamstate_producers", "events", "--sink", "kinesis", "--topic", stream,
         "--count", "700", "--seed", "3", "--no-progress"],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "sent 700 records, 0 failed" in result.stderr
    assert len(read_back(kinesis_settings, stream)) == 700


def test_a_missing_stream_is_one_error_line(kinesis_settings):
    env = {**os.environ, "STREAMSTATE_KINESIS_ENDPOINT_URL": kinesis_settings.kinesis_endpoint_url}
    result = subprocess.run(
        [sys.executable, "-m", "streamstate_producers", "metrics", "--sink", "kinesis", "--topic", "no-such-stream", "--count", "1"],
        env=env, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == "error: Kinesis stream 'no-such-stream' does not exist; create it first"


@pytest.mark.parametrize(
    "key, message",
    [(None, "1 to 256 characters, got 0"), (b"\xff", "must be UTF-8"), (b"k" * 257, "got 257")],
)
def test_a_key_kinesis_cannot_carry_is_refused(key, message):
    with pytest.raises(ValueError, match=message):
        kinesis_entry(ProducedRecord("s", key, b"{}", None, "event"))


def test_a_null_value_is_sent_as_empty_data():
    assert kinesis_entry(ProducedRecord("s", b"u1", None, "value is null", "malformed")) == {"PartitionKey": "u1", "Data": b""}
