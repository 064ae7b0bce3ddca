"""Pure planning rules of the Kinesis source: shard lineage and the per-trigger rate limit.

Resharding closes shards and opens children: a split closes one parent and opens two, a merge
closes two parents and opens one. A key's records move from a parent to a child at that
moment, so to keep each key's records in order a child is read only once every parent it has
was read to its end, in an earlier batch than the child's first. A parent that is no longer
listed (past the stream's retention) has nothing left to wait for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from streamstate_jobs.kinesis.offsets import ShardPosition, StreamPositions, shard_order


@dataclass(frozen=True)
class Shard:
    """One shard as ListShards describes it."""

    shard_id: str
    parents: tuple[str, ...] = ()
    closed: bool = False

    @classmethod
    def from_api(cls, data: Mapping) -> "Shard":
        parents = tuple(p for p in (data.get("ParentShardId"), data.get("AdjacentParentShardId")) if p)
        closed = "EndingSequenceNumber" in data.get("SequenceNumberRange", {})
        return cls(data["ShardId"], parents, closed)


@dataclass(frozen=True)
class Reconciled:
    positions: StreamPositions
    lost: list[str]  # shards that disappeared before they were read to their end
    added: list[str]


def reconcile(listed: Sequence[Shard], positions: Mapping[str, ShardPosition], new: ShardPosition) -> Reconciled:
    """The positions to plan from, given the shards listed now.

    A listed shard without a position is new (a child of a reshard, or created after the
    query's start) and starts at ``new``. A shard that is no longer listed was trimmed by the
    stream's retention: dropped, and reported as lost unless it had been read to its end.
    Read-to-the-end shards that are still listed keep their position, so they are not read
    again and their children can see that they are done.
    """
    listed_ids = {s.shard_id for s in listed}
    kept = {s: p for s, p in positions.items() if s in listed_ids}
    lost = sorted((s for s, p in positions.items() if s not in listed_ids and not p.done), key=shard_order)
    added = sorted((s.shard_id for s in listed if s.shard_id not in kept), key=shard_order)
    kept.update({s: new for s in added})
    return Reconciled(kept, lost, added)


def readable(listed: Sequence[Shard], positions: Mapping[str, ShardPosition]) -> list[str]:
    """Shards to read in the batch being planned, in shard order: not done, and every parent
    either done or gone (not in ``positions``, which :func:`reconcile` made hold every listed shard)."""
    ready = [
        s.shard_id
        for s in listed
        if s.shard_id in positions
        and not positions[s.shard_id].done
        and all(p not in positions or positions[p].done for p in s.parents)
    ]
    return sorted(ready, key=shard_order)


def shares(budget: int, shards: Sequence[str]) -> dict[str, int]:
    """``budget`` records split evenly over ``shards``; the first ones take the remainder."""
    base, extra = divmod(budget, len(shards))
    return {s: base + (1 if i < extra else 0) for i, s in enumerate(shards)}


def read_in_shares(shards: Sequence[str], limit: int | None, fetch: Callable[[str, int | None], int]) -> int:
    """Read the shards for one batch, at most ``limit`` records in all (None: everything available).

    Kinesis has no end offset to divide a budget by backlog as Kafka does, so the budget is
    split evenly; ``fetch(shard, max_records)`` reads up to that many more and returns how many
    it got. A shard that returns fewer than asked has caught up, and what it left goes to the
    others in a further round (each round fills the budget or retires a shard, so this ends).
    Returns the records planned.
    """
    if limit is None:
        return sum(fetch(s, None) for s in shards)
    remaining, active, total = limit, list(shards), 0
    while remaining > 0 and active:
        caught_up = set()
        for shard, share in shares(remaining, active).items():
            if share == 0:
                continue
            got = fetch(shard, share)
            total += got
            remaining -= got
            if got < share:
                caught_up.add(shard)
        active = [s for s in active if s not in caught_up]
    return total
