"""Kinesis offsets as Spark checkpoints them: one position per shard.

A position is the *exclusive* start of the next batch in a shard: the sequence number of the
last record read (the next read starts ``AFTER_SEQUENCE_NUMBER``), or, before anything was
read, where reading begins (``TRIM_HORIZON``, or ``AT_TIMESTAMP`` for the LATEST and
at-timestamp starts, pinned when the query first started so that a replay reads the same
records). Next to it:

- ``n``: how many records of the shard the query has read, so the next record's dense
  ordinal. Sequence numbers are decimal strings of up to 128 bits, beyond a Spark long; the
  ordinal is what the ``offset`` column carries, and because it is checkpointed with the
  sequence number a replayed batch gets the same ordinals.
- ``done``: the shard is closed (split or merged) and was read to its end; its children may
  be read from the next batch on.

Next to the shards, ``created``: when the stream the positions belong to was created (epoch
ms), which tells it from a stream deleted and created again under the same name
(:mod:`~streamstate_jobs.kinesis.identity`). Offsets checkpointed before it was recorded have
none; they are read as they are, and the next batch's offsets carry it.

JSON form (Spark compares offsets by their JSON text, so the order is fixed)::

    {"stream": "user-events", "created": 1794000000000,
     "shards": {"shardId-000000000000": {"n": 12, "after": "4968..."},
                "shardId-000000000002": {"n": 0, "at": 1795000000000}}}
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

SHARD_ID = re.compile(r"^shardId-(\d+)$")
INT_MAX = 2**31 - 1


@dataclass(frozen=True)
class ShardPosition:
    """Where reading a shard stands; see the module docstring."""

    n: int = 0
    after: str | None = None
    at_ms: int | None = None
    done: bool = False

    def iterator_args(self) -> dict[str, object]:
        """GetShardIterator arguments that start right at this position."""
        if self.after is not None:
            return {"ShardIteratorType": "AFTER_SEQUENCE_NUMBER", "StartingSequenceNumber": self.after}
        if self.at_ms is not None:
            return {"ShardIteratorType": "AT_TIMESTAMP", "Timestamp": self.at_ms / 1000}
        return {"ShardIteratorType": "TRIM_HORIZON"}

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {"n": self.n}
        if self.after is not None:
            data["after"] = self.after
        elif self.at_ms is not None:
            data["at"] = self.at_ms
        if self.done:
            data["done"] = True
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, object], where: str) -> "ShardPosition":
        if not isinstance(data, Mapping):
            raise ValueError(f"{where}: expected an object")
        n, after, at_ms, done = data.get("n"), data.get("after"), data.get("at"), data.get("done", False)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"{where}: n must be a non-negative integer, got {n!r}")
        if after is not None and not (isinstance(after, str) and after.isdigit()):
            raise ValueError(f"{where}: after must be a decimal sequence number, got {after!r}")
        if at_ms is not None and (isinstance(at_ms, bool) or not isinstance(at_ms, int)):
            raise ValueError(f"{where}: at must be epoch milliseconds, got {at_ms!r}")
        if not isinstance(done, bool):
            raise ValueError(f"{where}: done must be true or false, got {done!r}")
        return cls(n=n, after=after, at_ms=None if after is not None else at_ms, done=done)


StreamPositions = dict[str, ShardPosition]  # shard id -> position


def shard_order(shard_id: str) -> tuple[int, str]:
    match = SHARD_ID.match(shard_id)
    return (int(match.group(1)) if match else INT_MAX + 1, shard_id)


def offsets_to_json(stream: str, positions: Mapping[str, ShardPosition], created_ms: int | None = None) -> dict[str, object]:
    data: dict[str, object] = {"stream": stream}
    if created_ms is not None:
        data["created"] = created_ms
    data["shards"] = {s: positions[s].to_json() for s in sorted(positions, key=shard_order)}
    return data


def offsets_from_json(data: Mapping[str, object], stream: str) -> StreamPositions:
    """Inverse of :func:`offsets_to_json`; ValueError on a malformed map or another stream's offsets."""
    if not isinstance(data, Mapping) or not isinstance(data.get("shards"), Mapping):
        raise ValueError(f"expected Kinesis offsets {{'stream': ..., 'shards': {{...}}}}, got {data!r}")
    if data.get("stream") != stream:
        raise ValueError(f"the checkpoint holds offsets of stream {data.get('stream')!r}, not {stream!r}: use a new checkpoint")
    shards = cast(Mapping[Any, Any], data["shards"])  # checked above
    return {str(s): ShardPosition.from_json(p, f"offset of {stream}/{s}") for s, p in shards.items()}


def created_from_json(data: Mapping[str, object]) -> int | None:
    """The stream's creation time (epoch ms) the offsets were read from; None in offsets from
    before it was recorded."""
    created = data.get("created")
    if created is not None and (isinstance(created, bool) or not isinstance(created, int) or created < 0):
        raise ValueError(f"the Kinesis offsets' created must be epoch milliseconds, got {created!r}")
    return created


def shard_index(shard_id: str) -> int:
    """The number in ``shardId-000000000012`` (12): the source's ``partition`` column.

    Kinesis numbers shards in creation order, so a child's number is above its parents', and
    ordering a key's records by (partition, offset) orders them as the stream did across a
    split or a merge.
    """
    match = SHARD_ID.match(shard_id)
    if match is None:
        raise ValueError(f"unexpected shard id {shard_id!r}: Kinesis shard ids look like shardId-000000000000")
    index = int(match.group(1))
    if index > INT_MAX:
        raise ValueError(f"shard id {shard_id!r} does not fit the int partition column")
    return index
