"""Where a server on this machine can be reached from, for the tests that check what it binds."""

from __future__ import annotations

import socket


def external_address() -> str | None:
    """This machine's address on its default route (a UDP connect sends no packet), if it has one
    besides loopback; None offline."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") else address
