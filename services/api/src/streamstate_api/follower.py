"""The follower: a thread that brings the view up to date with the state and alert topics
(from the offsets in the view's store, or from the start when the store is new), then keeps
it current, and says when it has caught up and, while it catches up, how far it is.

"Caught up" means: every partition consumed up to the end offset it had when the
follower started. Before resuming from stored offsets the follower checks them against
the topics: a topic recreated since (its topic id changed) or offsets past a partition's
end (a broker that lost its data) make the stored view stale, and it is rebuilt.

The end offsets at start are the partitions' ends as the broker reports them (ListOffsets, at
the isolation level the follower reads with: the last stable offset by default).
Partitions are ``assign()``-ed, never ``subscribe()``-d: no group rebalance, so start-up
is immediate.

The thread never dies on a broker problem: it reports the reason through
:meth:`ViewFollower.readiness` and the ``ready``/``broker_up`` gauges and tries again.

Readiness is not a latch (issue 51: a follower that retried one batch for ever, or whose
thread had ended, left /readyz at 200 "caught up"). Each completed step of the consuming
loop (what it consumed is applied, or nothing was there to consume) stamps the time; a
follower whose last step is older than ``api_follower_stall_s`` is reported stuck, and a
follower thread that has ended is reported stopped, by /readyz and by the ``ready`` gauge
(computed when scraped), and by /healthz, since nothing short of a restart brings it back.

A damaged store is replaced on this thread, off the serving loop (only the detaching of the
damaged store, an assignment, runs there: requests read the store without locks); a
replacement that fails is reported and tried again, never the end of the thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar, cast
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient

from streamstate_api.broadcast import AlertBroadcaster
from streamstate_api.metrics import ApiMetrics
from streamstate_api.record_contracts import Source, decode, fast_record
from streamstate_api.store import StoreDamaged, view_identity
from streamstate_api.view import Consumed, StateView
from streamstate_pipeline.contracts import ContractError
from streamstate_pipeline.errors import ApiError
from streamstate_pipeline.kafka_clients import UNANSWERED, admin, end_offsets, reader_config, reason
from streamstate_pipeline.settings import Settings

log = logging.getLogger("streamstate_api.follower")
_T = TypeVar("_T")

# The most records one read takes: a store write each, and what a test of the reads sizes its input by.
READ_BATCH = 5000
_POLL_S = 0.2
_LAG_REFRESH_S = 5.0
_GRAVE_PRUNING_S = 600.0  # a scan of the graves: rare, since only their count grows meanwhile
_PROGRESS_LOG_S = 5.0
_BETWEEN_READS_WAIT_S = 30.0  # for the serving loop to run a callback: it runs one between requests
_BROKER_DOWN_CODES = UNANSWERED - {KafkaError._TIMED_OUT}  # the consumer's error callback: one slow answer is no outage
# A wait for the broker looks this often whether the API is stopping (_unless_stopping): as
# often as the consuming loop does, and a broker slow to answer gets a request at most this often.
_STOP_CHECK_S = _POLL_S


def next_records(consumer: Consumer, wait_s: float = _POLL_S) -> list[Message]:
    """What the consumer holds, up to ``READ_BATCH`` records, returned as soon as there is anything;
    waiting up to ``wait_s`` for a first record only when it holds none.

    ``consume(READ_BATCH, timeout)`` would wait for a whole batch or the whole timeout: once caught
    up, at a few hundred records a second every snapshot waited up to the timeout before the
    API served it, and a rebuild's last batch (fewer than ``READ_BATCH`` left) waited the timeout
    out, as did every batch the consumer's queue was short of while a fetch was in flight.
    While catching up the queue is full, so batches stay whole and carry the rebuild's rate."""
    held = consumer.consume(READ_BATCH, timeout=0)
    if held:
        return held
    first = consumer.consume(1, timeout=wait_s)
    return first + consumer.consume(READ_BATCH - 1, timeout=0) if first else first


def source_topics(settings: Settings) -> dict[Source, str]:
    """The topic each source of the view is read from."""
    return {
        Source.SESSIONS: settings.topic_session_state,
        Source.SERIES: settings.topic_metric_state,
        Source.ALERTS: settings.topic_alerts,
    }


@dataclass(frozen=True)
class Readiness:
    """Whether the view is complete enough to serve, and if not, why."""

    ready: bool
    reason: str
    remaining: dict[str, dict[str, int]] = field(default_factory=dict)


class _StartFailed(ApiError):
    """A start-up step that cannot complete yet (missing topic); retried after a pause."""


class _Stopping(ApiError):
    """The API is stopping: a wait for the broker gives up at once instead of at its timeout."""


class ViewFollower(threading.Thread):
    """Consumes the view's topics into ``view`` until :meth:`stop`."""

    def __init__(
        self,
        settings: Settings,
        view: StateView,
        metrics: ApiMetrics,
        broadcaster: AlertBroadcaster,
        rebuild_reason: str | None = None,
    ):
        super().__init__(name="view-follower", daemon=True)
        self._settings = settings
        self._view = view
        self._metrics = metrics
        self._broadcaster = broadcaster
        self._topics = source_topics(settings)
        self._source_of = {topic: source for source, topic in self._topics.items()}
        self._stopping = threading.Event()
        self._state_lock = threading.Lock()
        self._targets: dict[tuple[str, int], int] | None = None
        self._done_at_eof: set[tuple[str, int]] = set()
        self._caught_up = False
        self._broker_up = False
        self._problem = f"connecting to Kafka at {settings.bootstrap_servers}"
        self._known_ends: dict[tuple[str, int], int] = {}  # after the last record consumed, per partition
        # Where the consumer last reached a partition's end (librdkafka's end-of-partition offset).
        self._eof_at: dict[tuple[str, int], int] = {}
        # Why the view starts from offset 0 (None: it resumes from the stored offsets).
        self._rebuild_reason = rebuild_reason if rebuild_reason is not None or not view.empty else "the store is empty"
        self._progress_start: tuple[float, int] | None = None  # (monotonic time, records left) when catching up began
        self._next_progress_log = 0.0
        self._fetch_wait_s = 0.0  # time spent waiting for records while catching up (logged when caught up)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stepped_at = time.monotonic()  # when the consuming loop last completed a step
        self._last_error: str | None = None  # why the last attempt to follow failed, until a step completes
        self._ended: str | None = None  # why the thread ended, when it did
        # The end offsets asked (the targets, the lag's) are the ones the consumer reads up to.
        self._read_committed = self._config().get("isolation.level") == "read_committed"
        self._metrics.ready.set_function(lambda: 1 if self.readiness().ready else 0)
        self._metrics.broker_up.set(0)

    # ------------------------------------------------------------------ public
    def swap_on(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop that serves requests: a damaged store is replaced there, between requests."""
        self._loop = loop

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stopping.set()
        if self.is_alive():
            self.join(timeout_s)

    def is_ready(self) -> bool:
        """Caught up and the broker answering (cheap: every answer's freshness asks)."""
        return self._caught_up and self._broker_up

    def stopped(self) -> str | None:
        """Why the follower thread has ended, once it has (None while it runs or before it starts)."""
        if self.ident is None or self.is_alive():
            return None
        why = self._ended or "stopped"
        return f"the view follower thread has stopped ({why}): the view no longer follows the topics; restart the API"

    def readiness(self) -> Readiness:
        stopped = self.stopped()
        if stopped is not None:
            return Readiness(False, stopped)
        with self._state_lock:
            caught_up, broker_up, problem, targets = self._caught_up, self._broker_up, self._problem, self._targets
        if caught_up and broker_up:
            idle = time.monotonic() - self._stepped_at
            if idle > self._settings.api_follower_stall_s:
                return Readiness(False, (
                    f"the view follower has made no progress for {idle:,.0f} s (STREAMSTATE_API_FOLLOWER_STALL_S is "
                    f"{self._settings.api_follower_stall_s:g}): "
                    + (f"each attempt fails ({self._last_error})" if self._last_error else "blocked in a step of consuming or applying records")
                ))
            return Readiness(True, "caught up with the topics' end offsets at start")
        if not broker_up:
            return Readiness(False, problem)
        if targets is None:
            return Readiness(False, problem)
        remaining = self._remaining(targets)
        return Readiness(False, self._progress(remaining), remaining)

    def _how(self) -> str:
        """Why the view is catching up, and from where."""
        if self._rebuild_reason:
            return f"rebuilding the view from the start of the topics ({self._rebuild_reason})"
        return "catching up from the offsets in the view's store"

    def _progress(self, remaining: dict[str, dict[str, int]]) -> str:
        """How far catching up is: records done and left, rate, time left, and why from where."""
        left = sum(n for parts in remaining.values() for n in parts.values())
        how = self._how()
        start = self._progress_start
        if start is None:
            return f"{how}: {left:,} records left before the end offsets seen at start"
        total = max(start[1], left)
        done = total - left
        elapsed = time.monotonic() - start[0]
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = f", about {left / rate:,.0f} s left" if rate > 0 else ""
        percent = 100.0 * done / total if total else 100.0
        return f"{how}: {done:,} of {total:,} records ({percent:.0f}%), {rate:,.0f} records/s{eta}"

    # ------------------------------------------------------------------ thread
    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # the loop catches every Exception: this is the thread's end
            self._ended = repr(exc)
            log.critical("view follower stopped: %r; the view no longer follows the topics", exc)
            raise

    def _run(self) -> None:
        while not self._stopping.is_set():
            # Damage found by a request, by our own reads, or left by a replacement that failed.
            if self._view.damage is not None and not self._replace_damaged():
                self._stopping.wait(self._settings.api_retry_s)
                continue
            try:
                self._follow()
            except _Stopping:
                return
            except StoreDamaged:
                continue  # replaced at once, above
            except (KafkaException, _StartFailed) as exc:
                self._last_error = self._describe(exc)
                self._set_broker(isinstance(exc, _StartFailed), self._describe(exc))
                log.warning("view follower: %s; retrying in %.1fs", self._problem, self._settings.api_retry_s)
            except Exception as exc:  # a bug must not end the thread silently and leave readyz stuck
                log.exception("view follower failed; retrying")
                self._last_error = f"follower error: {exc!r}"
                self._set_broker(self._broker_up, self._last_error)
            self._stopping.wait(self._settings.api_retry_s)

    def _follow(self) -> None:
        consumer = Consumer(self._config())
        ends_client = admin(self._settings.kafka)  # end offsets: never through the fetching consumer (_refresh_lag)
        try:
            partitions = self._discover(consumer)
            if self._targets is None:
                targets = self._end_offsets(ends_client, partitions)
                self._check_store(targets)
                for source, topic in self._topics.items():
                    self._view.track(source, [p for (t, p) in targets if t == topic])
                remaining = self._remaining(targets)
                left = sum(n for parts in remaining.values() for n in parts.values())
                self._view.expect(left)
                with self._state_lock:
                    self._targets = targets
                    self._progress_start = (time.monotonic(), left)
                log.info("view follower: %s", self._progress(remaining))
            # After a retry, resume where the view stands instead of re-reading from the start.
            consumer.assign([self._resume_point(tp) for tp in partitions])
            next_lag_refresh = next_grave_pruning = 0.0
            while not self._stopping.is_set():
                if self._view.damage is not None:  # found by a request, or by our own reads
                    raise StoreDamaged(self._view.damage)
                waited = time.monotonic()
                messages = next_records(consumer)
                self._fetch_wait_s += time.monotonic() - waited
                if messages:
                    batch = self._consumed(messages)
                    if batch:  # not only end-of-partition events
                        self._apply(batch)
                if not self._caught_up:
                    self._log_progress()
                    self._check_caught_up()
                # Not while catching up: /readyz already says what is left.
                if self._caught_up and time.monotonic() >= next_lag_refresh:
                    self._refresh_lag(ends_client, partitions)
                    next_lag_refresh = time.monotonic() + _LAG_REFRESH_S
                if self._caught_up and time.monotonic() >= next_grave_pruning:
                    self._prune_graves()
                    next_grave_pruning = time.monotonic() + _GRAVE_PRUNING_S
                self._stepped_at = time.monotonic()  # consumed records applied, or none there
                self._last_error = None
        finally:
            consumer.close()

    def _prune_graves(self) -> None:
        pruned = self._view.prune_graves(self._settings.api_grave_retention_ms)
        if pruned:
            log.info("view follower: forgot %d deleted keys older than the grave retention; %d kept", pruned, self._view.graves())

    # ------------------------------------------------------------------ start-up
    def _config(self) -> dict:
        return reader_config(
            self._settings.kafka,
            "api",
            error_cb=self._on_kafka_error,
            **{
                # Catching up reads whole topics: large fetches, fewer round trips (measured 166k -> 244k records/s).
                "max.partition.fetch.bytes": 16 << 20,
                "fetch.max.bytes": 64 << 20,
                # Once its local queue holds queued.min.messages (100,000), librdkafka waits this long
                # before fetching again: 1 s by default, which capped a catch-up near 150,000 records/s
                # whatever the follower's speed (issue 54: consuming alone went 150k -> 1M records/s).
                # The queue stays bounded by queued.max.messages.kbytes (64 MB) all the same.
                "fetch.queue.backoff.ms": 10,
                "socket.timeout.ms": 10_000,
            },
        )

    def _discover(self, consumer: Consumer) -> list[TopicPartition]:
        metadata = self._unless_stopping(lambda wait_s: consumer.list_topics(timeout=wait_s), 5)
        self._set_broker(True, "reading partition metadata")
        missing = [t for t in self._topics.values() if t not in metadata.topics or metadata.topics[t].error]
        if missing:
            raise _StartFailed(f"topic(s) {', '.join(missing)} do not exist yet")
        partitions = []
        for topic in self._topics.values():
            partitions += [TopicPartition(topic, p) for p in sorted(metadata.topics[topic].partitions)]
        return partitions

    def _topic_ids(self) -> dict[str, str]:
        """Kafka topic ids (brokers since Kafka 2.8 have them); empty where the broker has none.
        A lookup that fails is retried (readyz says why): taken as "no id", a recreated topic
        would go unnoticed."""
        ids = {}
        client = admin(self._settings.kafka)  # held until the futures are resolved: a collected client fails them
        for topic, future in client.describe_topics(TopicCollection(list(self._topics.values()))).items():
            try:
                topic_id = self._answer(future, 10).topic_id
            except (KafkaException, TimeoutError) as exc:  # retried by run()
                raise _StartFailed(f"reading the topic id of {topic}: {self._describe(exc)}") from None
            if topic_id is not None:
                ids[topic] = str(topic_id)
        return ids

    def _check_store(self, ends: dict[tuple[str, int], int]) -> None:
        """Rebuild when the stored view cannot belong to these topics: a topic whose id changed,
        a stored partition the topic no longer has, or an offset past its end."""
        ids = self._topic_ids()
        stored_ids = self._view.topic_ids()
        changed = [t for t, i in ids.items() if stored_ids.get(t) not in (None, i)]
        if changed and not self._view.empty:
            # One atomic write clears the view and records the new ids: killed at any point, the
            # store holds either the old view with the old ids (checked again) or neither.
            self._stale(f"topic(s) {', '.join(changed)} were recreated since the store was built (new topic id)", ids)
            return
        self._view.remember_topic_ids(ids)
        if self._view.empty:
            return
        for (source, partition), offset in self._view.stored_positions().items():
            topic = self._topics[source]
            end = ends.get((topic, partition))
            if end is None or offset > end:
                where = "does not exist" if end is None else f"ends at offset {end}"
                self._stale(
                    f"the store had consumed {topic}[{partition}] up to offset {offset}, but that partition {where}: "
                    "the topic was recreated or emptied since"
                )
                return

    def _stale(self, reason: str, topic_ids: dict[str, str] | None = None) -> None:
        log.warning("view follower: %s; rebuilding the view", reason)
        self._eof_at.clear()
        self._view.reset(topic_ids)
        self._rebuild_reason = reason

    def _replace_damaged(self) -> bool:
        """:meth:`_rebuild_damaged`; False (and /readyz says why) when it failed: tried again later."""
        try:
            self._rebuild_damaged()
            return True
        except Exception as exc:  # noqa: BLE001 - a disk or permission problem: reported, and retried
            log.exception("view follower: replacing the damaged store failed; retrying in %.1fs", self._settings.api_retry_s)
            self._last_error = f"replacing the damaged view store failed ({exc})"
            with self._state_lock:
                self._problem = f"{self._last_error}; retrying"
            return False

    def _rebuild_damaged(self) -> None:
        """Replace a damaged store with an empty one and start over from the topics' beginning."""
        reason = f"the store was damaged: {self._view.damage}"
        with self._state_lock:
            self._caught_up = False
            self._targets = None
            self._problem = f"{reason}; setting it aside and creating an empty store"
        log.warning("view follower: %s; replacing it", reason)
        self._view.replace_damaged_store(view_identity(self._topics), self._between_reads)
        self._eof_at.clear()
        with self._state_lock:
            self._targets = None
            self._caught_up = False
            self._done_at_eof.clear()
            self._progress_start = None
            self._rebuild_reason = reason
            self._problem = self._how()
        log.warning("view follower: %s; rebuilding the view from the topics", reason)

    def _between_reads(self, action: Callable[[], None]) -> None:
        """Run ``action`` (a few assignments) on the loop that serves requests, where no request
        is mid-read, and wait for it; a loop that does not get to it in time is an error of this
        attempt (the replacement is tried again), never the end of the thread."""
        loop = self._loop
        if loop is None or not loop.is_running():
            action()
            return
        done: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            try:
                action()
                done.set_result(None)
            except BaseException as exc:  # noqa: BLE001 - handed back to the follower's thread
                done.set_exception(exc)

        loop.call_soon_threadsafe(run)
        try:
            done.result(timeout=_BETWEEN_READS_WAIT_S)
        except concurrent.futures.TimeoutError:
            raise _StartFailed(
                f"the serving loop did not detach the damaged store within {_BETWEEN_READS_WAIT_S:.0f} s"
            ) from None

    def _end_offsets(self, ends_client: AdminClient, partitions: list[TopicPartition]) -> dict[tuple[str, int], int]:
        with self._state_lock:
            # Keeps why the view catches up (a damaged store, say): /readyz shows it at every step.
            self._problem = f"{self._how()}: reading the topics' end offsets"
        return end_offsets(ends_client, [(p.topic, p.partition) for p in partitions], 5, self._read_committed, self._answer)

    def _resume_point(self, tp: TopicPartition) -> TopicPartition:
        position = self._view.positions(self._source_of[tp.topic]).get(tp.partition, 0)
        return TopicPartition(tp.topic, tp.partition, position if position > 0 else OFFSET_BEGINNING)

    # ------------------------------------------------------------------ steady state
    def _advance_known_ends(self, last: dict) -> None:
        """Past each (topic, partition)'s highest offset a consumed batch held (once per batch)."""
        known = self._known_ends
        for where, offset in last.items():
            if offset >= known.get(where, 0):
                known[where] = offset + 1

    def _consumed(self, messages: list[Message]) -> list[Consumed]:
        """The consumed records validated inline, as the view's records (None for a bad one, which
        is counted and explained); end-of-partition and error events are handled here. Once per
        record of a rebuild: no helper calls but the decoding."""
        batch: list[Consumed] = []
        append = batch.append
        source_of = self._source_of
        last: dict = {}  # the highest offset consumed per (topic, partition)
        for message in messages:
            error = message.error()
            if error is not None:
                self._on_message_error(message, error)
                continue
            # A message without an error always has its coordinates (librdkafka's types say Optional).
            topic, partition, offset = message.topic(), message.partition(), message.offset()
            source = source_of[topic]  # type: ignore[index]
            key, value = message.key(), message.value()
            record = fast_record(source, key, value)
            if record is None:  # a tombstone, an alert, or refused by the fast check: the strict check decides
                try:
                    record = decode(source, key, value)
                except ContractError as exc:
                    self._bad_record(source, partition, offset, exc.reason)  # type: ignore[arg-type]
            append((source, partition, offset, record))  # type: ignore[arg-type]
            where = (topic, partition)
            if offset >= last.get(where, -1):
                last[where] = offset
        self._advance_known_ends(last)
        return batch

    def _apply(self, batch: list[Consumed]) -> None:
        if batch:
            self._set_broker(True, self._problem)
        try:
            new_alerts = self._view.apply(batch)
        except StoreDamaged:
            raise
        except Exception:  # noqa: BLE001 - one record the view cannot apply must not stop the others
            new_alerts = self._apply_one_at_a_time(batch)
        for alert in new_alerts:
            self._metrics.alerts_seen.labels(alert.kind).inc()
        self._broadcaster.publish(new_alerts)

    def _apply_one_at_a_time(self, batch: list[Consumed]) -> list:
        """A batch the view refused, applied record by record: a record it cannot apply (one the
        store cannot hold, say) is a bad record, counted and consumed, and the others go on.
        Retrying the whole batch instead would fail the same way for ever (issue 51). A write that
        fails is no record's fault: :class:`StoreDamaged` still rebuilds the store."""
        new_alerts = []
        for source, partition, offset, record in batch:
            try:
                new_alerts += self._view.apply([(source, partition, offset, record)])
            except StoreDamaged:
                raise
            except Exception as exc:  # noqa: BLE001 - this record's fault: counted as bad, the rest go on
                self._bad_record(source, partition, offset, f"the view cannot store it ({exc!r})")
                self._view.apply([(source, partition, offset, None)])
        return new_alerts

    def _bad_record(self, source: Source, partition: int, offset: int, why: str) -> None:
        topic = self._topics[source]
        self._metrics.bad_records.labels(topic).inc()
        log.warning("bad record skipped: %s[%d]@%d: %s", topic, partition, offset, why)

    def _on_message_error(self, message: Message, error: KafkaError) -> None:
        if error.code() == KafkaError._PARTITION_EOF:
            # An end reached at or past the target counts even if the last offsets were compacted away.
            where = (cast(str, message.topic()), cast(int, message.partition()))  # an EOF event names its partition
            self._eof_at[where] = cast(int, message.offset())
            target = (self._targets or {}).get(where)
            if target is not None and cast(int, message.offset()) >= target:
                self._done_at_eof.add(where)
            return
        log.warning("consumer error on %s[%s]: %s", message.topic(), message.partition(), error.str())

    def _remaining(self, targets: dict[tuple[str, int], int], applied: bool = False) -> dict[str, dict[str, int]]:
        """Records left before ``targets``, per topic and partition: from the positions a restart
        would resume from (the progress reported never runs ahead of what a kill keeps), or from
        the view's own when ``applied``."""
        remaining: dict[str, dict[str, int]] = {}
        for source, topic in self._topics.items():
            positions = self._view.positions(source)
            kept = positions if applied else self._view.kept_positions(source)
            for (target_topic, partition), end in targets.items():
                if target_topic != topic:
                    continue
                position = kept.get(partition, 0)
                # A partition whose end was reached counts as done (its last offsets may have been
                # compacted away) once all that was applied of it is kept.
                if (topic, partition) in self._done_at_eof and position >= positions.get(partition, 0):
                    continue
                left = end - position
                if left > 0:
                    remaining.setdefault(topic, {})[str(partition)] = left
        return remaining

    def _check_caught_up(self) -> None:
        if self._targets is not None and not self._remaining(self._targets, applied=True):
            self._view.rebuilt()  # the rebuild's last writes into the store's tables: part of its time
            started = self._progress_start
            took = ""
            if started is not None:  # before readiness, which is what a reader of them waits for
                seconds = time.monotonic() - started[0]
                self._metrics.catch_up_seconds.set(seconds)
                self._metrics.catch_up_records.set(started[1])
                took = (
                    f" in {seconds:.1f}s ({started[1]:,} records, {started[1] / max(seconds, 1e-9):,.0f}/s, "
                    f"{self._fetch_wait_s:.1f}s of it waiting for records)"
                )
            with self._state_lock:
                self._caught_up = True
            log.info("view follower: caught up%s (%s)", took, self._view.sizes())
            self._publish_ready()

    def _log_progress(self) -> None:
        if self._caught_up or self._targets is None or time.monotonic() < self._next_progress_log:
            return
        self._next_progress_log = time.monotonic() + _PROGRESS_LOG_S
        log.info("view follower: %s", self._progress(self._remaining(self._targets)))

    def _refresh_lag(self, ends_client: AdminClient, partitions: list[TopicPartition]) -> None:
        """End offset minus the view's position, per partition. On a topic written in transactions
        each commit marker takes an offset no record has, so a view holding every record stays
        behind the end; where the consumer reached the partition's end past every record the view
        holds, that end is the position (lag 0): the markers were read past, not left behind.

        The ends are asked of an admin client, all partitions at once: asked of the follower's
        consumer, each waited behind its fetch in flight (up to 500 ms when nothing is new), and
        the follower, holding its next records, spent seconds a refresh there (issue 54)."""
        ends = end_offsets(ends_client, [(tp.topic, tp.partition) for tp in partitions], 2, self._read_committed, self._answer)
        for tp in partitions:
            key = (tp.topic, tp.partition)
            reported_end = ends[key]
            position = self._view.positions(self._source_of[tp.topic]).get(tp.partition, 0)
            if position >= self._known_ends.get(key, 0):  # every record consumed is in the view
                position = max(position, self._eof_at.get(key, 0))
            end = max(reported_end, self._known_ends.get(key, 0), (self._targets or {}).get(key, 0))
            self._metrics.consumer_lag.labels(tp.topic, str(tp.partition)).set(max(end - position, 0))
        self._set_broker(True, self._problem)

    # ------------------------------------------------------------------ broker state
    def _unless_stopping(self, ask: Callable[[float], _T], timeout_s: float) -> _T:
        """``ask(wait_s)`` asked again in waits of ``_STOP_CHECK_S`` until the broker answers or
        ``timeout_s`` has passed (then the last failure is raised); :class:`_Stopping` once the
        API stops. A librdkafka call blocks for all of its timeout while the broker does not
        answer, and a SIGTERM waited for it (5 s with a broker that never answers)."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self._stopping.is_set():
                raise _Stopping("the API is stopping")
            try:
                return ask(min(_STOP_CHECK_S, max(deadline - time.monotonic(), 0.01)))
            except (KafkaException, TimeoutError) as exc:
                unanswered = isinstance(exc, TimeoutError) or exc.args[0].code() in UNANSWERED
                if not unanswered or time.monotonic() >= deadline:
                    raise

    def _answer(self, future: concurrent.futures.Future, timeout_s: float):
        """The admin client's answer, waited for as :meth:`_unless_stopping` waits."""
        return self._unless_stopping(lambda wait_s: future.result(timeout=wait_s), timeout_s)

    def _on_kafka_error(self, error: KafkaError) -> None:
        if error.code() in _BROKER_DOWN_CODES:
            self._set_broker(False, f"Kafka at {self._settings.bootstrap_servers} unreachable: {reason(error)}")

    def _set_broker(self, up: bool, problem: str) -> None:
        with self._state_lock:
            self._broker_up = up
            self._problem = problem
        self._publish_ready()

    def _publish_ready(self) -> None:
        self._metrics.broker_up.set(1 if self._broker_up else 0)  # ``ready`` is computed when scraped

    def _describe(self, exc: Exception) -> str:
        if isinstance(exc, KafkaException):
            return f"Kafka at {self._settings.bootstrap_servers} unreachable: {reason(exc)}"
        return str(exc)
