"""Spark's Python worker daemon with the in-task crash points of :mod:`tests.reliability.crash_at`
armed (test support; the job sets ``spark.python.daemon.module`` to this module).

The daemon imports the output writer and wraps its commit (and, for ``after-commit``, a task's
whole write) before it forks any worker, so every task of the job runs the wrapped code. Tasks
of one batch meet through files in the crash marker's folder: each announces that it holds an
open transaction whose records are all acknowledged (or, for ``after-commit``, that it has
committed, with its alerts), and the crash waits for the others when it needs them.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from pyspark.daemon import manager

from streamstate_jobs.kafka import partition_writer
from streamstate_jobs.kinds import Kind
from tests.reliability.crash_at import (
    AFTER_COMMIT, BETWEEN_TRANSACTIONS, IN_TRANSACTION, MARKER_ENV, POINT_ENV, STALL, STALL_MID, STALL_TOPIC_ENV, TASKS_ENV,
    crash, write_marker,
)

POINT = os.environ[POINT_ENV]
MARKER = Path(os.environ[MARKER_ENV])
MEETING = MARKER.with_name(MARKER.name + ".tasks")
_commit = partition_writer._TransactionalOutput.commit  # noqa: SLF001 - the seam the crash points wrap
_produce = partition_writer._TransactionalOutput.produce  # noqa: SLF001 - and stall-mid-transaction's
_write_task = partition_writer._write_task  # noqa: SLF001 - and after-commit's: a task's whole write


def _open_elsewhere(batch_id: int, partition: int, wait_s: float) -> int | None:
    """Another task of ``batch_id`` holding an open transaction, waited for up to ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        others = [int(p.name.split(".")[1]) for p in MEETING.glob(f"{batch_id}.*.open") if p.name != f"{batch_id}.{partition}.open"]
        if others or time.monotonic() > deadline:
            return min(others) if others else None
        time.sleep(0.05)


def _wait_for_release() -> None:
    release = MARKER.with_name(MARKER.name + ".release")
    while not release.exists():
        time.sleep(0.1)


def produce(self, topic: str, key: str | None, payload: str | None) -> None:
    """stall-mid-transaction: after the first record on the stall topic, once every record so
    far is acknowledged in the open transaction, the task (one only: the marker is created
    exclusively) waits for the release, then goes on producing in the same transaction."""
    _produce(self, topic, key, payload)
    if topic != os.environ.get(STALL_TOPIC_ENV) or self.producing is None or MARKER.exists():
        return
    self.delivery.check(self.producing.flush(self.flush_timeout_s), self.flush_timeout_s)
    if not write_marker(MARKER, f"task {self.partition} of batch {self.transactions.batch_id} stalled with {self.delivery.sent} "
                        f"records acknowledged in its open transaction, the last on {topic}\n", exclusive=True):
        return  # another task stalls
    _wait_for_release()


def write_task(batches, plan, output):
    """after-commit: each task of a batch, its write done, says how many alerts it wrote; the last
    one to finish, once all have and some wrote alerts, kills the job before Spark commits the batch."""
    written = _write_task(batches, plan, output)
    if not isinstance(output, partition_writer._TransactionalOutput) or MARKER.exists():  # noqa: SLF001
        return written
    groups, _ = written
    alerts = sum(n for (kind, _, _), (n, _) in groups.items() if kind == Kind.ALERT)
    batch = f"{output.transactions.prefix}.{output.transactions.batch_id}"  # the extra queries' batches have their ids too
    MEETING.mkdir(exist_ok=True)
    write_marker(MEETING / f"{batch}.{output.partition}.done", str(alerts))
    done = list(MEETING.glob(f"{batch}.*.done"))
    total = sum(int(path.read_text()) for path in done)
    if len(done) >= int(os.environ[TASKS_ENV]) and total and write_marker(MEETING / f"{batch}.crash", "", exclusive=True):
        crash(f"{total} alerts written (batch {output.transactions.batch_id} committed to Kafka by all {len(done)} of its "
              "tasks) before Spark committed the batch")
    return written


def commit(self) -> None:
    batch_id, partition = self.transactions.batch_id, self.partition
    if POINT in (STALL_MID, AFTER_COMMIT) or MARKER.exists() or not self.delivery.sent:
        return _commit(self)
    if POINT == IN_TRANSACTION:
        crash(f"task {partition} of batch {batch_id}: {self.delivery.sent} records acknowledged in its open transaction")
    if POINT == STALL:
        write_marker(MARKER, f"task {partition} of batch {batch_id} stalled with {self.delivery.sent} records in its open "
                     f"transaction of transactional id {self.transactional_id}\n")
        _wait_for_release()
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


assert POINT in (AFTER_COMMIT, BETWEEN_TRANSACTIONS, IN_TRANSACTION, STALL, STALL_MID), POINT
partition_writer._TransactionalOutput.commit = commit  # type: ignore[method-assign]  # noqa: SLF001
if POINT == AFTER_COMMIT:
    partition_writer._write_task = write_task  # noqa: SLF001
if POINT == STALL_MID:
    partition_writer._TransactionalOutput.produce = produce  # type: ignore[method-assign]  # noqa: SLF001

if __name__ == "__main__":
    manager()
