"""What the API's routes share, built once per app and handed to them together (as a
dependency, :mod:`streamstate_api.deps`): settings, the bearer token, the view on its store,
the follower that feeds it, metrics, the alert broadcaster and the response builder. Its
lifespan starts the follower and, on shutdown, stops it and closes the store.

The token is read here once (:func:`bearer_token`) and both ways in (the fast path and the
routes' dependency) compare with :attr:`ApiContext.token`: before, each read the setting
itself, and a token of ``" "`` made them disagree.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import FastAPI

from streamstate_api.broadcast import AlertBroadcaster
from streamstate_api.follower import ViewFollower, source_topics
from streamstate_api.metrics import ApiMetrics
from streamstate_api.responses import Responder
from streamstate_api.store import open_store, view_identity
from streamstate_api.view import StateView
from streamstate_pipeline.errors import ConfigurationError
from streamstate_pipeline.settings import Settings


def bearer_token(settings: Settings) -> str | None:
    """The token the data endpoints require (None: none). A blank one is refused: an empty
    ``STREAMSTATE_API_TOKEN`` silently turned authentication off (a deployment that meant to
    set one, from an empty secret say, ran open)."""
    token = settings.api_token
    if token is not None and not token.strip():
        raise ConfigurationError(
            "STREAMSTATE_API_TOKEN is blank (empty or only whitespace): set the token the data endpoints "
            "should require, or unset the variable to run without one"
        )
    return token


# Net tracked allocations between two collections of the youngest generation: ten of the
# follower's batches, each about 10,000 tracked objects alive at once (its consumer messages and
# their tuples). Python's default, 700, collected some 14 times a batch.
_YOUNG_COLLECTION_EVERY = 50_000


def tune_collector() -> None:
    """The garbage collector as the API runs it, set once at start (issue 54).

    The start-up heap (modules, the app, FastAPI's and pydantic's schemas) is frozen out of the
    collector: every full collection walked it again (2 of a snapshot's ~10 µs on the follower's
    thread); garbage first, so none of it is kept for ever. And the youngest generation is
    collected every :data:`_YOUNG_COLLECTION_EVERY` net tracked allocations instead of 700: each
    collection inside a batch promoted the batch in flight, whose survivors then set off full
    collections (14 in a 1M cold rebuild, 4 % of its time; with this, catch-up went from 212k to
    231k records/s in one scratch run). Nothing here depends on cycles being freed early: the
    view's records are reference-counted structs the collector does not track."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(_YOUNG_COLLECTION_EVERY, *gc.get_threshold()[1:])


@dataclass
class ApiContext:
    settings: Settings
    token: str | None  # the one source of the bearer token (fast path and routes alike)
    view: StateView
    metrics: ApiMetrics
    broadcaster: AlertBroadcaster
    follower: ViewFollower
    responder: Responder

    @classmethod
    def build(cls, settings: Settings) -> "ApiContext":
        token = bearer_token(settings)  # before the store: a refused start leaves nothing behind
        topics = source_topics(settings)
        opened = open_store(settings.api_store_path, settings.api_store_cache_mb, view_identity(topics))
        view = StateView(opened.store, settings.api_max_alerts, settings.anomaly_threshold)
        metrics = ApiMetrics(view, settings.api_metrics_series_ids)
        broadcaster = AlertBroadcaster()
        follower = ViewFollower(settings, view, metrics, broadcaster, opened.rebuild_reason)
        responder = Responder(topics, follower.is_ready)
        return cls(settings, token, view, metrics, broadcaster, follower, responder)

    @asynccontextmanager
    async def lifespan(self, _: FastAPI) -> AsyncIterator[None]:
        # A damaged store is swapped on this loop, between requests (they read the store here).
        self.follower.swap_on(asyncio.get_running_loop())
        tune_collector()
        self.follower.start()
        try:
            yield
        finally:
            await asyncio.to_thread(self.follower.stop)
            self.view.close()
