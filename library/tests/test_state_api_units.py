"""Pure parts of the state API: durations, the State object, the codec, the reference driver."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from streamstate.state import State, StateSpec, StateTypeError, StateUsageError, duration_ms
from streamstate.state.tester import StateTester, by_key, run_map_with_state, run_update_state_by_key
from streamstate.state.keyrun import OFFSET, PARTITION, TIME, Plan, sort_records
from streamstate.state.state import StateCodec, one_line


@pytest.mark.parametrize(
    "given_, expected",
    [("30 minutes", 1_800_000), ("1 hour", 3_600_000), ("500 ms", 500), (2500, 2500), (dt.timedelta(seconds=3), 3000)],
)
def test_durations(given_, expected):
    assert duration_ms(given_) == expected


@pytest.mark.parametrize("bad", ["soon", "10 fortnights", 0, -5, True, 1.5])
def test_bad_durations_are_refused_with_a_clear_message(bad):
    with pytest.raises(ValueError, match="timeout|duration"):
        duration_ms(bad)


def test_spec_is_immutable_and_checks_its_arguments():
    base = StateSpec.function(lambda k, v, s: None)
    timed = base.timeout("1 minute")
    assert base.timeout_ms is None and timed.timeout_ms == 60_000
    with pytest.raises(ValueError, match="num_partitions"):
        base.num_partitions(0)
    with pytest.raises(TypeError, match="callable"):
        StateSpec.function("not a function")
    with pytest.raises(ValueError, match="late"):
        base.event_time("ts", late="drop")


def test_state_semantics_like_spark():
    state = State("k")
    assert not state.exists() and state.get_option() is None and state.get_option(0) == 0
    with pytest.raises(StateUsageError, match="does not exist"):
        state.get()
    state.update(3)
    assert state.exists() and state.get() == 3
    state.remove()
    with pytest.raises(StateUsageError, match="after it has been removed"):
        state.update(4)
    with pytest.raises(StateUsageError, match="already been removed"):
        state.remove()
    with pytest.raises(StateUsageError, match="remove"):
        State("k", 1).update(None)


class Counter(BaseModel):
    count: int


def test_typed_codec_names_key_and_type_on_mismatch():
    codec = StateCodec(Counter)
    assert codec.decode("a", codec.encode({"count": 2})) == Counter(count=2)
    assert codec.to_json(Counter(count=2)) == '{"count":2}'
    with pytest.raises(StateTypeError, match=r"stored state of key 'a' is not a valid Counter.*count"):
        codec.from_json("a", '{"count": "many"}')
    with pytest.raises(StateTypeError, match="key 'b'.*stored: 3"):
        codec.decode("b", StateCodec().encode(3))


def test_one_line_reason():
    assert one_line(ValueError("bad\n  number")) == "ValueError: bad number"
    assert one_line(KeyError()) == "KeyError"


def running_sum(key, value, state):
    total = state.get_option(0) + value
    state.update(total)
    if value < 0:
        raise ValueError("negative")  # after update: the update must be undone
    return total


def test_reference_reverts_the_failing_record_and_continues():
    rows = run_map_with_state(StateSpec.function(running_sum), [[("a", 1), ("a", -5), ("a", 2)]])
    assert by_key(rows)["a"] == [
        ("output", "1", None),
        ("dead_letter", "-5", "ValueError: negative"),
        ("output", "3", None),
        ("snapshot", "3", None),
    ]


def test_reference_times_out_in_event_time_after_the_watermark_passes():
    def f(key, value, state):
        if state.is_timing_out():
            return "bye"
        state.update(1)

    run = StateTester(StateSpec.function(f).timeout(10).event_time("t"))
    run.run_batch([("a", 1, 100)])
    assert run.watermark_ms == 100 and "a" in run.store
    run.run_batch([("b", 1, 110)])  # deadline of a is 110: due once the watermark reaches it
    assert by_key(run.rows)["a"][-2:] == [("output", '"bye"', None), ("snapshot", None, None)]
    assert "b" in run.store


def test_update_state_by_key_calls_every_key_in_every_batch():
    calls = []

    def count(values, old):
        calls.append(list(values))
        return (old or 0) + len(values)

    rows = run_update_state_by_key(count, [[("a", 1), ("b", 1)], [("a", 1)]])
    assert calls == [[1], [1], [1], []]
    assert by_key(rows)["b"] == [("output", "1", None), ("snapshot", "1", None), ("output", "1", None)]


def test_update_state_by_key_can_call_only_keys_with_data():
    calls = []

    def count(values, old):
        calls.append(list(values))
        return (old or 0) + len(values)

    rows = run_update_state_by_key(count, [[("a", 1), ("b", 1)], [("a", 1)]], every_batch=False)
    assert calls == [[1], [1], [1]]
    assert by_key(rows)["a"][-1] == ("snapshot", "2", None)


@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(-3, 3)), max_size=40), st.integers(1, 5))
def test_batching_does_not_change_per_record_results(records, size):
    """mapWithState results per key do not depend on how records are cut into batches."""
    spec = StateSpec.function(running_sum)
    whole = run_map_with_state(spec, [records])
    batched = run_map_with_state(spec, [records[i : i + size] for i in range(0, len(records), size)])

    def outputs(rows):
        return {k: [r for r in seq if r[0] != "snapshot"] for k, seq in by_key(rows).items()}

    assert outputs(whole) == outputs(batched)


_POSITION = st.one_of(st.none(), st.integers(0, 3))


@given(st.lists(st.tuples(_POSITION, _POSITION, _POSITION), max_size=12))
def test_records_sort_in_event_time_then_source_order_whatever_is_missing(cells):
    # The fast sort must give exactly the documented order, missing values included: no event
    # time last, a missing partition or offset as 0, ties in arrival order.
    rows = [("k", i, time, "t", partition, offset) for i, (time, partition, offset) in enumerate(cells)]
    plan = Plan.of(StateSpec.batch_function(lambda k, v, s: None).event_time("ts"))
    sorted_rows = list(rows)
    sort_records(plan, sorted_rows)
    assert sorted_rows == sorted(rows, key=lambda r: (r[TIME] is None, r[TIME] or 0, r[PARTITION] or 0, r[OFFSET] or 0))
