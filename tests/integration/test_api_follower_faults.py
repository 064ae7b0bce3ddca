"""The view follower against records and conditions that stopped it (issue 51), through a real
uvicorn process and the real broker: a record the store cannot hold, transactional topics."""

from __future__ import annotations

import pytest

from tests.api_builders import session_snapshot
from tests.integration.api_harness import publish, wait_until

pytestmark = pytest.mark.timeout(180)


def test_a_snapshot_the_store_cannot_hold_is_counted_and_the_live_view_goes_on(bootstrap, api_topics, start_api):
    """The review's case: a session snapshot with ``ts`` = 2^63 passed the strict check and failed
    the store write; the follower retried it for ever, served nothing later, counted nothing,
    and /readyz stayed 200."""
    api = start_api(api_topics)
    api.wait_ready()
    huge = session_snapshot("frozen", ts=1).to_json().replace(b'"ts":1,', b'"ts":%d,' % 2**63)
    publish(bootstrap, api_topics.sessions, [("frozen", huge), ("after", session_snapshot("after").to_json())], partition=0)
    wait_until(lambda: api.get("/sessions/after").status_code == 200, 30, "the record after the bad one to be served")
    assert api.get("/sessions/frozen").status_code == 404
    assert api.metric("streamstate_api_bad_records_total", topic=api_topics.sessions) == 1
    publish(bootstrap, api_topics.sessions, [("later", session_snapshot("later").to_json())], partition=0)
    wait_until(lambda: api.get("/sessions/later").status_code == 200, 30, "a later record to be served")
    assert api.get("/readyz").status_code == 200
