"""Reading a streaming checkpoint's logs (offsets, commits) where the profile keeps them:
the local disk (embedded) or the object store (production, s3a://). The crash, cluster
and broker-restart tests watch a job's progress through them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from streamstate_stack.s3 import S3, S3Error, split_s3a


@dataclass(frozen=True)
class CheckpointFiles:
    location: str
    s3: S3 | None = None

    @classmethod
    def of(cls, stack, location: str) -> "CheckpointFiles":
        """The checkpoint at ``location`` of a job run by ``stack`` (an EmbeddedStack)."""
        return cls(location, stack.s3() if location.startswith("s3a://") else None)

    def batches(self, log: str) -> list[int]:
        """The batch ids in ``log`` (``offsets``: planned; ``commits``: done), ascending."""
        if self.s3 is None:
            folder = Path(self.location) / log
            names = [f.name for f in folder.iterdir()] if folder.is_dir() else []
        else:
            bucket, prefix = split_s3a(self.location)
            folder = f"{prefix}/{log}/"
            try:
                names = [key[len(folder):] for key in self.s3.list(bucket, folder)]
            except S3Error:
                names = []
        return sorted(int(name) for name in names if name.isdigit())

    def read(self, relative: str) -> str:
        if self.s3 is None:
            return (Path(self.location) / relative).read_text()
        bucket, prefix = split_s3a(self.location)
        return self.s3.get(bucket, f"{prefix}/{relative}").decode()

    def planned_offsets(self) -> list[dict[str, dict[str, int]]] | None:
        """Each source's end offsets ({topic: {partition: offset}}) in the newest planned batch; None before any."""
        batches = self.batches("offsets")
        if not batches:
            return None
        lines = self.read(f"offsets/{batches[-1]}").splitlines()
        # Line 1 is the log version, line 2 the batch metadata, then one line per source.
        return [json.loads(line) for line in lines[2:] if line.strip()]

    def planned_records(self) -> int:
        """Input records up to the end of the newest planned batch (the least over the query's sources)."""
        sources = self.planned_offsets()
        if not sources:
            return 0
        return min(sum(sum(parts.values()) for parts in source.values()) for source in sources)
