"""Spark's Python worker daemon with the in-task crash points of :mod:`tests.reliability.crash_at`
armed (test support; the job sets ``spark.python.daemon.module`` to this module).

The daemon imports the output writer and wraps its commit before it forks any worker, so
every task of the job runs the wrapped commit. Tasks of one batch meet through files in the
crash marker's folder: each announces that it holds an open transaction whose records are
all acknowledged, and the crash waits for a second one when it needs two.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from pyspark.daemon import manager

from streamstate.jobs.kafka import partition_writer
from tests.reliability.crash_at import BETWEEN_TRANSACTIONS, IN_TRANSACTION, MARKER_ENV, POINT_ENV, STALL, crash

POINT = os.environ[POINT_ENV]
MARKER = Path(os.environ[MARKER_ENV])
MEETING = MARKER.with_name(MARKER.name + ".tasks")
_commit = partition_writer._TransactionalOutput.commit  # noqa: SLF001 - the seam the crash points wrap


def _open_elsewhere(batch_id: int, partition: int, wait_s: float) -> int | None:
    """Another task of ``batch_id`` holding an open transaction, waited for up to ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        others = [int(p.name.split(".")[1]) for p in MEETING.glob(f"{batch_id}.*.open") if p.name != f"{batch_id}.{partition}.open"]
        if others or time.monotonic() > deadline:
            return min(others) if others else None
        time.sleep(0.05)


def commit(self) -> None:
    batch_id, partition = self.transactions.batch_id, self.partition
    if MARKER.exists() or not self.delivery.sent:
        return _commit(self)
    if POINT == IN_TRANSACTION:
        crash(f"task {partition} of batch {batch_id}: {self.delivery.sent} records acknowledged in its open transaction")
    if POINT == STALL:
        MARKER.write_text(f"task {partition} of batch {batch_id} stalled with {self.delivery.sent} records in its open transaction\n")
        release = MARKER.with_name(MARKER.name + ".release")
        while not release.exists():
            time.sleep(0.1)
        return _commit(self)
    MEETING.mkdir(exist_ok=True)
    (MEETING / f"{batch_id}.{partition}.open").touch()
    other = _open_elsewhere(batch_id, partition, wait_s=3.0)
    if other is None:  # alone in its batch: no second transaction to crash between
        return _commit(self)
    if partition > other:  # the other one commits and crashes while this one waits, open
        time.sleep(60)
        return _commit(self)
    _commit(self)
    crash(f"task {partition} of batch {batch_id} committed {self.delivery.sent} records while task {other} held its "
          "transaction open")
    return None


assert POINT in (BETWEEN_TRANSACTIONS, IN_TRANSACTION, STALL), POINT
partition_writer._TransactionalOutput.commit = commit  # type: ignore[method-assign]  # noqa: SLF001

if __name__ == "__main__":
    manager()
