"""``python -m streamstate_jobs NAME [options]``: run any job declared in
:mod:`streamstate_jobs.registry` (how ``streamstate up`` starts them; a job added there
needs no console script of its own)."""

from __future__ import annotations

import sys

from streamstate_jobs.registry import JOBS
from streamstate_jobs.runner import run_job


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in JOBS:
        names = ", ".join(JOBS)
        print(f"usage: python -m streamstate_jobs {{{names}}} [options]   (--help after a job name: its options)", file=sys.stderr)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    return run_job(JOBS[argv[0]], argv[1:])


if __name__ == "__main__":
    sys.exit(main())
