"""free_port gives servers a port outside the kernel's ephemeral range, where no outgoing
connection opened meanwhile can take it before the server binds it."""

from __future__ import annotations

import socket

from streamstate.stack.launcher import ephemeral_port_range, free_port


def test_a_free_port_is_outside_the_ephemeral_range_and_can_be_bound():
    ephemeral = ephemeral_port_range()
    ports = {free_port() for _ in range(20)}
    assert not ports & set(ephemeral), sorted(ports & set(ephemeral))
    for port in ports:
        with socket.socket() as server:
            server.bind(("127.0.0.1", port))


def test_a_port_in_use_is_never_given():
    taken = []
    try:
        for _ in range(50):
            server = socket.socket()
            server.bind(("127.0.0.1", free_port()))
            server.listen()
            taken.append(server)
    finally:
        for server in taken:
            server.close()
