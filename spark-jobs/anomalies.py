"""The anomalies job as a spark-submit application (declared in spark-jobs/src/streamstate_jobs/anomalies/job.py).

    spark-submit --py-files "$(python -m streamstate_jobs.code_shipping package)" spark-jobs/anomalies.py --help

The same job as the ``streamstate-anomalies-job`` command; docs/cluster.md says when to use which.
"""

import sys

from streamstate_jobs.anomalies.job import JOB
from streamstate_jobs.runner import run_job

if __name__ == "__main__":
    sys.exit(run_job(JOB))
