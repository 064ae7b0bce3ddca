"""The view store's writes without the write-ahead log (a catch-up's), through real kills: the
store is written by a child process that SIGKILLs itself, and reopened here (RocksDB, no broker)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from streamstate_api.store import SESSION, open_store

IDENTITY = {"format": 1, "topics": {"sessions": "s", "series": "m", "alerts": "a"}}
BATCH = 500  # sessions a batch, each batch written with the offset after it, as the view writes them


def _batches_after_a_kill(path: Path, steps: str) -> int:
    """Run ``steps`` (a few lines of Python with ``store`` and ``batch(n)`` in scope) in a child
    process on a store writing without its log, as a catch-up does; the child then SIGKILLs itself
    (nothing after the steps runs, no close, no flush). The batches the reopened store holds."""
    script = textwrap.dedent(
        f"""
        import os, signal
        from pathlib import Path
        from streamstate_api.store import SESSION, open_store
        store = open_store(Path({str(path)!r}), 8, {IDENTITY!r}).store

        def batch(n):
            values = {{SESSION + f"user-{{i:06d}}".encode(): f"value-{{i}}".encode() * 8 for i in range(n * {BATCH}, (n + 1) * {BATCH})}}
            store.write(values, {{("sessions", 0): n + 1}}, {{"sessions": (n + 1) * {BATCH}}})

        store.log_writes(False)
        """
    ) + textwrap.dedent(steps) + "\nos.kill(os.getpid(), signal.SIGKILL)\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == -9, f"the writer did not die by SIGKILL ({done.returncode}):\n{done.stderr}"
    return _batches_reopened(path)


def _batches_reopened(path: Path) -> int:
    """The batches the reopened store holds, checked to be exactly those its offset says."""
    opened = open_store(path, 8, IDENTITY)
    assert opened.rebuild_reason is None, opened.rebuild_reason
    store = opened.store
    try:
        batches = store.offsets().get(("sessions", 0), 0)
        expected = {SESSION + f"user-{i:06d}".encode(): f"value-{i}".encode() * 8 for i in range(batches * BATCH)}
        held = dict(store.scan(SESSION))
        assert held == expected, f"the store holds {len(held)} sessions where its offset ({batches} batches) says {len(expected)}"
        assert store.counters()["sessions"] == batches * BATCH
        return batches
    finally:
        store.close()


def test_a_catch_up_killed_midway_reopens_with_the_batches_up_to_its_last_flush(tmp_path):
    steps = """
        for n in range(6):
            batch(n)
        store.db.flush()  # as RocksDB does when a memtable fills
        for n in range(6, 10):
            batch(n)
        """
    assert _batches_after_a_kill(tmp_path / "store", steps) == 6  # the four after the flush are read again


def test_a_catch_up_killed_after_its_first_batch_resumes_from_the_store(tmp_path):
    """The first unlogged batch is flushed before its write returns, so a restart resumes from the
    store as soon as a catch-up has applied anything; the next is flushed a second later."""
    # 2 only on a machine that took a second between the two
    assert _batches_after_a_kill(tmp_path / "store", "batch(0)\nbatch(1)") in (1, 2)


def test_logging_again_keeps_every_unlogged_write_through_a_kill(tmp_path):
    """A logged write after unlogged ones: without a flush between them, the log would bring back
    the last batch's offsets after a kill while the batches before it were lost."""
    steps = """
        for n in range(10):
            batch(n)
        store.log_writes(True)
        batch(10)
        """
    assert _batches_after_a_kill(tmp_path / "store", steps) == 11


def test_closing_keeps_unlogged_writes(tmp_path):
    path = tmp_path / "store"
    store = open_store(path, 8, IDENTITY).store
    store.log_writes(False)
    for n in range(3):
        store.write(
            {SESSION + f"user-{i:06d}".encode(): f"value-{i}".encode() * 8 for i in range(n * BATCH, (n + 1) * BATCH)},
            {("sessions", 0): n + 1},
            {"sessions": (n + 1) * BATCH},
        )
    store.close()
    assert _batches_reopened(path) == 3
