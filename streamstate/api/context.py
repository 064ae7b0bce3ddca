"""What the API's routes share, built once per app and handed to them together (as a
dependency, :mod:`streamstate.api.deps`): settings, the view on its store, the follower that
feeds it, metrics, the alert broadcaster and the response builder. Its lifespan starts the
follower and, on shutdown, stops it and closes the store.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from fastapi import FastAPI

from streamstate.api.broadcast import AlertBroadcaster
from streamstate.api.follower import ViewFollower, source_topics
from streamstate.api.metrics import ApiMetrics
from streamstate.api.responses import Responder
from streamstate.api.store import open_store, view_identity
from streamstate.api.view import StateView
from streamstate.settings import Settings


@dataclass
class ApiContext:
    settings: Settings
    view: StateView
    metrics: ApiMetrics
    broadcaster: AlertBroadcaster
    follower: ViewFollower
    responder: Responder

    @classmethod
    def build(cls, settings: Settings) -> "ApiContext":
        topics = source_topics(settings)
        opened = open_store(settings.api_store_path, settings.api_store_cache_mb, view_identity(topics))
        view = StateView(opened.store, settings.api_max_alerts, settings.anomaly_threshold)
        metrics = ApiMetrics(view, settings.api_metrics_series_ids)
        broadcaster = AlertBroadcaster()
        follower = ViewFollower(settings, view, metrics, broadcaster, opened.rebuild_reason)
        responder = Responder(topics, follower.is_ready)
        return cls(settings, view, metrics, broadcaster, follower, responder)

    @asynccontextmanager
    async def lifespan(self, _: FastAPI) -> AsyncIterator[None]:
        # A damaged store is swapped on this loop, between requests (they read the store here).
        self.follower.swap_on(asyncio.get_running_loop())
        self.follower.start()
        try:
            yield
        finally:
            await asyncio.to_thread(self.follower.stop)
            self.view.close()
