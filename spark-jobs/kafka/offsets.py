"""Kafka offsets as Spark checkpoints them, and the per-trigger rate limit.

An offset map holds, per topic-partition, the *exclusive* end of what has been read
(the next offset to read). Its JSON form is Spark's Kafka source form,
``{"topic": {"0": 23, "1": 42}}``, with partition keys as strings and a stable order,
because the engine compares offsets by their JSON text.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

TopicPartitionKey = tuple[str, int]
Offsets = dict[TopicPartitionKey, int]

# Sentinels of Spark's startingOffsets JSON.
LATEST = -1
EARLIEST = -2


def offsets_to_json(offsets: Mapping[TopicPartitionKey, int]) -> dict[str, dict[str, int]]:
    """``{("t", 0): 5}`` -> ``{"t": {"0": 5}}``, topics and partitions sorted."""
    result: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        result.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return result


def offsets_from_json(data: Mapping[str, Mapping[str, int]]) -> Offsets:
    """Inverse of :func:`offsets_to_json`; raises ValueError on a malformed map."""
    if not isinstance(data, Mapping):
        raise ValueError("expected a JSON object of topics")
    offsets: Offsets = {}
    for topic, partitions in data.items():
        if not isinstance(partitions, Mapping):
            raise ValueError(f"topic {topic!r} must map partition numbers to offsets")
        for partition, offset in partitions.items():
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise ValueError(f"offset of {topic}[{partition}] must be an integer, got {offset!r}")
            offsets[(str(topic), int(partition))] = offset
    return offsets


def rate_limit(start: Mapping[TopicPartitionKey, int], end: Mapping[TopicPartitionKey, int], limit: int) -> Offsets:
    """Cap the records between ``start`` and ``end`` at ``limit`` in total.

    Like Spark's Kafka source, each partition gets a share proportional to its backlog;
    unlike it, shares are floored and the remainder handed out by largest fraction, so
    the total never exceeds ``limit`` (Spark rounds small shares up, which can overshoot).
    ``start`` must hold every partition of ``end``.
    """
    backlog = {tp: end[tp] - start[tp] for tp in end if end[tp] > start[tp]}
    total = sum(backlog.values())
    if total <= limit:
        return dict(end)
    shares = {tp: limit * size / total for tp, size in backlog.items()}
    granted = {tp: math.floor(share) for tp, share in shares.items()}
    remainder = limit - sum(granted.values())
    by_fraction = sorted(backlog, key=lambda tp: (granted[tp] - shares[tp], tp))
    for tp in by_fraction[:remainder]:
        granted[tp] += 1
    return {tp: (start[tp] + granted[tp] if tp in backlog else end[tp]) for tp in end}


def describe(offsets: Mapping[TopicPartitionKey, int]) -> str:
    """``t[0]=5, t[1]=7``: for error messages."""
    return ", ".join(f"{t}[{p}]={o}" for (t, p), o in sorted(offsets.items()))
