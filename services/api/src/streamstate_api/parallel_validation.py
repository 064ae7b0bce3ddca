"""Validating consumed records, in worker processes while the view catches up on many.

Strict validation against the pydantic contracts costs about 7 µs per session snapshot,
more than consuming it and writing it to the store together, so one thread cannot rebuild
a view much faster than ~100,000 snapshots/s. While the follower has at least
:data:`PARALLEL_FROM` records to catch up on, batches are validated by a pool of worker
processes (one per core) while the follower thread consumes the next batches and writes the
validated ones; only small summaries travel back (:func:`~streamstate_api.record_contracts.summarize`),
the record bytes stay in the follower. Results are applied in consumption order, so the
view sees exactly what inline validation would give. Once caught up the pool is shut down
and the few records that trickle in are validated inline (no process hop per record).

Workers are started with ``spawn``: forking a process that runs librdkafka and server
threads is unsafe.

Since the fast check (msgspec mirrors of the contracts, issue 54) a snapshot costs about
1.9 µs to validate inline, and handing a batch to a worker costs the follower thread as much
(pickling the values out and the summaries back: 1.6-2.2 µs a record, measured on 200,000
snapshots) plus 5.5-7 µs a record in the workers. So :meth:`Decoder.for_catch_up` validates
inline (:data:`CATCH_UP_WORKERS` is 0): the same follower-thread cost, and the other core is
left to the broker, librdkafka and RocksDB's compactions. The pool stays for a contract whose
records the fast check does not cover.
"""

from __future__ import annotations

import multiprocessing
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor

from streamstate_api.record_contracts import Source, Summary, summarize_batch

# (source, partition, offset, key, value) of one consumed record
Row = tuple[Source, int, int, bytes | None, bytes | None]

_VALUE_OF = {source: source.value for source in Source}  # an Enum's .value is a property call

PARALLEL_FROM = 100_000
CATCH_UP_WORKERS = 0  # worker processes for a catch-up of PARALLEL_FROM records or more (see above)
IN_FLIGHT = 6


class Decoder:
    """Validates batches of rows in order, inline or in worker processes."""

    def __init__(self, workers: int = 0):
        self._pool = (
            ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) if workers > 0 else None
        )
        self._pending: deque[tuple[list[Row], Future | list]] = deque()

    @classmethod
    def for_catch_up(cls, records_left: int) -> "Decoder":
        return cls(CATCH_UP_WORKERS if records_left >= PARALLEL_FROM else 0)

    @property
    def parallel(self) -> bool:
        return self._pool is not None

    @property
    def idle(self) -> bool:
        """Every submitted batch has been handed out by :meth:`finished`."""
        return not self._pending

    def submit(self, rows: list[Row]) -> None:
        if not rows:
            return
        value_of = _VALUE_OF
        columns = ([value_of[r[0]] for r in rows], [r[3] for r in rows], [r[4] for r in rows])
        if self._pool is None:
            self._pending.append((rows, summarize_batch(*columns)))
        else:
            self._pending.append((rows, self._pool.submit(summarize_batch, *columns)))

    def finished(self, wait: bool) -> Iterator[tuple[list[Row], list[Summary | str]]]:
        """Validated batches in submission order: those already done, all of them when ``wait``,
        and the oldest ones while more than :data:`IN_FLIGHT` are pending (back-pressure)."""
        while self._pending:
            rows, result = self._pending[0]
            if isinstance(result, Future):
                if not (wait or result.done() or len(self._pending) > IN_FLIGHT):
                    return
                result = result.result()
            self._pending.popleft()
            yield rows, result

    def close(self) -> None:
        self._pending.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None
