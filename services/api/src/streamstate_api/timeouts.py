"""Bounds on each request's head, so idle, slow or huge heads cannot hold the connection limit
or the process's memory.

*A deadline.* uvicorn closes a keep-alive connection that stays silent after a response, but
it has no timer for a connection that never sends a request, and any byte received cancels
the one it has: measured, six sockets that connected and said nothing held a six-connection
limit (every new request answered 503) for as long as they stayed, and one that sends a
header byte now and then holds its slot forever. This protocol gives each request line and
headers ``api_request_head_timeout_s`` to arrive in full, counted from the connection or from
the previous response, and closes the connection when they do not. A request's body and the
response (an alert stream lasts for hours) are not limited.

*A size.* Neither uvicorn's httptools protocol nor the parser bounds a head: a header value
is gathered in memory until its line ends, so four connections sending one took the API from
65 MB to 637 MB of RSS in 1.3 s (issue 51; compose gives it 512 MB). Bytes received while a
head is incomplete are counted before they reach the parser; past
``api_max_request_head_bytes`` the connection is answered 431 and closed, before any route,
middleware or token check runs. A head's bytes are those from its first byte (the connection,
or the end of the previous request) to its blank line; bytes that arrive in the same read as
the end of a body are counted from the next read, so a head is never read further than the
bound plus one read of the socket.

*One send an answer.* The connection's transport joins the writes of one turn of the event
loop (uvicorn writes an answer's head and its body apart) into one send (:class:`OneSendTransport`).

It extends uvicorn's httptools protocol (the one the API runs) at its documented parser
callbacks and its transport; the uvicorn version is pinned in the lock.
"""

from __future__ import annotations

import asyncio
import json

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


def too_large(max_bytes: int) -> bytes:
    """The whole 431 answer: the server's own, since no request (and no app) exists yet."""
    body = json.dumps({
        "detail": f"request line and headers larger than {max_bytes} bytes "
        "(STREAMSTATE_API_MAX_REQUEST_HEAD_BYTES): send a shorter request"
    }).encode()
    return (
        b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
    )


class OneSendTransport:
    """A connection's transport whose writes in one turn of the event loop leave in one send.

    uvicorn writes a response's status line and headers, then its body, each straight to the
    socket: two system calls and two segments on the wire for every answer, 21 % of the API's
    CPU at 5,000 requests/s (profiled). Held until the loop's next turn (or the connection's
    close), they go out joined. Everything but writing and closing is the transport's own."""

    __slots__ = ("_transport", "_loop", "_pending")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._transport, self._loop = transport, loop
        self._pending: list[bytes] | None = None

    def write(self, data: bytes) -> None:
        if self._pending is None:
            self._pending = [data]
            self._loop.call_soon(self.flush)
        else:
            self._pending.append(data)

    def flush(self) -> None:
        pending, self._pending = self._pending, None
        if pending and not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending = None
        self._transport.abort()

    def __getattr__(self, name: str):
        return getattr(self._transport, name)


def request_head_protocol(timeout_s: float, max_bytes: int) -> type[asyncio.Protocol]:
    """uvicorn's ``http=`` protocol class with a ``timeout_s`` deadline and a ``max_bytes`` bound
    on every request head."""
    refusal = too_large(max_bytes)

    class RequestHeadProtocol(HttpToolsProtocol):
        _head_deadline: asyncio.TimerHandle | None = None
        _in_head = True  # the bytes now arriving belong to a request head
        _head_bytes = 0  # of the head under way
        _heads_done = 0

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(OneSendTransport(transport, self.loop))  # type: ignore[arg-type]
            self._arm_head_deadline()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_head_deadline()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            while self._in_head and self._head_bytes + len(data) > max_bytes:
                room = max_bytes - self._head_bytes
                heads = self._heads_done
                self._head_bytes = max_bytes  # set back to 0 if the head ends within the room
                super().data_received(data[:room])
                if self.transport.is_closing():
                    return
                if self._heads_done == heads:  # the same head, and it is over the bound
                    self._refuse_head()
                    return
                data = data[room:]
            if self._in_head:
                self._head_bytes += len(data)
            super().data_received(data)

        def on_headers_complete(self) -> None:
            self._in_head = False
            self._heads_done += 1
            self._disarm_head_deadline()
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            self._in_head, self._head_bytes = True, 0  # what follows is the next request's head
            super().on_message_complete()

        def on_response_complete(self) -> None:
            next_head_complete = bool(self.pipeline)  # a pipelined request has its head already
            super().on_response_complete()
            if not next_head_complete and not self.transport.is_closing():
                self._arm_head_deadline()

        def _refuse_head(self) -> None:
            self._disarm_head_deadline()
            if self.cycle is None or self.cycle.response_complete:  # else a response is under way: just close
                self.transport.write(refusal)
            self.transport.close()

        def _arm_head_deadline(self) -> None:
            self._disarm_head_deadline()
            self._head_deadline = self.loop.call_later(timeout_s, self._head_timed_out)

        def _disarm_head_deadline(self) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
                self._head_deadline = None

        def _head_timed_out(self) -> None:
            self._head_deadline = None
            if not self.transport.is_closing():
                self.transport.close()

    return RequestHeadProtocol
