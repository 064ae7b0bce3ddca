"""The fast path: the read requests that carry the load, answered without FastAPI's
per-request machinery.

Measured (docs/api-store.md, "Serving"): with uvloop and httptools, a ``GET
/sessions/{user_id}`` cost about 0.35 ms of CPU, and a profile put well over half of it in
FastAPI and Starlette's layers (route matching over every route, dependency solving,
parameter validation, five nested middlewares each wrapping ``send``), not in the lookup.
At 2,500 requests/s on two cores that is most of a core before the clients get any.

So the three read routes (``/sessions/{user_id}``, ``/series/{series_id}``, ``/sessions``)
are matched here first, in front of the FastAPI app (uvicorn serves this object, so FastAPI's
and Starlette's own per-request layers, error and telemetry middlewares included, do not run
for them: 8 % of a profile's samples at 5,000 requests/s, 5 % less CPU a request measured), and answered by the *same* functions
the routers call (:func:`~streamstate_api.routes.sessions.session_body`, ...). Only what is
plainly valid is answered here: a known path, a GET, the bearer token when one is required,
and for the listing only ``limit`` (digits, 1-1,000), ``active`` (``true``/``false``) and a
well-formed ``cursor``, each at most once. Anything else (a 404, a bad or extra parameter,
a missing token, another route) goes on to FastAPI unchanged, which answers it with its
validation and error messages, so the two ways in cannot disagree on an error. So does a
request whose answer raises here (a damaged store: the routes' 503): every error comes from
the routes and is counted by the metrics middleware. Requests answered here are counted in
the same request metrics with the same route labels. Ids are the rest of the path, ``/``
included, as the routes take them.
"""

from __future__ import annotations

import hmac
import time
from urllib.parse import unquote_plus

from starlette.types import ASGIApp, Receive, Scope, Send

from streamstate_api.context import ApiContext
from streamstate_api.cursor import BadCursor, decode_cursor
from streamstate_api.routes.series import series_body
from streamstate_api.routes.sessions import DEFAULT_LIMIT, MAX_LIMIT, page_body, session_body

_HEADERS = [(b"content-type", b"application/json")]
_SESSION_ROUTE, _SERIES_ROUTE, _LIST_ROUTE = "/sessions/{user_id}", "/series/{series_id}", "/sessions"


class FastPath:
    def __init__(self, app: ASGIApp, context: ApiContext):
        self.app = app
        self.context = context
        token = context.token
        self._authorization = None if token is None else f"Bearer {token}".encode()
        metrics = context.metrics
        self._observe = {
            route: (metrics.requests.labels(route, "GET", "200").inc, metrics.duration.labels(route, "GET").observe)
            for route in (_SESSION_ROUTE, _SERIES_ROUTE, _LIST_ROUTE)
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and self._authorized(scope):
            started = time.perf_counter()
            try:
                answer = self._answer(scope["path"], scope["query_string"])
            except Exception:  # noqa: BLE001 - the routes answer it (a damaged store: 503), and it is counted
                answer = None
            if answer is not None:
                route, body = answer
                await send({"type": "http.response.start", "status": 200, "headers": [*_HEADERS, (b"content-length", b"%d" % len(body))]})
                await send({"type": "http.response.body", "body": body})
                count, observe = self._observe[route]
                count()
                observe(time.perf_counter() - started)
                return
        await self.app(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        if self._authorization is None:
            return True
        for name, value in scope["headers"]:
            if name == b"authorization":
                return hmac.compare_digest(value, self._authorization)
        return False

    def _answer(self, path: str, query: bytes) -> tuple[str, bytes] | None:
        api = self.context
        if path.startswith("/sessions/"):
            user_id = path[len("/sessions/"):]
            if user_id and not query:
                body = session_body(api, user_id)
                return None if body is None else (_SESSION_ROUTE, body)
        elif path.startswith("/series/"):
            series_id = path[len("/series/"):]
            if series_id and not query:
                body = series_body(api, series_id)
                return None if body is None else (_SERIES_ROUTE, body)
        elif path == "/sessions":
            params = _listing_params(query)
            if params is not None:
                return _LIST_ROUTE, page_body(api, *params)
        return None


def _listing_params(query: bytes) -> tuple[str | None, int, bool] | None:
    """(after, limit, active) when the query is plainly valid, else None (FastAPI decides)."""
    after, limit, active, seen = None, DEFAULT_LIMIT, False, set()
    if query:
        for pair in query.decode("latin-1").split("&"):
            name, _, value = pair.partition("=")
            if name in seen:
                return None
            seen.add(name)
            value = unquote_plus(value)
            if name == "limit" and value.isascii() and value.isdigit() and len(value) <= 4 and 1 <= int(value) <= MAX_LIMIT:
                limit = int(value)
            elif name == "active" and value in ("true", "false"):
                active = value == "true"
            elif name == "cursor":
                try:
                    after = decode_cursor(value) if value else None
                except BadCursor:
                    return None
            else:
                return None
    return after, limit, active
