"""A deadline for each request's head, so idle or slow sockets cannot hold the connection limit.

uvicorn closes a keep-alive connection that stays silent after a response, but it has no
timer for a connection that never sends a request, and any byte received cancels the one it
has: measured, six sockets that connected and said nothing held a six-connection limit (every
new request answered 503) for as long as they stayed, and one that sends a header byte now
and then holds its slot forever. This protocol gives each request line and headers
``api_request_head_timeout_s`` to arrive in full, counted from the connection or from the
previous response, and closes the connection when they do not. A request's body and the
response (an alert stream lasts for hours) are not limited.

It extends uvicorn's httptools protocol (the one the API runs) at its documented parser
callbacks; the uvicorn version is pinned in the lock.
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


def head_timeout_protocol(seconds: float) -> type[asyncio.Protocol]:
    """uvicorn's ``http=`` protocol class with a ``seconds`` deadline on every request head."""

    class HeadTimeoutProtocol(HttpToolsProtocol):
        _head_deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm_head_deadline()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_head_deadline()
            super().connection_lost(exc)

        def on_headers_complete(self) -> None:
            self._disarm_head_deadline()
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            next_head_complete = bool(self.pipeline)  # a pipelined request has its head already
            super().on_response_complete()
            if not next_head_complete and not self.transport.is_closing():
                self._arm_head_deadline()

        def _arm_head_deadline(self) -> None:
            self._disarm_head_deadline()
            self._head_deadline = self.loop.call_later(seconds, self._head_timed_out)

        def _disarm_head_deadline(self) -> None:
            if self._head_deadline is not None:
                self._head_deadline.cancel()
                self._head_deadline = None

        def _head_timed_out(self) -> None:
            self._head_deadline = None
            if not self.transport.is_closing():
                self.transport.close()

    return HeadTimeoutProtocol
