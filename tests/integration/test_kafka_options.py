"""Kafka source options and offset arithmetic (pure: no broker, no Spark)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamstate.jobs.kafka.offsets import offsets_from_json, offsets_to_json, rate_limit
from streamstate.jobs.kafka.options import KafkaOptionError, SourceOptions

BASE = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "a, b ,a"}


def parse(**extra: str) -> SourceOptions:
    return SourceOptions.parse({**BASE, **extra})


def test_options_keep_spark_names_and_defaults():
    opts = parse(**{"kafka.fetch.max.bytes": "1000"})
    assert opts.topics == ("a", "b")
    assert opts.starting == "latest"  # Spark's default for streaming queries
    assert opts.max_offsets_per_trigger is None
    assert opts.fail_on_data_loss is True
    assert opts.client_conf == {"bootstrap.servers": "127.0.0.1:1", "fetch.max.bytes": "1000"}


def test_options_are_case_insensitive_like_spark_passes_them():
    opts = SourceOptions.parse({k.lower(): v for k, v in {**BASE, "startingOffsets": "earliest", "maxOffsetsPerTrigger": "7"}.items()})
    assert (opts.starting, opts.max_offsets_per_trigger) == ("earliest", 7)


def test_starting_offsets_json_with_sentinels():
    opts = parse(startingOffsets='{"a":{"0":23,"1":-2},"b":{"0":-1}}')
    assert opts.starting == {("a", 0): 23, ("a", 1): -2, ("b", 0): -1}


@pytest.mark.parametrize(
    ("extra", "complaint"),
    [
        ({"subscribe": " , "}, "subscribe"),
        ({"startingOffsets": "yesterday"}, "startingOffsets"),
        ({"startingOffsets": '{"c":{"0":1}}'}, "not subscribed"),
        ({"startingOffsets": '{"a":{"0":-3}}'}, "invalid offsets a[0]=-3"),
        ({"startingOffsets": '{"a":{"0":"x"}}'}, "must be an integer"),
        ({"maxOffsetsPerTrigger": "0"}, "positive integer"),
        ({"failOnDataLoss": "maybe"}, "true or false"),
        ({"subscribePattern": "a.*"}, "unsupported Kafka source option"),
        ({"kafka.group.id": "mine"}, "kafka.group.id is managed"),
    ],
)
def test_bad_options_give_one_clear_error(extra, complaint):
    with pytest.raises(KafkaOptionError, match=re.escape(complaint)):
        parse(**extra)


def test_bootstrap_servers_are_required():
    with pytest.raises(KafkaOptionError, match="kafka.bootstrap.servers"):
        SourceOptions.parse({"subscribe": "a"})


def test_offsets_json_is_sparks_form_in_a_stable_order():
    offsets = {("b", 0): 4, ("a", 10): 2, ("a", 2): 1}
    as_json = offsets_to_json(offsets)
    assert list(as_json) == ["a", "b"] and list(as_json["a"]) == ["2", "10"]
    assert offsets_from_json(as_json) == offsets


def test_rate_limit_splits_proportionally():
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 5}
    end = {("t", 0): 300, ("t", 1): 200, ("t", 2): 5}
    assert rate_limit(start, end, 40) == {("t", 0): 30, ("t", 1): 110, ("t", 2): 5}


backlogs = st.dictionaries(
    st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 5)),
    st.tuples(st.integers(0, 1000), st.integers(0, 1000)),
    min_size=1,
)


@given(backlogs, st.integers(1, 3000))
def test_rate_limit_never_exceeds_the_limit_and_never_leaves_the_range(ranges, limit):
    start = {tp: lo for tp, (lo, _) in ranges.items()}
    end = {tp: lo + size for tp, (lo, size) in ranges.items()}
    capped = rate_limit(start, end, limit)
    assert set(capped) == set(end)
    assert all(start[tp] <= capped[tp] <= end[tp] for tp in end)
    taken = sum(capped[tp] - start[tp] for tp in end)
    assert taken == min(limit, sum(end[tp] - start[tp] for tp in end))
