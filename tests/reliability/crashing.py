"""Killing a job process with SIGKILL at seeded random moments, and restarting it on the
same checkpoint: the moments are chosen from the job's own progress (its query started,
then a random number of micro-batches committed) plus a random delay."""

from __future__ import annotations

import math
import random
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from streamstate_stack.launcher import EmbeddedStack, ManagedProcess
from tests.checkpoints import CheckpointFiles


@dataclass(frozen=True)
class Kill:
    cycle: int
    committed: int  # micro-batches committed in the checkpoint when the job was killed
    in_flight: bool  # a planned batch had not committed: the restart must replay it


def _batches(checkpoint: CheckpointFiles, log: str) -> int:
    return len(checkpoint.batches(log))


def _starts(proc: ManagedProcess, job: str) -> int:
    try:
        return proc.log_path.read_text(errors="replace").count(f"query {job} started")
    except OSError:
        return 0


def _wait(condition, proc: ManagedProcess, timeout_s: float, what: str, crashed=lambda: False) -> None:
    """Poll ``condition``; a dead or stuck job fails the test, unless it ``crashed()`` as planned."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        # One look at the process: it may die between two, after a check of the marker that
        # its crash point writes before the kill.
        if not proc.alive():
            if crashed():
                return
            raise AssertionError(f"{proc.name} exited with {proc.popen.returncode} while {what}:\n{proc.tail(40)}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{proc.name} made no progress in {timeout_s:.0f}s while {what}:\n{proc.tail(40)}")
        time.sleep(0.1)


def next_crash(crash_markers: dict[str, Path] | None) -> tuple[str, Path] | None:
    """The first crash point (of :mod:`tests.reliability.crash_at`) whose marker is not written yet."""
    return next(((point, marker) for point, marker in (crash_markers or {}).items() if not marker.exists()), None)


def start(stack: EmbeddedStack, job: str, break_checkpoint: bool = False, crash_markers: dict[str, Path] | None = None) -> ManagedProcess:
    """Start ``job`` on its checkpoint; ``break_checkpoint`` first deletes the checkpointed state.

    With ``crash_markers`` (crash point: a path not yet written) the job is the variant that
    kills itself at the first point not yet reached (:mod:`tests.reliability.crash_at`)."""
    if break_checkpoint:
        location = stack.settings.checkpoint(job)
        if location.startswith("s3a://"):
            raise NotImplementedError("RELIABILITY_BREAK_CHECKPOINT deletes local checkpoints only: run it on the embedded profile")
        shutil.rmtree(Path(location) / "state", ignore_errors=True)
    crash = next_crash(crash_markers)
    if crash is not None:
        point, marker = crash
        return stack.spawn(
            f"{job}-job",
            [sys.executable, "-m", "tests.reliability.crash_at", point, job],
            extra_env={"STREAMSTATE_TEST_CRASH_MARKER": str(marker)},
        )
    return stack.start_job(job)


def crash_repeatedly(
    stack: EmbeddedStack,
    job: str,
    rng: random.Random,
    cycles: int,
    feed: Callable[[int], None],
    input_records: Callable[[], int],
    break_checkpoint: bool = False,
    progress_timeout_s: float = 300,
    crash_markers: dict[str, Path] | None = None,
) -> list[Kill]:
    """``cycles`` times: ``feed(cycle)`` more input, start the job, let it commit a random
    number (0-2) of micro-batches (fewer once all ``input_records()`` are planned), wait a
    random moment, SIGKILL it. Until every one of ``crash_markers`` is written, the job started
    is the variant that also kills itself at the next crash point, and the cycles go on (at
    most ``cycles`` more, and two per point) until it has."""
    checkpoint = CheckpointFiles.of(stack, stack.settings.checkpoint(job))
    kills = []
    for cycle in range(2 * cycles + 2 * len(crash_markers or {})):
        if cycle >= cycles and next_crash(crash_markers) is None:
            break
        feed(cycle)
        previous_starts = _starts(stack.processes[f"{job}-job"], job) if f"{job}-job" in stack.processes else 0
        planned = next_crash(crash_markers)
        proc = start(stack, job, break_checkpoint, crash_markers)
        # The closures below read this cycle's variables (noqa: B023): _wait calls them only
        # within the cycle, never after the loop has moved on.
        planned_crash = planned is not None

        def crashed() -> bool:
            return planned is not None and planned[1].exists()  # noqa: B023

        _wait(lambda: _starts(proc, job) > previous_starts, proc, progress_timeout_s, "starting its query", crashed)  # noqa: B023
        # The variant that kills itself is left to do so: a random kill could land before its
        # first alert every time on a slow machine, and the crash after a write would go untested.
        target = math.inf if planned_crash else _batches(checkpoint, "commits") + rng.choice((0, 1, 1, 2))

        def progressed() -> bool:
            committed = _batches(checkpoint, "commits")
            exhausted = checkpoint.planned_records() >= input_records() and committed >= _batches(checkpoint, "offsets")
            return committed >= target or exhausted  # noqa: B023

        _wait(progressed, proc, progress_timeout_s, "processing", crashed)
        if proc.alive():
            time.sleep(rng.uniform(0, 2.5))
        in_flight = _batches(checkpoint, "offsets") > _batches(checkpoint, "commits")
        proc.kill()
        kills.append(Kill(cycle, _batches(checkpoint, "commits"), in_flight))
    return kills
