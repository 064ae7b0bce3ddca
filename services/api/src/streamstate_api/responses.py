"""JSON answers spliced around stored record bytes, with the freshness of their source.

A record's JSON is encoded once, by the job that wrote it; the view stores those bytes and
an answer is a few byte joins around them, never a parse and re-encode. The freshness part
(offsets per partition, caught-up flag) changes only when a batch is consumed, so its bytes
are cached per source and rebuilt only when the view publishes new positions.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from fastapi.responses import Response

from streamstate_api.record_contracts import Source

JSON = "application/json"


class Responder:
    """Builds the response bodies of the data endpoints."""

    def __init__(self, topics: dict[Source, str], caught_up: Callable[[], bool]):
        self._topics = topics
        self._caught_up = caught_up
        self._cache: dict[Source, tuple[dict[int, int], bool, bytes]] = {}

    def freshness(self, source: Source, positions: dict[int, int]) -> bytes:
        caught_up = self._caught_up()
        cached = self._cache.get(source)
        if cached is not None and cached[0] is positions and cached[1] == caught_up:
            return cached[2]
        offsets = {self._topics[source]: {str(p): o for p, o in sorted(positions.items())}}
        body = json.dumps({"offsets": offsets, "caught_up": caught_up}, separators=(",", ":")).encode()
        self._cache[source] = (positions, caught_up, body)
        return body

    def body(self, source: Source, positions: dict[int, int], *fields: bytes) -> bytes:
        """A JSON object of the given ``"name":value`` fields plus the freshness of ``source``."""
        return b"{" + b",".join((*fields, b'"freshness":' + self.freshness(source, positions))) + b"}"

    @staticmethod
    def json(body: bytes) -> Response:
        return Response(content=body, media_type=JSON)

    @staticmethod
    def array(items: list[bytes]) -> bytes:
        return b"[" + b",".join(items) + b"]"
