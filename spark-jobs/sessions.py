"""The sessions job as a spark-submit application (declared in streamstate/jobs/sessions_job.py).

    spark-submit --py-files "$(python -m streamstate.jobs.code_shipping package)" spark-jobs/sessions.py --help

The same job as the ``streamstate-sessions-job`` command; docs/cluster.md says when to use which.
"""

import sys

from streamstate.jobs.sessions_job import JOB
from streamstate.jobs.runner import run_job

if __name__ == "__main__":
    sys.exit(run_job(JOB))
