"""The pipeline's streaming jobs: the one list every reader of job declarations iterates.

Each job declares itself in its own module (:class:`~streamstate_jobs.declaration.JobSpec`);
this list says which jobs the pipeline runs, in start order: ``streamstate up`` starts them
so and the Prometheus configs list them so. Adding a job: docs/adding-a-job.md.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from streamstate_jobs.anomalies import job as anomalies_job
from streamstate_jobs.sessions import job as sessions_job
from streamstate_jobs.declaration import JobDeclarationError, JobSpec

JOBS: Mapping[str, JobSpec] = MappingProxyType({spec.name: spec for spec in (sessions_job.JOB, anomalies_job.JOB)})


def job_spec(name: str) -> JobSpec:
    """The declared job ``name``; JobDeclarationError naming the known ones otherwise."""
    try:
        return JOBS[name]
    except KeyError:
        raise JobDeclarationError(f"no job named {name!r}; declared jobs: {', '.join(JOBS)}") from None
