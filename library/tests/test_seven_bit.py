"""The 7-bit form of large state values (:mod:`streamstate.state.seven_bit`)."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, strategies as st

from streamstate.state.seven_bit import LAST_LEVEL, from_seven_bit, to_seven_bit


@given(st.binary(max_size=5_000))
def test_any_bytes_come_back_from_their_seven_bit_form(data):
    encoded = to_seven_bit(data)
    assert max(encoded, default=0) < 0x80
    assert from_seven_bit(encoded) == data
    assert from_seven_bit(memoryview(encoded)) == data


@pytest.mark.parametrize("size", [0, 1, LAST_LEVEL, LAST_LEVEL + 1, 8 * LAST_LEVEL, 8 * LAST_LEVEL + 1, 1_000_003])
def test_every_level_boundary_and_a_large_value(size):
    data = os.urandom(size) if size else b""
    encoded = to_seven_bit(data)
    assert from_seven_bit(encoded) == data and max(encoded, default=0) < 0x80
    assert len(encoded) <= size * 8 / 7 + 2 * LAST_LEVEL + 8  # each byte's high bit costs 1/8 byte, and so on


def test_a_truncated_value_is_refused():
    encoded = to_seven_bit(os.urandom(1_000))
    with pytest.raises(ValueError, match="needs"):
        from_seven_bit(encoded[:-1])
