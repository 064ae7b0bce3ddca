"""A job process that kills itself once at one dangerous point of writing a batch (test support).

    python -m tests.reliability.crash_at after-commit|in-transaction|between-transactions sessions|anomalies

Runs the job's usual command line with one change. When the job reaches the point for the
first time, it writes ``STREAMSTATE_TEST_CRASH_MARKER`` and SIGKILLs its whole process group:

- ``after-commit``: every task of a batch that wrote alerts has committed its transaction, and
  Spark has not written the batch's commit log (the last task of the batch to finish kills the
  job as it returns). The restarted job replays the batch: with output transactions it must
  write nothing again.
- ``in-transaction``: a task's records were all acknowledged by the broker inside its open
  transaction (a ``read_uncommitted`` consumer can see them), before it committed.
- ``between-transactions``: one task of a batch committed its transaction while another task
  of the same batch holds its own open, acknowledged and uncommitted.

One more point does not kill: ``stall-before-commit`` stops the first task with records, its
records acknowledged in its open transaction, until the file ``<marker>.release`` appears
(a stuck old driver, for the zombie-fencing test); then it tries to commit.

Nor does ``stall-mid-transaction``: the first task to produce a record to the topic named by
``STREAMSTATE_TEST_STALL_TOPIC`` waits until that record and every one before it is
acknowledged in its open transaction, writes the marker and stops until ``<marker>.release``
appears; then it produces the rest of its records and commits (a broker lost in the middle of
a transaction, for tests/reliability/test_broker_lost.py).

Every point is inside Spark's Python workers: the job runs them with
:mod:`tests.reliability.crash_daemon` as its worker daemon, which arms them before it forks a
worker. Random SIGKILLs rarely land exactly at any of these points.
"""

from __future__ import annotations

import functools
import importlib
import os
import signal
import sys
from pathlib import Path

from streamstate_pipeline.settings import Settings

AFTER_COMMIT, IN_TRANSACTION, BETWEEN_TRANSACTIONS = "after-commit", "in-transaction", "between-transactions"
POINTS = (AFTER_COMMIT, IN_TRANSACTION, BETWEEN_TRANSACTIONS)
STALL = "stall-before-commit"
STALL_MID = "stall-mid-transaction"
STALLS = (STALL, STALL_MID)
MARKER_ENV, POINT_ENV, JOB_GROUP_ENV = "STREAMSTATE_TEST_CRASH_MARKER", "STREAMSTATE_TEST_CRASH_POINT", "STREAMSTATE_TEST_JOB_GROUP"
STALL_TOPIC_ENV, TASKS_ENV = "STREAMSTATE_TEST_STALL_TOPIC", "STREAMSTATE_TEST_BATCH_TASKS"


def write_marker(marker: Path, text: str, *, exclusive: bool = False) -> bool:
    """Publish ``marker`` whole: tests wait for it to exist and then read it, so it appears
    with its text or not at all. ``exclusive``: only if no marker exists yet (False if one does)."""
    draft = marker.with_name(f".{marker.name}.{os.getpid()}.draft")
    draft.write_text(text)
    try:
        if not exclusive:
            draft.replace(marker)
            return True
        try:
            os.link(draft, marker)
        except FileExistsError:
            return False
        return True
    finally:
        draft.unlink(missing_ok=True)


def crash(what: str) -> None:
    """Mark the crash once, then SIGKILL the job's process group (the driver and its JVM) and,
    from a Python worker, the worker daemon's own group (Spark's daemon makes one), so no
    worker goes on to commit after the crash."""
    write_marker(Path(os.environ[MARKER_ENV]), f"{what}; then the job was killed\n")
    os.killpg(int(os.environ[JOB_GROUP_ENV]), signal.SIGKILL)
    os.killpg(os.getpgid(0), signal.SIGKILL)


def main() -> None:
    point, job = sys.argv.pop(1), sys.argv.pop(1)
    if point not in (*POINTS, *STALLS):
        sys.exit(f"crash point {point!r}: one of {', '.join((*POINTS, *STALLS))}")
    os.environ[POINT_ENV] = point
    os.environ[JOB_GROUP_ENV] = str(os.getpgid(0))
    # The tasks of a batch's write (its state partitions: the job's setting, else one per core).
    os.environ[TASKS_ENV] = str(Settings().shuffle_partitions or os.cpu_count())
    from streamstate_jobs import spark

    spark.build_spark = functools.partial(spark.build_spark, spark__python__daemon__module="tests.reliability.crash_daemon")
    importlib.import_module(f"streamstate_jobs.{job}.job").main()


if __name__ == "__main__":
    main()
