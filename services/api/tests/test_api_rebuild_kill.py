"""A cold rebuild writes its store without RocksDB's log; these tests kill a process that
does so (SIGKILL, a real process) and reopen its store.

What must hold whatever the kill loses: the store is an earlier state of itself (its offsets
and its values agree: every snapshot before the stored offset, none after), and it holds at
least the positions the view reported as kept (:meth:`StateView.kept_positions`, which the
follower's progress is computed from), so progress that /readyz showed survives the kill.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from streamstate_api.record_contracts import Source
from streamstate_api.store import open_store
from streamstate_api.view import StateView

IDENTITY = {"format": 1, "topics": {"sessions": "s", "series": "m", "alerts": "a"}}
BATCH = 500
REPO = Path(__file__).resolve().parents[3]

# The child: a view on an empty store applies batches of new users at consecutive offsets, says
# after each what it reports as kept, and then (``logged_last``) catches up and applies one
# more batch, logged. It kills itself with SIGKILL right after, nothing closed or flushed.
_CHILD = textwrap.dedent(
    """
    import json, os, signal, sys, time
    from pathlib import Path
    import streamstate_api.view as view_module
    from streamstate_api.record_contracts import Source, decode
    from streamstate_api.store import open_store
    from streamstate_api.view import StateView
    from tests.api_builders import session_snapshot

    path, batches, batch_size, logged_last = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
    view_module._FLUSH_EVERY_S = 3600.0  # the first batch's flush only: later batches stay unflushed
    view = StateView(open_store(path, 8, {IDENTITY}).store, max_alerts=10)

    def apply(first):
        view.apply([
            (Source.SESSIONS, 0, offset, decode(Source.SESSIONS, f"u{offset:06d}".encode(), session_snapshot(f"u{offset:06d}", ts=1_000 + offset).to_json()))
            for offset in range(first, first + batch_size)
        ])

    for n in range(batches):
        apply(n * batch_size)
        if n == 0:  # the first flush done, so that something is kept before the kill
            deadline = time.monotonic() + 30
            while not view.kept_positions(Source.SESSIONS) and time.monotonic() < deadline:
                time.sleep(0.01)
        print(json.dumps(view.kept_positions(Source.SESSIONS)), flush=True)
    if logged_last:
        view.rebuilt()
        apply(batches * batch_size)
        print(json.dumps(view.kept_positions(Source.SESSIONS)), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
).replace("{IDENTITY}", repr(IDENTITY))


def _killed_child(path: Path, batches: int, logged_last: bool) -> list[int]:
    """Run the child to its SIGKILL; the kept position of partition 0 it reported after each batch."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), str(batches), str(BATCH), "1" if logged_last else "0"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])},
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    return [json.loads(line).get("0", 0) for line in done.stdout.splitlines()]


def _reopened(path: Path) -> tuple[int, list[str]]:
    """The stored position of partition 0 and the users the reopened view lists, in order."""
    opened = open_store(path, 8, IDENTITY)
    try:
        view = StateView(opened.store, max_alerts=10)
        users, cursor = [], None
        while True:
            page, _ = view.sessions(cursor, 1_000, active_only=False)
            users += [json.loads(item)["user_id"] for item in page.items]
            if page.last_key is None:
                return view.positions(Source.SESSIONS).get(0, 0), users
            cursor = page.last_key
    finally:
        opened.store.close()


@pytest.mark.parametrize("batches", [1, 6])
def test_a_rebuild_killed_keeps_what_it_reported_and_agrees_with_its_offsets(tmp_path, batches):
    reported = _killed_child(tmp_path / "store", batches, logged_last=False)
    assert reported[0] == BATCH, "the first batch's flush makes it kept"
    assert reported == sorted(reported), "kept positions never go back"

    position, users = _reopened(tmp_path / "store")
    assert position >= reported[-1], f"the store kept offset {position}, behind the {reported[-1]} the view reported kept"
    assert users == [f"u{offset:06d}" for offset in range(position)], "the store's values agree with its offsets"


def test_a_logged_write_after_unlogged_ones_keeps_them_all(tmp_path):
    # RocksDB replays its log over the table files: a logged batch recovered without the
    # unlogged batches before it would leave values missing below the stored offset.
    batches = 6
    reported = _killed_child(tmp_path / "store", batches, logged_last=True)
    assert reported[-1] == (batches + 1) * BATCH, "once caught up, every applied position is kept"

    position, users = _reopened(tmp_path / "store")
    assert position == (batches + 1) * BATCH
    assert users == [f"u{offset:06d}" for offset in range(position)]
