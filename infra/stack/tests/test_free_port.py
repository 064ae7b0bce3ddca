"""free_port gives servers a port outside the kernel's ephemeral range, where no outgoing
connection opened meanwhile can take it before the server binds it; port_free (what
`streamstate up` asks of the configured ports) counts a port left in TIME_WAIT by a crashed
server as free, as the server's own bind would, and a port with a listener as busy."""

from __future__ import annotations

import socket

import pytest

from streamstate_pipeline.settings import Settings
from streamstate_stack.launcher import ephemeral_port_range, free_port, port_free
from streamstate_stack.up import _free_ports, broker_port


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


# --- a port left in TIME_WAIT by a crashed server ------------------------------------------
# After a SIGKILL the kernel closes the server's connections from its side: each stays in
# TIME_WAIT on the server's port for about a minute. The servers bind with SO_REUSEADDR (Kafka's
# JVM, uvicorn, Prometheus, MinIO), which TIME_WAIT does not stop; a plain bind is refused.


def _listener(port: int, reuse: bool = True) -> socket.socket:
    server = socket.socket()
    if reuse:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen()
    return server


def _time_wait_on(port: int) -> None:
    """Leave ``port`` with a connection in TIME_WAIT and no listener: the server's side closes first."""
    with _listener(port) as server, socket.create_connection(("127.0.0.1", port)) as client:
        accepted, _ = server.accept()
        accepted.close()  # the server's side is the active closer: TIME_WAIT is on ``port``
        assert client.recv(1) == b""
    # The precondition, checked: the port is now refused to a plain bind.
    with socket.socket() as plain, pytest.raises(OSError):
        plain.bind(("127.0.0.1", port))


def test_a_port_only_in_time_wait_counts_as_free_and_a_server_binds_it():
    port = free_port()
    _time_wait_on(port)
    assert port_free(port), "TIME_WAIT alone: the servers bind with SO_REUSEADDR"
    with _listener(port):  # as the restarted broker does
        pass


def test_a_port_with_a_live_listener_counts_as_busy():
    for reuse in (False, True):
        port = free_port()
        with _listener(port, reuse=reuse):
            assert not port_free(port), f"listening (SO_REUSEADDR {reuse}) yet free"
        assert port_free(port)


def test_up_keeps_the_broker_and_service_ports_that_are_only_in_time_wait():
    """What `streamstate up` does after a crash: the configured ports stay where they were."""
    broker, api = free_port(), free_port()
    _time_wait_on(broker)
    _time_wait_on(api)
    settings = Settings(bootstrap_servers=f"127.0.0.1:{broker}", api_port=api)
    assert broker_port(settings) == broker
    assert _free_ports(settings).api_port == api
    with _listener(broker), _listener(api):
        assert broker_port(settings) != broker, "a live broker's port is busy: the new one moves"
        assert _free_ports(settings).api_port != api
