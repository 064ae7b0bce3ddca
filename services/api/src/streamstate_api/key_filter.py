"""A Bloom filter of the store keys a rebuild has read (every key it wrote among them), asked
a batch at a time.

A cold rebuild reads the stored value of every key it applies, and finds nothing for nearly
all of them (each user's first snapshot of the rebuild). Keys the filter has never seen are
certainly absent and need no read; a key it may have seen is read as before. So the filter
only ever saves reads: a false positive costs the read it would have cost anyway.

Asked per key from Python, a filter costs about what RocksDB's own answer for a missing key
costs (measured, docs/api-store.md); asked for a whole batch with NumPy it costs a tenth.
Python's ``hash`` of the key's bytes gives the two bits, both in one 64-bit word (salted per
process: the filter lives in memory only, for the process that made it). It is sized for the
keys its owner expects (:meth:`KeyFilter.expect`: the records a rebuild has to read), and grows
by adding layers, each twice the last, so that it needs no size in advance, up to a bound: a
filter that would need a layer of more than 2^25 keys (64 MB; 128 MB with the layers before
it) refuses the keys, and its owner drops it and reads every key again.
"""

from __future__ import annotations

import numpy as np

_BITS_PER_KEY = 16  # two bits of a 64-bit word a key: about 1.6 % false positives at capacity, fewer below it
_FIRST_CAPACITY = 1 << 20  # keys: 2 MB
_MAX_CAPACITY = 1 << 25  # the largest layer's keys: 64 MB
_ONE = np.uint64(1)
_SIX_BITS = np.uint64(63)


class _Layer:
    """Both of a key's bits in one 64-bit word (a "blocked" Bloom filter): one memory access a
    key and layer, where two bits anywhere in the layer took two, each a cache miss once a
    layer outgrows the cache (a layer of 10,000,000 keys is 32 MB)."""

    def __init__(self, capacity: int):
        words = 1 << max(4, (max(capacity * _BITS_PER_KEY // 64, 1) - 1).bit_length())
        self.capacity = capacity
        self.count = 0
        self._shift = np.uint64(64 - (words.bit_length() - 1))  # the hash's top bits choose the word
        self._words = np.zeros(words, dtype=np.uint64)

    def _where(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each key's word, and its two bits there (from the hash's lowest twelve bits)."""
        bits = np.left_shift(_ONE, hashes & _SIX_BITS) | np.left_shift(_ONE, (hashes >> np.uint64(6)) & _SIX_BITS)
        return hashes >> self._shift, bits

    def may_hold(self, hashes: np.ndarray) -> np.ndarray:
        words, bits = self._where(hashes)
        return self._words[words] & bits == bits

    def add(self, hashes: np.ndarray) -> None:
        words, bits = self._where(hashes)
        # ``at``: keys of one batch that share a word each set their bits (``a[i] |= b`` keeps one).
        np.bitwise_or.at(self._words, words, bits)
        self.count += len(hashes)


class KeyFilter:
    """The keys added so far, as "certainly not added" or "maybe added"."""

    def __init__(self, first_capacity: int = _FIRST_CAPACITY, max_capacity: int = _MAX_CAPACITY):
        self._layers = [_Layer(first_capacity)]
        self._max_capacity = max_capacity

    def expect(self, keys: int) -> None:
        """Size the first layer for ``keys`` keys while nothing is added: a rebuild that knows
        how many records it will read asks one layer for all of them, where layers grown one
        doubling at a time were four at 10,000,000 keys, each asked. At most half the bound, so
        that a layer of the bound can still follow it, as when grown."""
        if len(self._layers) == 1 and self._layers[0].count == 0:
            capacity = min(max(keys, self._layers[0].capacity), self._max_capacity // 2)
            if capacity != self._layers[0].capacity:
                self._layers = [_Layer(capacity)]

    @staticmethod
    def hashed(keys: list[bytes]) -> np.ndarray:
        """The keys' hashes, as :meth:`may_hold_hashed` and :meth:`add_hashed` take them."""
        return np.fromiter(map(hash, keys), dtype=np.int64, count=len(keys)).view(np.uint64)

    def may_hold(self, keys: list[bytes]) -> list[bool]:
        """For each key, whether it may have been added (False: it certainly was not)."""
        return self.may_hold_hashed(self.hashed(keys))

    def may_hold_hashed(self, hashes: np.ndarray) -> list[bool]:
        """:meth:`may_hold` for keys already :meth:`hashed` (a batch asks and adds the same keys)."""
        found = self._layers[0].may_hold(hashes)
        for layer in self._layers[1:]:
            found |= layer.may_hold(hashes)
        return found.tolist()

    def add(self, keys: list[bytes]) -> bool:
        """Add ``keys``; False (and nothing added) when that would pass the filter's bound."""
        return self.add_hashed(self.hashed(keys))

    def add_hashed(self, hashes: np.ndarray) -> bool:
        """:meth:`add` for keys already :meth:`hashed`."""
        layer = self._layers[-1]
        if layer.count + len(hashes) > layer.capacity:
            capacity = max(layer.capacity * 2, len(hashes))
            if capacity > self._max_capacity:
                return False
            layer = _Layer(capacity)
            self._layers.append(layer)
        layer.add(hashes)
        return True

    @property
    def nbytes(self) -> int:
        return sum(layer._words.nbytes for layer in self._layers)
