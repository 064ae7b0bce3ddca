"""The API's Prometheus metrics (names are a contract with the Grafana dashboards).

Everything lives on a registry of its own, so several apps in one process (tests) never
collide. View sizes and the extreme series are read from the view at scrape time by a
custom collector; the view keeps both as it applies records, so a scrape scans nothing.
Series ids are published only when the operator asks (``api_metrics_series_ids``): by
default /metrics names no entity and stays open to scrapers that carry no token.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from streamstate_api.view import StateView

# The z-score panel shows the most extreme series; more series would only add cardinality.
ZSCORE_SERIES_CAP = 200
UNMATCHED_ROUTE = "<unmatched>"
_CONVERTOR = re.compile(r":\w+}")
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class _ViewCollector(Collector):
    def __init__(self, view: StateView, series_ids: bool):
        self._view = view
        self._series_ids = series_ids

    def collect(self) -> Iterator[Metric]:
        sizes = GaugeMetricFamily("streamstate_api_view_size", "Entries in the API's view.", labels=["view"])
        for name, size in self._view.sizes().items():
            sizes.add_metric([name], size)
        yield sizes
        stale = CounterMetricFamily(
            "streamstate_api_stale_records",
            "Snapshots ignored because the view already had a newer one by event time (or had deleted it later).",
        )
        stale.add_metric([], self._view.stale_records)
        yield stale
        extremes = self._view.extreme_zscores()
        yield GaugeMetricFamily(
            "streamstate_series_extreme", "Series whose last |z| is above the anomaly threshold.", value=len(extremes)
        )
        zscores = GaugeMetricFamily(
            "streamstate_series_zscore",
            f"Last z-score of the series above the anomaly threshold (the {ZSCORE_SERIES_CAP} with the largest |z|; "
            "published only with STREAMSTATE_API_METRICS_SERIES_IDS=true).",
            labels=["series_id"],
        )
        if self._series_ids:
            for series_id, z in extremes[:ZSCORE_SERIES_CAP]:
                zscores.add_metric([series_id], z)
        yield zscores


class ApiMetrics:
    """The API's metrics on their own registry; :meth:`render` gives the exposition text."""

    def __init__(self, view: StateView, series_ids: bool = False):
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "streamstate_api_requests", "HTTP requests by route template, method and status.",
            ["route", "method", "status"], registry=r,
        )
        self.duration = Histogram(
            "streamstate_api_request_duration_seconds", "Time to the response head, by route template and method.",
            ["route", "method"], buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.consumer_lag = Gauge(
            "streamstate_api_consumer_lag", "End offset minus the view's consumed position.",
            ["topic", "partition"], registry=r,
        )
        self.alerts_seen = Counter(
            "streamstate_api_alerts_seen", "Distinct alert ids that entered the view, by kind.", ["kind"], registry=r
        )
        self.ready = Gauge("streamstate_api_ready", "1 once the view has caught up with the topics' ends.", registry=r)
        self.broker_up = Gauge("streamstate_api_broker_up", "1 while the Kafka broker answers the API.", registry=r)
        self.bad_records = Counter(
            "streamstate_api_bad_records", "Records on the followed topics that failed to decode.", ["topic"], registry=r
        )
        self.sse_clients = Gauge("streamstate_api_sse_clients", "Connected alert-stream clients.", registry=r)
        self.catch_up_seconds = Gauge(
            "streamstate_api_catch_up_seconds", "How long the view took to catch up at start (0 until it has).", registry=r
        )
        self.catch_up_records = Gauge(
            "streamstate_api_catch_up_records", "Records consumed to catch up at start (a rebuild: the whole topics).", registry=r
        )
        r.register(_ViewCollector(view, series_ids))
        ProcessCollector(registry=r)

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(route, method, str(status)).inc()
        self.duration.labels(route, method).observe(seconds)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class RequestMetricsMiddleware:
    """Counts requests and times them to the response head, labelled by route template.

    Timing to the head (not to the last byte) keeps the alert stream, which never ends,
    from polluting the latency histogram; for JSON routes the body follows at once.
    """

    def __init__(self, app: ASGIApp, metrics: ApiMetrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        responded = False

        def record(status: int) -> None:
            route = _template(getattr(scope.get("route"), "path", None) or UNMATCHED_ROUTE)
            self.metrics.observe_request(route, scope["method"], status, time.perf_counter() - started)

        async def timed_send(message: Message) -> None:
            nonlocal responded
            if message["type"] == "http.response.start" and not responded:
                responded = True
                record(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        except Exception:
            if not responded:
                record(500)
            raise


def _template(path: str) -> str:
    """A route's template without convertors (``/sessions/{user_id:path}`` -> ``/sessions/{user_id}``)."""
    return _CONVERTOR.sub("}", path) if ":" in path else path
