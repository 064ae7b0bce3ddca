"""The kinds of damage the fault-injection suite does to a file the product keeps, at chosen
offsets. Each kind models something that happens to real files: a flipped bit (bad sector,
bad RAM), a file cut short (disk full, a copy interrupted), a zero-length file (a crash right
after ``open(..., "w")``), a torn write (a crash in the middle of overwriting a file in place:
the new bytes up to the tear, the old bytes after), and a run of garbage bytes.

    for damage in damages_of(path, rng, offsets=5):
        damage.apply(path)      # then: recover exactly, or stop naming the file and the fix

Every damage has a ``name`` that reads well in a pytest id, e.g. ``flip@37`` or ``torn@12``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

KINDS = ("flip", "truncate", "empty", "torn", "garbage")


@dataclass(frozen=True)
class Damage:
    kind: str
    offset: int
    apply_to: Callable[[bytes], bytes]

    @property
    def name(self) -> str:
        return self.kind if self.kind == "empty" else f"{self.kind}@{self.offset}"

    def apply(self, path: Path) -> None:
        path.write_bytes(self.apply_to(path.read_bytes()))


def flip(offset: int, bit: int = 0) -> Damage:
    def apply(data: bytes) -> bytes:
        i = offset % len(data)
        return data[:i] + bytes([data[i] ^ (1 << bit)]) + data[i + 1:]

    return Damage("flip", offset, apply)


def truncate(offset: int) -> Damage:
    return Damage("truncate", offset, lambda data: data[: offset % max(len(data), 1)])


def empty() -> Damage:
    return Damage("empty", 0, lambda data: b"")


def torn(offset: int, new: bytes) -> Damage:
    """An in-place overwrite with ``new`` that stopped after ``offset`` bytes."""

    def apply(data: bytes) -> bytes:
        cut = offset % max(len(new), 1)
        return new[:cut] + data[cut:]

    return Damage("torn", offset, apply)


def garbage(offset: int, length: int = 64, seed: int = 0) -> Damage:
    noise = random.Random(seed).randbytes(length)

    def apply(data: bytes) -> bytes:
        i = offset % max(len(data), 1)
        return data[:i] + noise[: max(len(data) - i, 0)] + data[i + length:]

    return Damage("garbage", offset, apply)


def damages_of(path: Path, rng: random.Random, offsets: int = 4, new: bytes | None = None) -> Iterator[Damage]:
    """Every kind at ``offsets`` offsets drawn from the file's length (the first and last byte
    always among them); ``torn`` only when the content being written (``new``) is given."""
    size = max(path.stat().st_size, 1)
    chosen = sorted({0, size - 1, *(rng.randrange(size) for _ in range(max(offsets - 2, 0)))})
    yield empty()
    for offset in chosen:
        yield flip(offset, bit=rng.randrange(8))
        yield garbage(offset, seed=offset)
        if offset > 0:
            yield truncate(offset)
        if new is not None:
            yield torn(offset, new)
