"""Which bucket a key's state lives in, which state partition a bucket's state lives in,
and bucket labels that spread evenly.

A key's bucket is ``pmod(xxhash64(key), buckets)`` (then the checkpoint's label for that
number); the jobs compute it in their validation pass (:func:`key_buckets`) rather than in
Spark, with the same hash, so a checkpoint's keys stay in their buckets either way.

The stateful operator groups rows by their bucket label, so Spark places a bucket in state
partition ``pmod(murmur3(label, seed 42), partitions)``. For labels ``0..B-1`` that split is
uneven for small counts (8 buckets over 2 partitions: 3 and 5), and the batch waits for the
fuller task. A new checkpoint can instead take labels chosen so that every partition holds
``B // P`` or ``B // P + 1`` buckets. Labels are fixed for the checkpoint's life, like the
bucket count: a bucket's label is where its state lives.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import xxhash

_MASK = 0xFFFFFFFF
_SEED = 42  # Spark's seed for hash partitioning, hash() and xxhash64()


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK


def spark_int_hash(value: int) -> int:
    """Spark's ``Murmur3_x86_32.hashInt(value, 42)`` as a signed 32-bit int: what ``hash()``
    gives for an INT column, and what hash partitioning takes the modulus of."""
    k1 = _rotl((value & _MASK) * 0xCC9E2D51 & _MASK, 15) * 0x1B873593 & _MASK
    h1 = _rotl(_SEED ^ k1, 13)
    h1 = (h1 * 5 + 0xE6546B64) & _MASK
    h1 ^= 4  # the input's length in bytes
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & _MASK
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def key_buckets(keys: pa.Array, count: int, labels: Sequence[int] | None) -> pa.Array:
    """The bucket label of each (non-null) string key, as Spark's ``bucket_of`` column gives it:
    ``xxhash64`` of the UTF-8 bytes with seed 42 (Spark's ``XXH64``), as a signed long, modulo
    ``count`` with a non-negative result, then ``labels[number]`` when the bucket has labels."""
    hashes = np.fromiter(
        (xxhash.xxh64_intdigest(key.encode(), _SEED) for key in keys.to_numpy(zero_copy_only=False)),
        dtype=np.uint64,
        count=len(keys),
    )
    numbers = np.mod(hashes.view(np.int64), count)  # NumPy's mod, like pmod, takes the divisor's sign
    if labels is not None:
        numbers = np.asarray(labels, dtype=np.int64)[numbers]
    return pa.array(numbers.astype(np.int32), pa.int32())


def partition_of(label: int, partitions: int) -> int:
    """The state partition Spark puts the group of INT ``label`` in."""
    return spark_int_hash(label) % partitions  # Python's % is Spark's pmod for a positive divisor


def are_bucket_labels(labels: object, buckets: int) -> bool:
    """Whether ``labels`` (a list or tuple) can label ``buckets`` buckets: that many distinct
    INTs in ``0..2**31-1`` (bool is not an int here)."""
    return (
        isinstance(labels, (list, tuple))
        and len(labels) == buckets
        and all(type(label) is int and 0 <= label < 2**31 for label in labels)
        and len(set(labels)) == buckets
    )


def balanced_labels(buckets: int, partitions: int) -> tuple[int, ...]:
    """``buckets`` labels, the smallest non-negative ints that fill every one of ``partitions``
    state partitions with ``buckets // partitions`` or one more bucket."""
    if buckets < 1 or partitions < 1:
        raise ValueError(f"buckets and partitions must be positive, got {buckets} and {partitions}")
    room = [buckets // partitions + (1 if p < buckets % partitions else 0) for p in range(partitions)]
    labels: list[int] = []
    candidate = 0
    while len(labels) < buckets:
        target = partition_of(candidate, partitions)
        if room[target]:
            room[target] -= 1
            labels.append(candidate)
        candidate += 1
    return tuple(labels)
