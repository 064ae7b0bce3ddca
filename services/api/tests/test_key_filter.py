"""The filter of a rebuild's keys (no store, no broker): it never forgets a key, and it stays
within its bound."""

from __future__ import annotations

from streamstate_api.key_filter import KeyFilter


def _keys(start: int, count: int) -> list[bytes]:
    return [b"s" + f"user-{i}".encode() for i in range(start, start + count)]


def test_every_added_key_is_found_across_the_layers_it_grew():
    keys = KeyFilter(first_capacity=1_000)
    added = [_keys(start, 700) for start in range(0, 7_000, 700)]  # the first layer and four grown ones
    for batch in added:
        assert keys.add(batch)
    assert all(keys.may_hold([key for batch in added for key in batch]))
    assert keys.nbytes > KeyFilter(first_capacity=1_000).nbytes  # it grew past its first layer


def test_keys_never_added_are_mostly_reported_absent():
    keys = KeyFilter(first_capacity=10_000)
    assert keys.add(_keys(0, 10_000))
    strangers = keys.may_hold(_keys(10_000, 20_000))
    assert sum(strangers) < 20_000 * 0.03  # 16 bits a key, two probes: about 1.4 % at capacity


def test_a_batch_past_the_bound_is_refused_whole():
    keys = KeyFilter(first_capacity=1_000, max_capacity=2_000)
    assert keys.add(_keys(0, 1_000))
    assert keys.add(_keys(1_000, 2_000))  # a second layer of 2,000
    assert not keys.add(_keys(3_000, 100))  # a third would be 4,000
    assert all(keys.may_hold(_keys(0, 3_000)))


def test_an_empty_batch_is_nothing():
    keys = KeyFilter()
    assert keys.add([]) and keys.may_hold([]) == []


def test_keys_of_one_batch_that_share_a_word_all_keep_their_bits():
    keys = KeyFilter(first_capacity=1_000)
    batch = _keys(0, 1_000)  # 1,000 keys in 256 words: most words are shared within the batch
    assert keys.add(batch)
    assert all(keys.may_hold(batch))


def test_a_filter_told_how_many_keys_to_expect_holds_them_in_one_layer():
    keys = KeyFilter(first_capacity=1_000)
    keys.expect(5_000)
    added = [_keys(start, 1_000) for start in range(0, 5_000, 1_000)]
    for batch in added:
        assert keys.add(batch)
    assert keys.nbytes == KeyFilter(first_capacity=5_000).nbytes  # no layer grown
    assert all(keys.may_hold([key for batch in added for key in batch]))
    keys.expect(50_000)  # once keys are added, the filter keeps its layers
    assert keys.nbytes == KeyFilter(first_capacity=5_000).nbytes


def test_a_filter_expecting_more_than_its_bound_still_grows_a_layer_of_the_bound():
    keys = KeyFilter(first_capacity=1_000, max_capacity=8_000)
    keys.expect(1_000_000)
    assert keys.add(_keys(0, 4_000))  # the first layer: half the bound
    assert keys.add(_keys(4_000, 8_000))  # a second, of the bound itself
    assert not keys.add(_keys(12_000, 1))
    assert all(keys.may_hold(_keys(0, 12_000)))
