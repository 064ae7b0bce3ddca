"""Pure planning logic of the Kinesis source: offsets, shard lineage, the rate limit, backoff, options."""

from __future__ import annotations

import random

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from hypothesis import given
from hypothesis import strategies as st

from streamstate_jobs.kinesis.offsets import ShardPosition, offsets_from_json, offsets_to_json, shard_index
from streamstate_jobs.kinesis.options import KinesisOptionError, KinesisOptions
from streamstate_jobs.kinesis.planning import Shard, read_in_shares, readable, reconcile, shares
from streamstate_jobs.kinesis.retry import Backoff, KinesisSourceError, with_backoff

SEQ = "49680478993133993994988306641846787455812600058399948802"  # 56 digits, as Kinesis issues them


def sid(n: int) -> str:
    return f"shardId-{n:012d}"


# --------------------------------------------------------------------------- offsets
def test_offsets_round_trip_keeps_exact_sequence_numbers_and_a_stable_order():
    positions = {sid(10): ShardPosition(3, after=SEQ), sid(2): ShardPosition(0, at_ms=1_795_000_000_000), sid(1): ShardPosition(7, after="5", done=True)}
    data = offsets_to_json("s", positions)
    assert list(data["shards"]) == [sid(1), sid(2), sid(10)]  # numeric shard order, not insertion order
    assert data["shards"][sid(10)] == {"n": 3, "after": SEQ}
    assert data["shards"][sid(1)] == {"n": 7, "after": "5", "done": True}
    assert offsets_from_json(data, "s") == positions


def test_offsets_of_another_stream_or_malformed_are_refused():
    with pytest.raises(ValueError, match="stream 'a', not 'b'"):
        offsets_from_json({"stream": "a", "shards": {}}, "b")
    with pytest.raises(ValueError, match="decimal sequence number"):
        offsets_from_json({"stream": "a", "shards": {sid(0): {"n": 1, "after": 12}}}, "a")
    with pytest.raises(ValueError, match="non-negative"):
        offsets_from_json({"stream": "a", "shards": {sid(0): {"n": -1}}}, "a")


def test_a_position_starts_its_iterator_where_it_stands():
    assert ShardPosition().iterator_args() == {"ShardIteratorType": "TRIM_HORIZON"}
    assert ShardPosition(at_ms=1500).iterator_args() == {"ShardIteratorType": "AT_TIMESTAMP", "Timestamp": 1.5}
    assert ShardPosition(4, after=SEQ).iterator_args() == {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "StartingSequenceNumber": SEQ}


def test_shard_index_is_the_shard_number_and_refuses_what_does_not_fit():
    assert shard_index(sid(12)) == 12
    with pytest.raises(ValueError, match="shardId-"):
        shard_index("shard-12")
    with pytest.raises(ValueError, match="does not fit"):
        shard_index(sid(2**31))


# --------------------------------------------------------------------------- lineage
# A stream of two shards; shard 0 split into 2 and 3; then 2 and 3 merged into 4.
PARENTS = [Shard(sid(0), closed=True), Shard(sid(1))]
SPLIT = [Shard(sid(2), (sid(0),), closed=True), Shard(sid(3), (sid(0),), closed=True)]
MERGED = [Shard(sid(4), (sid(2), sid(3)))]
LISTED = PARENTS + SPLIT + MERGED


def test_children_wait_until_every_parent_was_read_to_its_end():
    positions = reconcile(LISTED, {}, ShardPosition()).positions
    assert readable(LISTED, positions) == [sid(0), sid(1)]
    positions[sid(0)] = ShardPosition(5, after="9", done=True)
    assert readable(LISTED, positions) == [sid(1), sid(2), sid(3)]
    positions[sid(2)] = ShardPosition(2, after="12", done=True)
    assert readable(LISTED, positions) == [sid(1), sid(3)]  # a merge waits for both parents
    positions[sid(3)] = ShardPosition(1, after="13", done=True)
    assert readable(LISTED, positions) == [sid(1), sid(4)]


def test_a_parent_gone_past_retention_does_not_block_its_children():
    listed = SPLIT + [Shard(sid(1))]
    positions = reconcile(listed, {}, ShardPosition()).positions
    assert readable(listed, positions) == [sid(1), sid(2), sid(3)]


def test_reconcile_adds_new_shards_keeps_finished_ones_and_reports_lost_ones():
    before = {sid(0): ShardPosition(5, after="9", done=True), sid(1): ShardPosition(3, after="8"), sid(7): ShardPosition(1, after="2")}
    result = reconcile(LISTED, before, ShardPosition())
    assert result.added == [sid(2), sid(3), sid(4)]
    assert result.positions[sid(0)].done and result.positions[sid(2)] == ShardPosition()
    assert result.lost == [sid(7)]  # gone although not read to its end
    gone_after_reading = reconcile(SPLIT, {sid(0): ShardPosition(5, after="9", done=True)}, ShardPosition())
    assert gone_after_reading.lost == [] and sid(0) not in gone_after_reading.positions


# --------------------------------------------------------------------------- rate limit
def fake_shards(available: dict[str, int]):
    read = {s: 0 for s in available}

    def fetch(shard: str, max_records: int | None) -> int:
        left = available[shard] - read[shard]
        got = left if max_records is None else min(left, max_records)
        read[shard] += got
        return got

    return read, fetch


def test_no_limit_reads_everything_available():
    read, fetch = fake_shards({"a": 5, "b": 0, "c": 12})
    assert read_in_shares(["a", "b", "c"], None, fetch) == 17
    assert read == {"a": 5, "b": 0, "c": 12}


def test_what_a_caught_up_shard_leaves_goes_to_the_others():
    read, fetch = fake_shards({"a": 1, "b": 100, "c": 100})
    assert read_in_shares(["a", "b", "c"], 30, fetch) == 30
    assert read == {"a": 1, "b": 15, "c": 14}


@given(st.lists(st.integers(0, 50), min_size=1, max_size=6), st.integers(1, 120))
def test_a_batch_never_exceeds_the_limit_and_takes_all_it_can(sizes, limit):
    available = {f"s{i}": n for i, n in enumerate(sizes)}
    read, fetch = fake_shards(available)
    total = read_in_shares(list(available), limit, fetch)
    assert total == sum(read.values()) == min(limit, sum(sizes))


def test_shares_split_evenly():
    assert shares(10, ["a", "b", "c"]) == {"a": 4, "b": 3, "c": 3}


# --------------------------------------------------------------------------- backoff
def client_error(code: str, status: int = 400) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": "Rate exceeded for shard"}, "ResponseMetadata": {"HTTPStatusCode": status}}, "GetRecords")


class FakeClock:
    def __init__(self) -> None:
        self.now, self.sleeps = 0.0, []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_throttling_is_retried_with_growing_delays_then_succeeds():
    clock, failures = FakeClock(), [client_error("ProvisionedThroughputExceededException")] * 4 + [EndpointConnectionError(endpoint_url="x")]

    def call():
        if failures:
            raise failures.pop(0)
        return "records"

    backoff = Backoff(initial_ms=100, max_ms=1_000, timeout_ms=60_000)
    assert with_backoff(call, backoff, "GetRecords", clock.sleep, lambda: clock.now, random.Random(1)) == "records"
    assert len(clock.sleeps) == 5
    ceilings = [0.1, 0.2, 0.4, 0.8, 1.0]
    assert all(c / 2 <= s <= c for s, c in zip(clock.sleeps, ceilings)), clock.sleeps


def test_throttling_that_never_ends_fails_with_a_clear_message():
    clock = FakeClock()

    def call():
        raise client_error("ProvisionedThroughputExceededException")

    with pytest.raises(KinesisSourceError, match="still throttled .* raise retryTimeoutMs"):
        with_backoff(call, Backoff(100, 1_000, 5_000), "GetRecords", clock.sleep, lambda: clock.now, random.Random(1))
    assert 0 < clock.now <= 5.0


def test_other_errors_are_not_retried():
    clock = FakeClock()

    def call():
        raise client_error("ResourceNotFoundException")

    with pytest.raises(ClientError):
        with_backoff(call, Backoff(), "ListShards", clock.sleep, lambda: clock.now)
    assert clock.sleeps == []


def test_server_errors_are_retried():
    clock, calls = FakeClock(), []

    def call():
        calls.append(1)
        if len(calls) == 1:
            raise client_error("InternalFailure", 500)
        return 1

    assert with_backoff(call, Backoff(), "GetRecords", clock.sleep, lambda: clock.now) == 1 and len(clock.sleeps) == 1


# --------------------------------------------------------------------------- options
def test_options_parse_with_defaults_and_case_insensitive_names():
    o = KinesisOptions.parse({"streamname": "s", "startingposition": "at_timestamp", "startingtimestamp": "2026-11-20T00:00:00Z", "maxrecordspertrigger": "50"})
    assert (o.stream, o.starting_position, o.starting_timestamp_ms, o.max_records_per_trigger) == ("s", "AT_TIMESTAMP", 1_795_132_800_000, 50)
    assert KinesisOptions.parse({"streamName": "s"}).starting_position == "LATEST"


@pytest.mark.parametrize(
    "options, message",
    [
        ({}, "streamName is required"),
        ({"streamName": "s", "startingPosition": "EARLIEST"}, "must be one of"),
        ({"streamName": "s", "startingPosition": "AT_TIMESTAMP"}, "startingTimestamp is required"),
        ({"streamName": "s", "startingTimestamp": "5"}, "and only then"),
        ({"streamName": "s", "maxRecordsPerFetch": "20000"}, "at most 10000"),
        ({"streamName": "s", "maxRecordsPerTrigger": "0"}, "positive integer"),
        ({"streamName": "s", "subscribe": "t"}, "unsupported"),
    ],
)
def test_bad_options_are_refused_with_a_message(options, message):
    with pytest.raises(KinesisOptionError, match=message):
        KinesisOptions.parse(options)
