"""Driver-side view of the subscribed partitions: which exist, where each begins and truly ends.

The end offsets decide each micro-batch's range (which Spark checkpoints before any task
runs), so they are found here, on the driver; executors only read planned ranges. The
embedded broker under-reports its high watermark: :meth:`PartitionView.ends` asks
:class:`streamstate.kafka_clients.TrueEnds` for the true ends (see there for the probe).
"""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaException

from streamstate.jobs.kafka.offsets import Offsets, TopicPartitionKey
from streamstate.kafka_clients import METADATA_TIMEOUT_S, TrueEnds, probe_consumer, reason, watermarks


class KafkaSourceError(RuntimeError):
    """The subscribed topics or offsets cannot be served (unknown topic, data loss)."""


class PartitionView:
    """Partitions, earliest and true end offsets of a set of topics, for offset planning."""

    def __init__(self, client_conf: dict[str, str], probe_timeout_ms: int = 5_000) -> None:
        self._client_conf = client_conf
        self._probe_timeout_s = probe_timeout_ms / 1000
        self._consumer: Consumer | None = None
        self._true_ends: TrueEnds | None = None

    @property
    def consumer(self) -> Consumer:
        if self._consumer is None:
            self._consumer = probe_consumer(self._client_conf, "source")
            self._true_ends = TrueEnds(self._consumer, self._probe_timeout_s)
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
            self._true_ends = None

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
                result.update(watermarks(self.consumer, [(topic, partition)]))
            except KafkaException as exc:
                raise KafkaSourceError(f"cannot list offsets of {topic}[{partition}]: {reason(exc)}") from None
        return result

    def earliest(self, tps: Iterable[TopicPartitionKey]) -> Offsets:
        return {tp: low for tp, (low, _) in self.watermarks(tps).items()}

    def ends(self, tps: Iterable[TopicPartitionKey]) -> tuple[Offsets, Offsets]:
        """(earliest, true end) per partition."""
        marks = self.watermarks(tps)
        assert self._true_ends is not None  # made with the consumer
        try:
            ends = self._true_ends.of({tp: high for tp, (_, high) in marks.items()})
        except KafkaException as exc:
            raise KafkaSourceError(f"probing the end offsets failed: {reason(exc)}") from None
        return {tp: low for tp, (low, _) in marks.items()}, ends
