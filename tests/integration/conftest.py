"""Fixtures of the API's integration tests: fresh topics, and API processes stopped at the end."""

from __future__ import annotations

import pytest

from tests.integration.api_harness import ApiProcess, ApiTopics, make_topics


@pytest.fixture
def api_topics(new_topic) -> ApiTopics:
    return make_topics(new_topic)


@pytest.fixture
def start_api(bootstrap, tmp_path):
    """Factory: start an API process (stopped at the end of the test)."""
    started: list[ApiProcess] = []

    def start(topics: ApiTopics, bootstrap_servers: str | None = None, **settings: str) -> ApiProcess:
        api = ApiProcess(bootstrap_servers or bootstrap, topics, tmp_path / f"api-{len(started)}.log", **settings)
        started.append(api)
        return api

    yield start
    for api in started:
        api.stop()
