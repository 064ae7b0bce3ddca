"""Prometheus metrics of a Spark job, exported from the driver.

Design choice: ``prometheus_client`` fed by a :class:`StreamingQueryListener`, not
Spark's own ``PrometheusServlet``.

- The servlet names streaming metrics after the application id and the query name
  (``metrics_<app-id>_driver_spark_streaming_<query>_inputRate_total``), so every
  restart creates new series and a dashboard cannot name them; it also lives on the
  Spark UI port, which moves when 4040 is taken and which the suite's own sessions disable.
- The servlet knows nothing of the domain: alerts by kind, dead letters and the counters
  and gauges a job declares (closed sessions, say) are counted from the job's own rows, and
  they must sit next to the progress numbers under one scrape target with one ``job`` label.
- A listener sees every micro-batch's ``StreamingQueryProgress`` (rates, batch
  duration, state rows and memory, watermark, source offsets) on the driver, which is
  exactly what the dashboards need. It takes each progress as its JSON, one call into the
  JVM: PySpark's own listener rebuilds the progress from the JVM's object field by field,
  a py4j call each (see :class:`_ProgressAsJson`).

Spark's servlet stays available for JVM internals (executor memory, GC) by setting
``spark.ui.prometheus.enabled`` and ``spark.metrics.conf.*`` in a job's Spark conf; no
dashboard depends on it.

Every metric carries the job's name in the ``job`` label, so Prometheus must scrape the
jobs with ``honor_labels: true`` (the configs in ``infra/prometheus`` do).
"""

from __future__ import annotations

import ast
import json
import logging
import threading
import typing
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics import MetricWrapperBase

from streamstate_pipeline.contracts import DeadLetter
from streamstate_jobs.declaration import Counter as DeclaredCounter
from streamstate_jobs.declaration import Gauge as DeclaredGauge
from streamstate_jobs.declaration import JobSpec, count_key
from streamstate_jobs.metrics_server import MAX_CONNECTIONS, READ_TIMEOUT_S, MetricsServer, serve_metrics
from streamstate_jobs.kafka.partition_writer import BatchSummary
from streamstate_jobs.kinds import Kind
from streamstate_jobs.routing import OUTPUT_SUMMARY

log = logging.getLogger(__name__)

# Known label values are created up front so their series exist (at 0) from the first
# scrape: a rate() over a series that appears only at its first increment loses it.
DEAD_LETTER_STAGES: tuple[str, ...] = typing.get_args(DeadLetter.model_fields["stage"].annotation)

# Micro-batches here take from tens of milliseconds (empty) to minutes (a backlog).
BATCH_DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)

_EPOCH = datetime(1970, 1, 1).astimezone()


@dataclass(frozen=True)
class ProgressSample:
    """The numbers of one micro-batch that the metrics export."""

    query: str
    batch_id: int
    input_rows: int
    input_rows_per_second: float
    processed_rows_per_second: float
    batch_duration_seconds: float
    state_rows: int
    state_memory_bytes: int
    watermark_delay_seconds: float | None
    watermark_ahead_seconds: float | None
    source_lag: dict[str, int] = field(default_factory=dict)


def _parse_instant(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def offsets_by_topic(offsets: Any) -> dict[str, dict[str, int]] | None:
    """Kafka-shaped offsets ``{"topic": {"0": 42}}``, or None for any other source."""
    if isinstance(offsets, str):
        try:
            offsets = json.loads(offsets)
        except ValueError:
            # Progress rebuilt from JSON (Spark Connect) holds str(dict), not JSON.
            try:
                offsets = ast.literal_eval(offsets)
            except (ValueError, SyntaxError):
                return None
    if not isinstance(offsets, Mapping):
        return None
    parsed: dict[str, dict[str, int]] = {}
    for topic, partitions in offsets.items():
        if not isinstance(partitions, Mapping):
            return None
        try:
            parsed[str(topic)] = {str(p): int(o) for p, o in partitions.items()}
        except (TypeError, ValueError):
            return None
    return parsed


def source_lag(sources: list[Mapping[str, Any]]) -> dict[str, int]:
    """Records each topic's latest offset is ahead of what the batch read, per topic.

    Only sources whose offsets look like Kafka's (topic -> partition -> offset) count.
    Each partition is clamped at zero: an end past the latest offset Spark last saw is no lag.
    """
    lag: dict[str, int] = {}
    for source in sources:
        end = offsets_by_topic(source.get("endOffset"))
        latest = offsets_by_topic(source.get("latestOffset"))
        if end is None or latest is None:
            continue
        for topic, partitions in latest.items():
            read = end.get(topic, {})
            behind = sum(max(0, offset - read.get(p, 0)) for p, offset in partitions.items())
            lag[topic] = lag.get(topic, 0) + behind
    return lag


def progress_sample(progress: Mapping[str, Any]) -> ProgressSample:
    """Reduce a ``StreamingQueryProgress`` (or its JSON as a dict) to what is exported."""
    operators = progress.get("stateOperators") or []
    event_time = progress.get("eventTime") or {}
    watermark = _parse_instant(event_time.get("watermark"))
    now = _parse_instant(progress.get("timestamp"))
    # Before the first batch with data the watermark is the epoch: no delay to report yet.
    delay = ahead = None
    if watermark is not None and now is not None and watermark > _EPOCH:
        ahead = (watermark - now).total_seconds()
        delay = max(0.0, -ahead)
    return ProgressSample(
        query=progress.get("name") or str(progress.get("id") or "unnamed"),
        batch_id=int(progress.get("batchId") or 0),
        input_rows=int(progress.get("numInputRows") or 0),
        input_rows_per_second=float(progress.get("inputRowsPerSecond") or 0.0),
        processed_rows_per_second=float(progress.get("processedRowsPerSecond") or 0.0),
        batch_duration_seconds=float(progress.get("batchDuration") or 0) / 1000.0,
        state_rows=sum(int(op.get("numRowsTotal") or 0) for op in operators),
        state_memory_bytes=sum(int(op.get("memoryUsedBytes") or 0) for op in operators),
        watermark_delay_seconds=delay,
        watermark_ahead_seconds=ahead,
        source_lag=source_lag(progress.get("sources") or []),
    )


class _JobLabelled:
    """A labelled metric with the ``job`` label already bound: ``.labels(kind=...)``."""

    def __init__(self, metric: MetricWrapperBase, job: str):
        self._metric = metric
        self._job = job

    def labels(self, **labels: str) -> Any:
        return self._metric.labels(job=self._job, **labels)


class _Declared:
    """One counter or gauge a job declares, its Prometheus metric bound to the job."""

    def __init__(self, declared: DeclaredCounter | DeclaredGauge, job: str, registry: CollectorRegistry):
        kind = Counter if isinstance(declared, DeclaredCounter) else Gauge
        labels = (["job"] if declared.job_label else []) + ([declared.label] if declared.label else [])
        self.label = declared.label
        self._metric = kind(declared.metric_name, declared.documentation, labels, registry=registry)
        self._job = {"job": job} if declared.job_label else {}
        self.balance = 0

    def series(self, label_value: str | None = None) -> Any:
        labels = dict(self._job)
        if self.label:
            labels[self.label] = label_value or ""
        return self._metric.labels(**labels) if labels else self._metric


def _listener_base() -> type:
    # Imported lazily so metrics can be created (and unit-tested) without a JVM.
    from pyspark.sql.streaming import StreamingQueryListener

    return StreamingQueryListener


class JobMetrics:
    """The Prometheus metrics of one Spark job, served from the driver.

    ``JobMetrics(spec, port=9101)`` starts an HTTP server on ``host:port``
    (loopback unless ``metrics_host`` says otherwise; ``port=0``: no server, e.g. in tests that read :attr:`registry` directly).
    The server closes a connection idle for ``read_timeout_s`` and serves at most
    ``max_connections`` at once (:mod:`streamstate_jobs.metrics_server`).
    Call :meth:`attach` with the SparkSession before starting the queries.
    """

    def __init__(
        self, spec: JobSpec, port: int = 0, registry: CollectorRegistry | None = None, host: str = "127.0.0.1",
        read_timeout_s: float = READ_TIMEOUT_S, max_connections: int = MAX_CONNECTIONS,
    ):
        self.job = job = spec.name
        self.registry = registry or CollectorRegistry()
        self._lock = threading.Lock()
        self._query_names: dict[str, str] = {}
        self._topic_of_kind: dict[str, str] = {}
        r = self.registry

        # -- fed by the listener ----------------------------------------------------------
        def per_query(kind: type, name: str, documentation: str, **options: Any) -> Any:
            return kind(name, documentation, ["job", "query"], registry=r, **options)

        self._input_rate = per_query(
            Gauge, "streamstate_job_input_rows_per_second", "Rows/s arriving at the sources (last batch).")
        self._processed_rate = per_query(
            Gauge, "streamstate_job_processed_rows_per_second", "Rows/s processed (last batch).")
        self._batch_duration = per_query(
            Histogram, "streamstate_job_batch_duration_seconds", "Wall time of each micro-batch.",
            buckets=BATCH_DURATION_BUCKETS)
        self._input_rows = per_query(Counter, "streamstate_job_input_rows", "Rows read from the sources.")
        self._batches = per_query(Counter, "streamstate_job_batches", "Micro-batches completed.")
        self._state_rows = per_query(
            Gauge, "streamstate_job_state_rows", "Rows held in the state stores (all operators).")
        self._state_memory = per_query(
            Gauge, "streamstate_job_state_memory_bytes", "Memory used by the state stores (all operators).")
        self._watermark_delay = per_query(
            Gauge, "streamstate_job_watermark_delay_seconds",
            "Batch time minus the event-time watermark: how far event time trails the clock.")
        self._watermark_ahead = per_query(
            Gauge, "streamstate_job_watermark_ahead_seconds",
            "Event-time watermark minus the batch's wall-clock time, not clamped: normally negative (minus the "
            "allowed lateness); above zero, records from the future moved event time for every key.")
        self._last_batch = per_query(Gauge, "streamstate_job_last_batch_id", "Id of the last completed micro-batch.")
        self._source_lag = Gauge(
            "streamstate_job_source_lag_records",
            "Records on the input topics beyond the last batch's end offsets.",
            ["job", "topic"], registry=r)
        self._up = Gauge(
            "streamstate_job_up", "1 while at least one streaming query of the job runs and its Kafka broker answers.",
            ["job"], registry=r)
        self._broker_reachable = True
        self._jvm_sockets = Gauge(
            "streamstate_job_jvm_abandoned_sockets",
            "Connections the job's own Spark JVM (local master) holds after their other end closed them: Spark 4.2.0 "
            "leaks one per stateful task.",
            ["job"], registry=r)
        self._jvm_restarts = Counter(
            "streamstate_job_jvm_restarts",
            "Times the job moved to a new Spark JVM because the old one held more abandoned connections than its budget.",
            ["job"], registry=r)

        # -- fed by the job's code -------------------------------------------------------
        dead_letters = Counter(
            "streamstate_job_dead_letters",
            "Records sent to the dead-letter topic, by the stage that refused them "
            "(contract, clock_skew, late, state).",
            ["job", "stage"], registry=r)
        alerts = Counter("streamstate_job_alerts", "Alerts emitted.", ["job", "kind"], registry=r)
        records_out = Counter(
            "streamstate_job_records_out", "Records written to output topics.", ["job", "topic"], registry=r)
        self.dead_letters = _JobLabelled(dead_letters, job)
        self.alerts = _JobLabelled(alerts, job)
        self.records_out = _JobLabelled(records_out, job)
        # -- declared by the job ---------------------------------------------------------
        self.counters = {c.name: _Declared(c, job, r) for c in spec.counters}
        self.gauges = [(g, _Declared(g, job, r)) for g in spec.gauges]

        for kind in spec.alert_kinds:
            self.alerts.labels(kind=kind)
        for stage in DEAD_LETTER_STAGES:
            self.dead_letters.labels(stage=stage)
        for declared in spec.counters:
            for value in declared.label_values:
                self.counters[declared.name].series(value)
            if not declared.label:
                self.counters[declared.name].series()
        for declared_gauge, gauge in self.gauges:
            if not declared_gauge.label:
                gauge.series().set(0)
        self._up.labels(job=job).set(0)
        self._jvm_restarts.labels(job=job)

        self.port = port
        self._server: MetricsServer | None = None
        if port:
            self._server = serve_metrics(self.registry, host, port, read_timeout_s, max_connections)

    # -- fed by the job's rows -------------------------------------------------------------
    def writes_to(self, topic_of_kind: Mapping[str, str]) -> None:
        """The topic each kind of the job's rows is written to (the records-out metric's label)."""
        self._topic_of_kind = dict(topic_of_kind)

    def count_written(self, summary_rows: list[Mapping[str, Any]]) -> None:
        """Count a batch's output from its writer tasks' summary rows (the query's observed
        metric :data:`~streamstate_jobs.routing.OUTPUT_SUMMARY`, in its progress)."""
        summary = BatchSummary.merged(summary_rows)
        self.count_batch(summary.rows, self._topic_of_kind)
        for kind, payloads in summary.payloads.items():
            self.read_rows(kind, [json.loads(payload) for payload in payloads])

    def count_batch(self, summary: list[Any], topic_of_kind: Mapping[str, str]) -> None:
        """Count a batch's rows, summarised by the writer (kind, label, counter: rows, total); the label
        is what routing's ``count_as`` named: an alert's kind, a dead letter's stage."""
        increments: dict[str, dict[str | None, int]] = {}

        def total(names: tuple[str, ...]) -> int:
            return sum(n for name in names for n in increments.get(name, {}).values())

        for row in summary:
            kind, n = row["kind"], row["rows"]
            if kind == Kind.COUNT:
                name, label = count_key(row["counter"])
                by_label = increments.setdefault(name, {})
                by_label[label] = by_label.get(label, 0) + (row["total"] or 0)
                continue
            self.records_out.labels(topic=topic_of_kind[kind]).inc(n)
            if kind == Kind.DEAD_LETTER:
                self.dead_letters.labels(stage=row["label"] or "state").inc(n)
            elif kind == Kind.ALERT and row["label"]:
                self.alerts.labels(kind=row["label"]).inc(n)
        for name, by_label in increments.items():
            if name in self.counters:
                for label, n in by_label.items():
                    self.counters[name].series(label).inc(n)
        for declared, gauge in self.gauges:
            moved = total(declared.adds) - total(declared.subtracts)
            if moved:
                gauge.balance += moved
                gauge.series().set(max(0, gauge.balance))

    def read_rows(self, kind: str, payloads: list[dict[str, Any]]) -> None:
        """Set the gauges that read rows of ``kind`` from a batch's decoded payloads."""
        for declared, gauge in self.gauges:
            if declared.reads and declared.reads[0] == kind and payloads:
                for label, value in declared.reads[1](payloads).items():
                    gauge.series(label).set(value)

    # -- listener side ------------------------------------------------------------------
    def record_progress(self, progress: Mapping[str, Any]) -> None:
        """Apply one micro-batch's progress to the gauges, counters and histogram."""
        sample = progress_sample(progress)
        labels = {"job": self.job, "query": sample.query}
        self._input_rate.labels(**labels).set(sample.input_rows_per_second)
        self._processed_rate.labels(**labels).set(sample.processed_rows_per_second)
        self._batch_duration.labels(**labels).observe(sample.batch_duration_seconds)
        self._input_rows.labels(**labels).inc(sample.input_rows)
        self._batches.labels(**labels).inc()
        self._state_rows.labels(**labels).set(sample.state_rows)
        self._state_memory.labels(**labels).set(sample.state_memory_bytes)
        self._last_batch.labels(**labels).set(sample.batch_id)
        if sample.watermark_delay_seconds is not None:
            self._watermark_delay.labels(**labels).set(sample.watermark_delay_seconds)
        if sample.watermark_ahead_seconds is not None:
            self._watermark_ahead.labels(**labels).set(sample.watermark_ahead_seconds)
        for topic, lag in sample.source_lag.items():
            self._source_lag.labels(job=self.job, topic=topic).set(lag)
        written = (progress.get("observedMetrics") or {}).get(OUTPUT_SUMMARY)
        if written is not None:
            self.count_written(written["rows"])

    def record_idle(self, query_id: str) -> None:
        """No new data: the rates are zero, whatever the last batch said."""
        query = self._query_names.get(query_id, query_id)
        self._input_rate.labels(job=self.job, query=query).set(0)
        self._processed_rate.labels(job=self.job, query=query).set(0)

    def query_started(self, query_id: str, name: str | None = None) -> None:
        with self._lock:
            self._query_names[query_id] = name or query_id
            self._refresh_up()

    def query_terminated(self, query_id: str) -> None:
        with self._lock:
            self._query_names.pop(query_id, None)
            self._refresh_up()

    def broker_reachable(self, reachable: bool) -> None:
        """A query whose broker is gone does not end (its client retries): it waits, and is not up."""
        with self._lock:
            self._broker_reachable = reachable
            self._refresh_up()

    def jvm_sockets(self, count: int) -> None:
        self._jvm_sockets.labels(job=self.job).set(count)

    def jvm_restarted(self) -> None:
        self._jvm_restarts.labels(job=self.job).inc()

    def _refresh_up(self) -> None:
        self._up.labels(job=self.job).set(1 if self._query_names and self._broker_reachable else 0)

    def attach(self, spark: Any) -> Any:
        """Register a listener on ``spark`` that feeds these metrics; returns it.

        Queries already running are counted as up; their progress arrives from their
        next batch on.
        """
        listener = _make_listener(self)
        spark.streams.addListener(listener)
        for query in spark.streams.active:
            self.query_started(str(query.id), query.name)
        return listener

    def close(self) -> None:
        """Stop the HTTP server (tests; a job's server ends with its process)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def _make_listener(metrics: JobMetrics) -> Any:
    base = _listener_base()

    class _MetricsListener(base):  # type: ignore[misc, valid-type]
        """Runs on the driver's listener thread: cheap, and never raises into Spark."""

        def onQueryStarted(self, event: Any) -> None:
            self._safely(metrics.query_started, str(event.id), event.name)

        def onQueryProgress(self, event: Any) -> None:
            self._safely(metrics.record_progress, event.progress)

        def onQueryIdle(self, event: Any) -> None:
            self._safely(metrics.record_idle, str(event.id))

        def onQueryTerminated(self, event: Any) -> None:
            self._safely(metrics.query_terminated, str(event.id))

        @staticmethod
        def _safely(action: Any, *args: Any) -> None:
            try:
                action(*args)
            except Exception:  # noqa: BLE001 - a metrics bug must not stop a query
                log.exception("metrics listener failed in %s", getattr(action, "__name__", action))

        def record_jvm_progress(self, jevent: Any) -> None:
            """A progress event from the JVM, read as its JSON (see :class:`_ProgressAsJson`)."""

            def record_progress_json() -> None:
                metrics.record_progress(json.loads(jevent.progress().json()))

            self._safely(record_progress_json)

        @property
        def _jlistener(self) -> Any:
            """The wrapper PySpark registers with Spark, around our py4j object instead of PySpark's."""
            if not hasattr(self, "_jlistenerobj"):
                from pyspark import SparkContext

                self._jlistenerobj = SparkContext._jvm.PythonStreamingQueryListenerWrapper(_ProgressAsJson(self))  # type: ignore[union-attr]  # noqa: SLF001
            return self._jlistenerobj

    return _MetricsListener()


class _ProgressAsJson:
    """The py4j object Spark's listener bus calls: each progress crosses as its JSON, one call.

    PySpark's own (``JStreamingQueryListener``) rebuilds every progress from the JVM's object,
    a py4j call per field, state operator and source, each served on the listener bus's thread
    by reflection that looks classes up along the whole classpath: measured on the anomalies job
    at the demo's 100 points/s, that thread took 5 of the JVM's 16 CPU-seconds in 30 s, more
    than the query's own thread. The other events are rare and small, and pass as PySpark passes them.
    """

    def __init__(self, listener: Any):
        self._listener = listener

    def onQueryStarted(self, jevent: Any) -> None:  # noqa: N802 - Spark's interface
        from pyspark.sql.streaming.listener import QueryStartedEvent

        self._listener.onQueryStarted(QueryStartedEvent.fromJObject(jevent))

    def onQueryProgress(self, jevent: Any) -> None:  # noqa: N802
        self._listener.record_jvm_progress(jevent)

    def onQueryIdle(self, jevent: Any) -> None:  # noqa: N802
        from pyspark.sql.streaming.listener import QueryIdleEvent

        self._listener.onQueryIdle(QueryIdleEvent.fromJObject(jevent))

    def onQueryTerminated(self, jevent: Any) -> None:  # noqa: N802
        from pyspark.sql.streaming.listener import QueryTerminatedEvent

        self._listener.onQueryTerminated(QueryTerminatedEvent.fromJObject(jevent))

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]
