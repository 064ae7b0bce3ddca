"""A job process that crashes once, right after it wrote a batch's alerts (test support).

    python -m tests.reliability.crash_after_write sessions|anomalies

Runs the job's usual command line with one change: the first time a batch's write that
included alerts succeeds, the job marks ``STREAMSTATE_TEST_CRASH_MARKER`` and SIGKILLs its whole
process group, before the batch's commit. The restarted job must replay
that batch: the alerts reach the topic twice (same ids), and every output still equals the
reference. Random SIGKILLs rarely land exactly between a batch's first write and its commit.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
from pathlib import Path

from streamstate.jobs import routing
from streamstate.kinds import Kind

MARKER = Path(os.environ["STREAMSTATE_TEST_CRASH_MARKER"])
_write = routing.write_partitions


def _write_then_crash(batch, settings, plan):
    summary = _write(batch, settings, plan)
    alerts = summary.counts.get(Kind.ALERT, 0)
    if alerts and not MARKER.exists():
        MARKER.write_text(f"{alerts} alerts written, then the job was killed before committing the batch\n")
        os.killpg(os.getpgid(0), signal.SIGKILL)
    return summary


def main() -> None:
    job = sys.argv.pop(1)
    routing.write_partitions = _write_then_crash
    importlib.import_module(f"streamstate.jobs.{job}_job").main()


if __name__ == "__main__":
    main()
