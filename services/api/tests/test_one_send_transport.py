"""The API connection's transport joins what uvicorn writes in one turn of the event loop
(a response's head and body) into one send, and keeps every write's bytes in order."""

from __future__ import annotations

import asyncio

from streamstate_api.timeouts import OneSendTransport


class _Socket(asyncio.Transport):
    """A transport that records each send."""

    def __init__(self) -> None:
        super().__init__()
        self.sends: list[bytes] = []
        self.closed = self.aborted = False

    def write(self, data) -> None:
        self.sends.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def get_extra_info(self, name, default=None):
        return {"peername": ("127.0.0.1", 5)}.get(name, default)


def test_writes_of_one_turn_leave_in_one_send_in_order():
    async def scenario():
        socket = _Socket()
        transport = OneSendTransport(socket, asyncio.get_running_loop())
        transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
        transport.write(b'{"a": 1}')
        assert socket.sends == [], "held until the loop's next turn"
        await asyncio.sleep(0)
        transport.write(b"next")
        await asyncio.sleep(0)
        return socket

    socket = asyncio.run(scenario())
    assert socket.sends == [b'HTTP/1.1 200 OK\r\n\r\n{"a": 1}', b"next"]


def test_close_sends_what_is_held_first_and_abort_drops_it():
    async def scenario():
        loop = asyncio.get_running_loop()
        closed, aborted = _Socket(), _Socket()
        first, second = OneSendTransport(closed, loop), OneSendTransport(aborted, loop)
        first.write(b"431 answer")
        first.close()
        second.write(b"lost")
        second.abort()
        await asyncio.sleep(0)
        return closed, aborted

    closed, aborted = asyncio.run(scenario())
    assert closed.sends == [b"431 answer"] and closed.closed
    assert aborted.sends == [] and aborted.aborted


def test_everything_else_is_the_transports_own():
    async def scenario():
        socket = _Socket()
        transport = OneSendTransport(socket, asyncio.get_running_loop())
        return transport.get_extra_info("peername"), transport.is_closing()

    assert asyncio.run(scenario()) == (("127.0.0.1", 5), False)
