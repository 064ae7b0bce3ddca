"""Fixtures of the reliability tests: a pipeline on fresh topics of the session broker.

Two switches, read from the environment (never set by default):
- ``RELIABILITY_LARGE=1``: the larger variants (more kill cycles, more fuzzed records, a
  longer load); the small variants always run.
- ``RELIABILITY_BREAK_CHECKPOINT=1``: deletes the state part of each job's checkpoint
  before every restart, to show the crash test goes red without it. Local use only.
"""

from __future__ import annotations

import os

import pytest

from streamstate.stack import EmbeddedStack, free_port
from tests.scenario import pipeline_topics

LARGE = os.environ.get("RELIABILITY_LARGE") == "1"
BREAK_CHECKPOINT = os.environ.get("RELIABILITY_BREAK_CHECKPOINT") == "1"


@pytest.fixture
def pipeline_stack(settings, new_topic, tmp_path):
    """An EmbeddedStack on the session broker (it starts no broker of its own) with fresh
    topics, its own checkpoint root and API port; every process it starts is stopped after."""
    pipeline = settings.model_copy(
        update={
            **pipeline_topics(new_topic),
            "checkpoint_root": str(tmp_path / "checkpoints"),
            "trigger_interval": "1 second",
            "sessions_metrics_port": 0,
            "anomalies_metrics_port": 0,
            "api_port": free_port(),
        }
    )
    stack = EmbeddedStack(settings=pipeline, workdir=tmp_path, quiet=True)
    yield stack
    stack.stop()
