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

from streamstate_stack.launcher import EmbeddedStack, free_port
from tests.conftest import checkpoint_root_for
from tests.scenario import pipeline_topics

LARGE = os.environ.get("RELIABILITY_LARGE") == "1"
BREAK_CHECKPOINT = os.environ.get("RELIABILITY_BREAK_CHECKPOINT") == "1"


def _pipeline_on(session_stack: EmbeddedStack, new_topic, tmp_path) -> EmbeddedStack:
    """A launcher on a session stack's servers (it starts none of its own) with fresh topics,
    its own checkpoint root and API port."""
    pipeline = session_stack.settings.model_copy(
        update={
            **pipeline_topics(new_topic),
            "checkpoint_root": checkpoint_root_for(session_stack, tmp_path),
            "trigger_interval": "1 second",
            "sessions_metrics_port": 0,
            "anomalies_metrics_port": 0,
            "api_port": free_port(),
        }
    )
    return session_stack.sibling(pipeline, tmp_path)


@pytest.fixture
def pipeline_stack(stack, new_topic, tmp_path):
    """A pipeline on the embedded session broker; every process it starts is stopped after."""
    pipeline = _pipeline_on(stack, new_topic, tmp_path)
    yield pipeline
    pipeline.stop()


@pytest.fixture
def profile_pipeline_stack(profile_stack, profile_topic, tmp_path):
    """A pipeline on each profile's session servers in turn; every process it starts is stopped after."""
    pipeline = _pipeline_on(profile_stack, profile_topic, tmp_path)
    yield pipeline
    pipeline.stop()
