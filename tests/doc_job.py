"""The third job of docs/adding-a-job.md, loaded from the page itself, so the page cannot drift
from what the project accepts."""

from __future__ import annotations

import re
import sys
import types

from streamstate_pipeline.settings import REPO_ROOT

DOC = REPO_ROOT / "docs" / "adding-a-job.md"
MODULE = "streamstate_jobs.clicks_job"


def doc_job_source() -> str:
    """The first Python block of the page: the job's file."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert blocks, f"no python block in {DOC}"
    return blocks[0]


def load_doc_job() -> types.ModuleType:
    """The page's job file as the module it tells users to write; its functions reach Spark's
    workers by value, as the workers have no such file."""
    if MODULE in sys.modules:
        return sys.modules[MODULE]
    module = types.ModuleType(MODULE)
    sys.modules[MODULE] = module
    exec(compile(doc_job_source(), str(DOC), "exec"), module.__dict__)  # noqa: S102 - the page's own example
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(module)
    return module
