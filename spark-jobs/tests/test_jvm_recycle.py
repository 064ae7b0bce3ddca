"""Counting the connections a process holds after their other end closed them, and the budget."""

from __future__ import annotations

import os
import socket
import time

from streamstate_jobs.jvm_recycle import abandoned_sockets, open_files_limit, socket_budget


def _pair() -> tuple[socket.socket, socket.socket, socket.socket]:
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    return server, client, accepted


def _eventually(predicate, limit_s: float = 5.0) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_a_connection_its_peer_closed_counts_until_this_side_closes_it():
    before = abandoned_sockets(os.getpid())
    server, client, accepted = _pair()
    try:
        assert abandoned_sockets(os.getpid()) == before, "an open connection is not abandoned"
        client.close()  # the Python worker's end, as after a task
        assert _eventually(lambda: abandoned_sockets(os.getpid()) == before + 1)
        accepted.close()  # what Spark 4.2.0's state server never does
        assert abandoned_sockets(os.getpid()) == before
    finally:
        for s in (server, client, accepted):
            s.close()


def test_an_unreadable_process_holds_nothing():
    assert abandoned_sockets(2**22 + 12345) == 0
    assert open_files_limit(2**22 + 12345) is None


def test_the_open_files_limit_is_this_process_soft_limit():
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert open_files_limit(os.getpid()) == (None if soft == resource.RLIM_INFINITY else soft)


def test_the_budget_is_the_setting_within_half_the_open_files_limit():
    assert socket_budget(8_000, 20_000) == 8_000
    assert socket_budget(8_000, 10_000) == 5_000
    assert socket_budget(8_000, None) == 8_000
    assert socket_budget(0, 20_000) == 0
