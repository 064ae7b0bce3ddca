"""Fan-out of new alerts from the follower thread to the event-stream clients.

Each client owns a bounded asyncio queue on the server's event loop; the follower thread
hands alerts over with ``call_soon_threadsafe``. A client that falls ``queue_size``
alerts behind is cut off (its stream ends and it reconnects) instead of growing memory
without bound or slowing the follower.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from streamstate_api.record_contracts import AlertRecord

_OVERFLOW = None  # the queue item that tells a client it fell too far behind


@dataclass(eq=False)
class Subscription:
    """One client's queue of alerts; ``None`` in the queue means it was cut off."""

    loop: asyncio.AbstractEventLoop
    kind: str | None
    entity: str | None
    queue: asyncio.Queue = field(default_factory=lambda: asyncio.Queue(maxsize=1000))

    def wants(self, alert: AlertRecord) -> bool:
        return (self.kind is None or alert.kind == self.kind) and (self.entity is None or alert.entity == self.entity)

    def offer(self, alert: AlertRecord) -> None:
        """Runs on the event loop."""
        if self.queue.full():
            return  # already cut off, or about to be: the overflow marker is queued below
        if self.queue.qsize() == self.queue.maxsize - 1:
            self.queue.put_nowait(_OVERFLOW)
        else:
            self.queue.put_nowait(alert)


class AlertBroadcaster:
    """Registry of event-stream clients; :meth:`publish` is safe to call from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscriptions: set[Subscription] = set()

    def __len__(self) -> int:
        with self._lock:
            return len(self._subscriptions)

    @asynccontextmanager
    async def subscribe(self, kind: str | None = None, entity: str | None = None) -> AsyncIterator[Subscription]:
        """A subscription for the current event loop, removed however the client leaves."""
        subscription = Subscription(asyncio.get_running_loop(), kind, entity)
        with self._lock:
            self._subscriptions.add(subscription)
        try:
            yield subscription
        finally:
            with self._lock:
                self._subscriptions.discard(subscription)

    def publish(self, alerts: list[AlertRecord]) -> None:
        if not alerts:
            return
        with self._lock:
            subscriptions = list(self._subscriptions)
        for subscription in subscriptions:
            for alert in alerts:
                if subscription.wants(alert):
                    try:
                        subscription.loop.call_soon_threadsafe(subscription.offer, alert)
                    except RuntimeError:  # the loop has closed: the server is shutting down
                        break
