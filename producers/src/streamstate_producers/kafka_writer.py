"""Delivery-checked, rate-limited producing of generated records, with progress.

Every record is either acknowledged by the broker or counted as failed with its
reason; nothing is dropped silently. librdkafka's own log lines are routed to the
``streamstate_producers.kafka`` logger instead of stderr, so a command's stderr stays
one progress line and one summary (or one ``error:`` line).

The broker is a :class:`~streamstate_pipeline.kafka_clients.KafkaConnection`: ``Settings.kafka``
(bootstrap servers and the user's client options), or ``KafkaConnection("host:port")`` in tests.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, TextIO

from confluent_kafka import KafkaError, KafkaException, Producer

from streamstate_pipeline.kafka_clients import KafkaConnection, admin, producer_config, reason
from streamstate_producers.pacing import ProgressLine, TokenBucket
from streamstate_producers.produced_record import ProducedRecord
from streamstate_pipeline.errors import ProducerError

log = logging.getLogger("streamstate_producers.kafka")
log.addHandler(logging.NullHandler())

MESSAGE_TIMEOUT_MS = 30_000
# A flush waits for every delivery report: librdkafka gives each record's by the message timeout.
FLUSH_LIMIT_S = MESSAGE_TIMEOUT_MS / 1000 + 5
# How long a stop (SIGTERM, Ctrl-C) waits for deliveries in flight: inside Docker's 10 s stop
# grace, so that a producer stopped while its broker does not answer still prints its summary.
STOP_FLUSH_S = 5.0


class ProducerSetupError(ProducerError):
    """The run cannot start (broker unreachable, topic missing); the message is one line."""


@dataclass(frozen=True)
class ProduceSummary:
    """Outcome of a run: records acknowledged, records failed, wall time and achieved rate."""

    sent: int
    failed: int
    elapsed_s: float
    rate: float
    errors: dict[str, int] = field(default_factory=dict)  # failure reason -> records
    interrupted: bool = False  # stopped early by a signal or Ctrl-C

    @property
    def ok(self) -> bool:
        return self.failed == 0

    def line(self) -> str:
        text = f"sent {self.sent:,} records, {self.failed:,} failed, in {self.elapsed_s:.1f}s ({self.rate:,.0f}/s)"
        if self.interrupted:
            text += ", stopped early"
        if self.errors:
            text += "; failures: " + "; ".join(f"{reason} x{count}" for reason, count in self.errors.items())
        return text


def generator_producer_config(broker: KafkaConnection, **overrides: Any) -> dict[str, Any]:
    """Producer settings tuned for throughput without giving up per-key order; librdkafka's
    log lines go to this module's logger, an unreachable broker fails fast."""
    return producer_config(
        broker,
        **{
            "logger": log,
            "socket.timeout.ms": 5_000,
            "linger.ms": 20,
            "batch.num.messages": 10_000,
            "queue.buffering.max.messages": 500_000,
            "queue.buffering.max.kbytes": 262_144,
            # Idempotence keeps per-partition order through retries with several requests in flight.
            "enable.idempotence": True,
            "message.timeout.ms": MESSAGE_TIMEOUT_MS,
            **overrides,
        },
    )


def check_broker(broker: KafkaConnection, topics: Iterable[str], timeout_s: float = 5.0) -> None:
    """Fail fast, in one line, when the broker does not answer or a topic does not exist.

    Asks for all topics' metadata (never one topic's: this broker would auto-create it).
    """
    bootstrap = broker.bootstrap_servers
    try:
        metadata = admin(broker, logger=log, **{"socket.timeout.ms": 5_000}).list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise ProducerSetupError(f"Kafka broker at {bootstrap} did not answer within {timeout_s:g}s ({reason(exc)})") from None
    present = {name for name, topic in metadata.topics.items() if topic.error is None}
    missing = sorted(set(topics) - present)
    if missing:
        known = ", ".join(sorted(n for n in present if not n.startswith("_"))[:10]) or "none"
        raise ProducerSetupError(f"unknown topic {', '.join(missing)} on {bootstrap} (existing: {known})")


class _Deliveries:
    """Counts delivery reports; the broker's acknowledgement is what makes a record 'sent'."""

    def __init__(self) -> None:
        self.sent = 0
        self.failed = 0
        self.errors: Counter[str] = Counter()

    def report(self, error: KafkaError | None, message: Any) -> None:
        if error is None:
            self.sent += 1
        else:
            self.fail(error.str())

    def fail(self, reason: str, count: int = 1) -> None:
        self.failed += count
        self.errors[reason] += count


def produce_records(
    broker: KafkaConnection,
    records: Iterable[ProducedRecord],
    rate: float | None = None,
    progress: bool = True,
    *,
    duration_s: float | None = None,
    total: int | None = None,
    stop: threading.Event | None = None,
    progress_stream: TextIO | None = None,
    **config: Any,
) -> ProduceSummary:
    """Send ``records`` to their topics and wait for every delivery report.

    ``rate`` caps records per second (token bucket); ``duration_s`` ends the run after
    that long; ``stop`` ends it when set (signal handlers set it); Ctrl-C does the same.
    In every case the producer is flushed before returning, so the summary counts every
    record handed to it. ``total`` (the expected count) turns the progress line into a bar;
    extra keyword arguments override librdkafka settings (dots as double underscores).
    """
    overrides = {key.replace("__", "."): value for key, value in config.items()}
    producer = Producer(generator_producer_config(broker, **overrides))
    deliveries = _Deliveries()
    bar = ProgressLine(progress_stream or sys.stderr, total=total, enabled=progress)
    bucket = TokenBucket(rate) if rate else None
    started = time.monotonic()
    interrupted = False
    handed = 0
    try:
        for record in _paced(records, producer, bucket):
            if stop is not None and stop.is_set():
                interrupted = True
                break
            if duration_s is not None and time.monotonic() - started >= duration_s:
                break
            _send(producer, record, deliveries)
            handed += 1
            if handed % 1000 == 0 or bucket is not None:
                producer.poll(0)
                bar.update(deliveries.sent, deliveries.failed, len(producer), time.monotonic() - started)
    except KeyboardInterrupt:
        interrupted = True
    except BaseException:
        _flush(producer, bar, deliveries, started)  # what was handed over still reaches the broker
        bar.close()
        raise
    if interrupted:  # asked to stop: within a container's stop grace, not the whole message timeout
        limit_s, reason = STOP_FLUSH_S, f"not acknowledged by the broker within {STOP_FLUSH_S:g}s of the stop"
    else:
        limit_s, reason = FLUSH_LIMIT_S, "no delivery report before the flush timeout"
    undelivered = _flush(producer, bar, deliveries, started, limit_s)
    if undelivered:
        deliveries.fail(reason, undelivered)
    elapsed = time.monotonic() - started
    bar.update(deliveries.sent, deliveries.failed, 0, elapsed, force=True)
    bar.close()
    return ProduceSummary(
        sent=deliveries.sent,
        failed=deliveries.failed,
        elapsed_s=elapsed,
        rate=deliveries.sent / elapsed if elapsed > 0 else 0.0,
        errors=dict(deliveries.errors.most_common(5)),
        interrupted=interrupted,
    )


# librdkafka's poll waits whole milliseconds: asked for less, it returns at once.
POLL_GRANULARITY_S = 0.001
# Paced records wait in steps of at least this long. A wait for every record woke the process
# twice a record: at the demo's 300 records/s that took 9 % of a core, of which generating the
# records was 1 %. The bucket's debt carries the waits skipped, so the rate holds; records
# leave in bursts of at most rate x PACE_STEP_S (3 at 300 records/s).
PACE_STEP_S = 0.01


def _paced(
    records: Iterable[ProducedRecord], producer: Producer, bucket: TokenBucket | None, clock: Callable[[], float] = time.monotonic
) -> Iterator[ProducedRecord]:
    """``records``, each taken from its iterable once its turn has come (with ``bucket``): the
    generators stamp a record with the wall clock as they make it, and a wait between its stamp
    and its send would count in an event-to-alert latency."""
    pending = iter(records)
    while True:
        if bucket is not None:
            _pace(producer, bucket, clock)
        record = next(pending, None)
        if record is None:
            return
        yield record


def _pace(producer: Producer, bucket: TokenBucket, clock: Callable[[], float] = time.monotonic) -> None:
    """Take ``bucket``'s token for the next record, waiting once the wait owed reaches PACE_STEP_S."""
    delay = bucket.delay()
    if delay >= PACE_STEP_S:
        _wait(producer, clock() + delay, clock)


def _wait(producer: Producer, until: float, clock: Callable[[], float] = time.monotonic) -> None:
    """Sleep until ``until`` while serving delivery reports, a millisecond at least: a shorter
    poll returns at once, and the loop would spin a core until ``until`` (at 5,000 records/s a
    record's wait is 0.2 ms). Waiting up to a millisecond longer keeps the rate, since the
    token bucket then lets the next records go at once."""
    while (left := until - clock()) > 0:
        producer.poll(max(left, POLL_GRANULARITY_S))


def _send(producer: Producer, record: ProducedRecord, deliveries: _Deliveries) -> None:
    while True:
        try:
            producer.produce(record.topic, value=record.value, key=record.key, on_delivery=deliveries.report)
            return
        except BufferError:  # local queue full: let deliveries drain it
            producer.poll(0.05)
        except KafkaException as exc:
            deliveries.fail(reason(exc))
            return


def _flush(producer: Producer, bar: ProgressLine, deliveries: _Deliveries, started: float,
           limit_s: float = FLUSH_LIMIT_S) -> int:
    """Wait for outstanding deliveries (at most ``limit_s``); returns those still undelivered."""
    deadline = time.monotonic() + limit_s
    while len(producer) and time.monotonic() < deadline:
        producer.flush(0.25)
        bar.update(deliveries.sent, deliveries.failed, len(producer), time.monotonic() - started)
    return len(producer)
