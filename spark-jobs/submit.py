"""The pipeline's jobs as one spark-submit application: the first argument names the job
(declared in spark-jobs/src/streamstate_jobs/registry.py), the rest are its options.

    spark-submit --py-files "$(python -m streamstate_jobs.code_shipping package)" spark-jobs/submit.py sessions --help

The same job as its ``streamstate-<name>-job`` command or ``python -m streamstate_jobs <name>``;
docs/cluster.md says when to use which.
"""

import sys

from streamstate_jobs.declaration import JobDeclarationError
from streamstate_jobs.registry import JOBS, job_spec
from streamstate_jobs.runner import run_job

USAGE = f"usage: spark-submit [spark options] spark-jobs/submit.py {{{', '.join(JOBS)}}} [options]   (--help after a job name: its options)"


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr)
        return 0 if argv else 2
    try:
        spec = job_spec(argv[0])
    except JobDeclarationError as exc:
        print(f"{USAGE}\nerror: {exc}", file=sys.stderr)
        return 2
    return run_job(spec, argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
