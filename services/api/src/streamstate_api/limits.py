"""A cap on concurrent alert streams, in front of the routes.

An event stream holds its connection for as long as the client stays, so a few hundred
forgotten clients could hold every connection the server accepts. Beyond
``api_max_streams`` open streams a new one is answered at once with 429 and a message
(never left hanging). The check and the count happen without an ``await`` in between, so
on the one event loop they cannot race. (The cap on all connections is the server's:
uvicorn's ``limit_concurrency`` answers 503 beyond ``api_max_connections``.)
"""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Receive, Scope, Send


class StreamLimit:
    def __init__(self, app: ASGIApp, path: str, limit: int):
        self.app = app
        self.path = path
        self.limit = limit
        self.open = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        if self.open >= self.limit:
            await _too_many(send, self.limit)
            return
        self.open += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.open -= 1


async def _too_many(send: Send, limit: int) -> None:
    body = json.dumps(
        {"detail": f"too many alert streams open (the limit is {limit}, STREAMSTATE_API_MAX_STREAMS): retry later"}
    ).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), (b"retry-after", b"5")]
    await send({"type": "http.response.start", "status": 429, "headers": headers})
    await send({"type": "http.response.body", "body": body})
