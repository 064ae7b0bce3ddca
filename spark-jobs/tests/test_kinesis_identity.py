"""A recreated Kinesis stream is told apart by its creation time: offsets that carry it, the
comparison, and the reader refusing to plan from another stream's sequence numbers."""

from __future__ import annotations

import traceback
from datetime import datetime, timedelta, timezone

import pytest
from botocore.utils import parse_timestamp

from streamstate_jobs.kafka.identity import SourceResetError
from streamstate_jobs.kinesis.identity import check_same_stream, epoch_ms, iso_ms
from streamstate_jobs.kinesis.offsets import ShardPosition, created_from_json, offsets_from_json, offsets_to_json
from streamstate_jobs.kinesis.options import KinesisOptions
from streamstate_jobs.kinesis.source import KinesisStreamReader
from streamstate_jobs.lost_input import is_source_reset

SEQ = "49680478993133993994988306641846787455812600058399948802"
CREATED = 1_795_000_000_123  # epoch ms: 2026-11-18T11:06:40.123Z
RECREATED = CREATED + 2_345


def sid(n: int) -> str:
    return f"shardId-{n:012d}"


# --------------------------------------------------------------------------- offsets
def test_offsets_carry_the_creation_time_between_the_stream_and_the_shards():
    positions = {sid(1): ShardPosition(3, after=SEQ), sid(0): ShardPosition(0, at_ms=1_795_000_000_000)}
    data = offsets_to_json("s", positions, CREATED)
    assert list(data) == ["stream", "created", "shards"]  # Spark compares offsets by their JSON text
    assert created_from_json(data) == CREATED
    assert offsets_from_json(data, "s") == positions


def test_offsets_from_before_creation_times_were_recorded_still_read():
    old = {"stream": "s", "shards": {sid(0): {"n": 4, "after": SEQ}}}
    assert created_from_json(old) is None
    assert offsets_from_json(old, "s") == {sid(0): ShardPosition(4, after=SEQ)}
    assert offsets_to_json("s", offsets_from_json(old, "s")) == old  # without a time, the same JSON as before


@pytest.mark.parametrize("created", ["1795000000123", 1.5, True, -1])
def test_a_malformed_creation_time_is_refused(created):
    with pytest.raises(ValueError, match="epoch milliseconds"):
        created_from_json({"stream": "s", "created": created, "shards": {}})


# --------------------------------------------------------------------------- the comparison
def test_creation_times_are_whole_milliseconds_the_same_at_every_call():
    # As botocore parses DescribeStreamSummary's epoch seconds: in the local time zone, microseconds.
    parsed = parse_timestamp(CREATED / 1000)
    assert epoch_ms(parsed) == epoch_ms(parse_timestamp(CREATED / 1000)) == CREATED
    assert epoch_ms(datetime(2026, 1, 1, 0, 0, 0, 999_999, tzinfo=timezone(timedelta(hours=5)))) == 1_767_207_600_999
    assert iso_ms(CREATED) == "2026-11-18T11:06:40.123Z"


def test_the_same_stream_or_offsets_without_a_time_pass():
    check_same_stream("s", CREATED, CREATED)
    check_same_stream("s", None, CREATED)


def test_a_recreated_stream_is_a_source_reset_naming_the_stream_both_times_and_the_fix():
    with pytest.raises(SourceResetError) as caught:
        check_same_stream("user-events", CREATED, RECREATED)
    message = str(caught.value)
    assert "'user-events'" in message
    assert iso_ms(CREATED) in message and iso_ms(RECREATED) in message
    assert "STREAMSTATE_ON_SOURCE_RESET=start-over" in message
    # The runner recognises it in a failed query's text (the Python traceback), as for Kafka: exit 2 or start over.
    assert is_source_reset("".join(traceback.format_exception(caught.value)))


# --------------------------------------------------------------------------- the reader
class FakeStream:
    """The reader's client for a stream without shards, created at ``created``."""

    def __init__(self, created: int) -> None:
        self.created = created

    def created_ms(self) -> int:
        return self.created

    def list_shards(self) -> list:
        return []


def reader_on(stream: FakeStream) -> KinesisStreamReader:
    reader = KinesisStreamReader(KinesisOptions(stream="s", starting_position="TRIM_HORIZON"))
    reader._client = stream  # noqa: SLF001 - no Kinesis needed for the driver's bookkeeping
    return reader


def test_the_reader_records_the_creation_time_and_refuses_a_recreated_stream():
    stream = FakeStream(CREATED)
    reader = reader_on(stream)
    assert created_from_json(reader.initialOffset()) == CREATED
    assert created_from_json(reader.latestOffset()) == CREATED
    stream.created = RECREATED
    with pytest.raises(SourceResetError, match="'s' was deleted and created again"):
        reader.latestOffset()


def test_after_a_restart_the_reader_compares_with_the_checkpointed_offsets():
    reader = reader_on(FakeStream(RECREATED))
    checkpointed = offsets_to_json("s", {}, CREATED)
    reader.partitions(checkpointed, checkpointed)  # how the engine hands a restarted reader its offsets
    with pytest.raises(SourceResetError, match=iso_ms(CREATED)):
        reader.latestOffset()


def test_offsets_checkpointed_without_a_time_take_the_current_one():
    reader = reader_on(FakeStream(RECREATED))
    old = {"stream": "s", "shards": {}}
    reader.partitions(old, old)
    assert created_from_json(reader.latestOffset()) == RECREATED


def test_executors_get_no_creation_time_with_the_reader():
    reader = reader_on(FakeStream(CREATED))
    reader.initialOffset()
    assert reader.__getstate__()["_created"] is None
