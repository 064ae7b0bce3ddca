"""The anomalies job as a spark-submit application (declared in streamstate/jobs/anomalies_job.py).

    spark-submit --py-files "$(python -m streamstate.jobs.code_shipping package)" spark-jobs/anomalies.py --help

The same job as the ``streamstate-anomalies-job`` command; docs/cluster.md says when to use which.
"""

import sys

from streamstate.jobs.anomalies_job import JOB
from streamstate.jobs.runner import run_job

if __name__ == "__main__":
    sys.exit(run_job(JOB))
