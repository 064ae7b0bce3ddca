"""Driver-side view of the subscribed partitions: which exist, where each begins and truly ends.

The embedded broker (Tansu) answers ListOffsets with the base offset of a partition's
last record batch, so the records of that batch lie beyond the reported high watermark,
while Fetch reports the true high watermark. :meth:`PartitionView.ends` therefore takes
the reported end (cheap) and, for every partition whose reported end moved, fetches
from it with ``enable.partition.eof``: the end-of-partition event carries the true end of an
idle partition; for a partition still being written, the first fetch response's high
watermark is taken instead of chasing the producer.
On a broker that reports correctly the probe just confirms the end (one empty fetch).

The probe lives on the driver because the end offsets decide each micro-batch's range
(which Spark checkpoints before any task runs); executors only read planned ranges.
Results are cached per reported end: a record batch never changes once written, so
an unchanged reported end means an unchanged true end, and idle partitions cost no probe.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from streamstate.jobs.kafka.offsets import Offsets, TopicPartitionKey

log = logging.getLogger(__name__)

# Must be well below the probe's poll timeout: an empty fetch waits this long before the broker answers.
PROBE_FETCH_WAIT_MS = 100
# consume() returns after this long or 10,000 messages: short, so a probe ends with its first answers.
PROBE_POLL_S = 0.02
METADATA_TIMEOUT_S = 10.0


class KafkaSourceError(RuntimeError):
    """The subscribed topics or offsets cannot be served (unknown topic, data loss)."""


def reader_conf(client_conf: dict[str, str]) -> dict[str, object]:
    """librdkafka settings for a consumer that only assigns and seeks, never joins a group."""
    return {
        **client_conf,
        # A group id is mandatory for a librdkafka consumer; no offsets are ever committed to it.
        "group.id": f"streamstate-source-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
    }


class PartitionView:
    """Partitions, earliest and true end offsets of a set of topics, for offset planning."""

    def __init__(self, client_conf: dict[str, str], probe_timeout_ms: int = 5_000) -> None:
        self._conf = reader_conf(client_conf) | {"fetch.wait.max.ms": PROBE_FETCH_WAIT_MS}
        self._probe_timeout_s = probe_timeout_ms / 1000
        self._consumer: Consumer | None = None
        self._true_end: dict[TopicPartitionKey, tuple[int, int]] = {}  # tp -> (reported end, true end)

    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(self._conf)
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def partitions(self, topics: Iterable[str]) -> tuple[list[TopicPartitionKey], list[str]]:
        """The partitions of the ``topics`` that exist, and the names of those that do not."""
        # Metadata for all topics, not per topic: asking for a topic by name can auto-create it.
        metadata = self.consumer.list_topics(timeout=METADATA_TIMEOUT_S)
        present: list[TopicPartitionKey] = []
        missing: list[str] = []
        for topic in topics:
            info = metadata.topics.get(topic)
            if info is None or info.error is not None or not info.partitions:
                missing.append(topic)
            else:
                present.extend((topic, p) for p in sorted(info.partitions))
        return present, missing

    def watermarks(self, tps: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, tuple[int, int]]:
        """(earliest, reported end) per partition, as ListOffsets answers."""
        result = {}
        for topic, partition in tps:
            try:
                result[(topic, partition)] = self.consumer.get_watermark_offsets(
                    TopicPartition(topic, partition), timeout=METADATA_TIMEOUT_S, cached=False
                )
            except KafkaException as exc:
                raise KafkaSourceError(f"cannot list offsets of {topic}[{partition}]: {exc}") from None
        return result

    def earliest(self, tps: Iterable[TopicPartitionKey]) -> Offsets:
        return {tp: low for tp, (low, _) in self.watermarks(tps).items()}

    def ends(self, tps: Iterable[TopicPartitionKey]) -> tuple[Offsets, Offsets]:
        """(earliest, true end) per partition; see the module docstring for the probe."""
        marks = self.watermarks(tps)
        earliest = {tp: low for tp, (low, _) in marks.items()}
        ends: Offsets = {}
        to_probe: dict[TopicPartitionKey, int] = {}
        for tp, (_, reported) in marks.items():
            cached = self._true_end.get(tp)
            if cached is not None and cached[0] == reported:
                ends[tp] = cached[1]
            else:
                to_probe[tp] = reported
        if to_probe:
            probed, unfinished = self._probe(to_probe)
            for tp, reported in to_probe.items():
                # A timed-out probe is not the final word on that partition: probe it again next time.
                if tp not in unfinished:
                    self._true_end[tp] = (reported, probed[tp])
            ends.update(probed)
        return earliest, ends

    def _probe(self, reported: dict[TopicPartitionKey, int]) -> tuple[Offsets, set[TopicPartitionKey]]:
        """Fetch from each reported end until the partition's first answer names a true end.

        The answer is the end-of-partition event (an idle partition: the end is confirmed) or
        records (a live one: the fetch response's high watermark is the end; chasing records
        still being produced would only delay the batch). Returns the ends found and the
        partitions whose end is not confirmed (live or timed out), which are probed again next
        time instead of being cached; an end is never beyond what exists."""
        consumer = self.consumer
        found = dict(reported)
        pending = set(reported)
        confirmed: set[TopicPartitionKey] = set()
        consumer.assign([TopicPartition(t, p, offset) for (t, p), offset in reported.items()])
        deadline = time.monotonic() + self._probe_timeout_s
        try:
            while pending and time.monotonic() < deadline:
                for message in consumer.consume(10_000, timeout=PROBE_POLL_S):
                    tp = (message.topic(), message.partition())
                    error = message.error()
                    if error is None:
                        found[tp] = max(found[tp], message.offset() + 1)
                        if tp in pending:
                            _, high = consumer.get_watermark_offsets(TopicPartition(*tp), cached=True)
                            found[tp] = max(found[tp], high)
                            pending.discard(tp)
                    elif error.code() == KafkaError._PARTITION_EOF:
                        found[tp] = max(found[tp], message.offset())
                        pending.discard(tp)
                        confirmed.add(tp)
                    elif error.code() != KafkaError._NO_OFFSET:
                        raise KafkaSourceError(f"probing the end of {tp[0]}[{tp[1]}] failed: {error.str()}")
        finally:
            consumer.unassign()
        if pending:
            log.warning("end probe timed out for %s; using the last offsets seen", sorted(pending))
        return found, set(reported) - confirmed
