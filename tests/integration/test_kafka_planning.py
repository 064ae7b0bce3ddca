"""Driver-side offset planning and executor-side range reads, on the real broker, without Spark.

The embedded broker cannot add partitions to a topic, so partition discovery is driven
through the reader's own planning calls, exactly as the engine makes them."""

from __future__ import annotations

import pytest

from streamstate.jobs.kafka import KafkaSourceError
from streamstate.jobs.kafka.broker import PartitionView
from streamstate.jobs.kafka.options import SourceOptions
from streamstate.jobs.kafka.source import KafkaRange, KafkaStreamReader, read_range
from tests.integration.kafka_testing import produce


def reader(bootstrap: str, topic: str, **options: str) -> KafkaStreamReader:
    return KafkaStreamReader(SourceOptions.parse({"kafka.bootstrap.servers": bootstrap, "subscribe": topic, **options}))


def test_true_end_is_found_beyond_the_reported_high_watermark(bootstrap, new_topic):
    topic = new_topic(partitions=2)
    delivered = produce(bootstrap, topic, [(None, b"x" * 50, i % 2) for i in range(20_000)])
    view = PartitionView({"bootstrap.servers": bootstrap})
    try:
        tps = [(topic, 0), (topic, 1)]
        _, ends = view.ends(tps)
        assert ends == {(topic, p): max(d.offset for d in delivered if d.partition == p) + 1 for p in (0, 1)}
        # Cached per reported end, and still right after more records arrive.
        more = produce(bootstrap, topic, [(None, b"y", 0)])
        _, ends_after = view.ends(tps)
        assert ends_after[(topic, 0)] == more[0].offset + 1 and ends_after[(topic, 1)] == ends[(topic, 1)]
    finally:
        view.close()


def test_end_of_a_partition_being_written_is_never_beyond_its_records(bootstrap, new_topic):
    """While a producer writes, ends come from the first fetch (no chase) and never pass what
    exists; once it stops, the end is the true end again."""
    import threading

    topic = new_topic(partitions=1)
    delivered: list = []
    writer = threading.Thread(target=lambda: [delivered.extend(produce(bootstrap, topic, [(None, b"z", 0)] * 200)) for _ in range(25)])
    view = PartitionView({"bootstrap.servers": bootstrap})
    try:
        writer.start()
        seen = []
        while writer.is_alive():
            before = len(delivered)
            end = view.ends([(topic, 0)])[1][(topic, 0)]
            assert end <= len(delivered) + 200, "an end beyond the records written (at most one batch in flight)"
            seen.append(end >= before)
        writer.join()
        assert all(seen)
        assert view.ends([(topic, 0)])[1][(topic, 0)] == max(d.offset for d in delivered) + 1
    finally:
        view.close()


def test_partition_missing_from_the_start_offsets_is_read_from_its_beginning(bootstrap, new_topic):
    topic = new_topic(partitions=2)
    produce(bootstrap, topic, [(None, b"v", i % 2) for i in range(40)])
    source = reader(bootstrap, topic, startingOffsets="latest")
    try:
        ranges = source.partitions({topic: {"0": 20}}, {topic: {"0": 20, "1": 20}})
        assert [(r.partition, r.start, r.end) for r in ranges] == [(1, 0, 20)]
        # The next latestOffset continues from that planned end.
        produce(bootstrap, topic, [(None, b"w", 0)])
        assert source.latestOffset() == {topic: {"0": 21, "1": 20}}
    finally:
        source.stop()


def test_latest_offset_applies_the_limit_from_the_last_planned_end(bootstrap, new_topic):
    topic = new_topic(partitions=2)
    produce(bootstrap, topic, [(None, b"v", i % 2) for i in range(100)])
    source = reader(bootstrap, topic, startingOffsets="earliest", maxOffsetsPerTrigger="30")
    try:
        # A restart: the engine first plans the newest checkpointed offsets against themselves.
        assert source.partitions({topic: {"0": 10, "1": 40}}, {topic: {"0": 10, "1": 40}}) == []
        assert source.latestOffset() == {topic: {"0": 34, "1": 46}}  # backlogs 40 and 10 share 30 as 24 and 6
    finally:
        source.stop()


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_range_beyond_the_partition_end_is_data_loss(bootstrap, new_topic, fail_on_data_loss):
    topic = new_topic(partitions=1)
    produce(bootstrap, topic, [(None, f"{i}".encode(), 0) for i in range(10)])
    planned = KafkaRange(topic, 0, 3, 25, {"bootstrap.servers": bootstrap}, 30_000, fail_on_data_loss)
    if fail_on_data_loss:
        with pytest.raises(KafkaSourceError, match=rf"{topic}\[0\] ends at offset 10, below the planned end 25"):
            list(read_range(planned))
    else:
        assert [o for b in read_range(planned) for o in b.column("offset").to_pylist()] == list(range(3, 10))


def test_range_read_yields_bounded_arrow_batches_in_offset_order(bootstrap, new_topic):
    topic = new_topic(partitions=1)
    produce(bootstrap, topic, [(b"k", f"{i}".encode(), 0) for i in range(2_500)])
    planned = KafkaRange(topic, 0, 100, 2_100, {"bootstrap.servers": bootstrap}, 30_000, True)
    batches = list(read_range(planned, rows_per_batch=700))
    assert [b.num_rows for b in batches] == [700, 700, 600]
    offsets = [o for b in batches for o in b.column("offset").to_pylist()]
    assert offsets == list(range(100, 2_100))
    assert [v.decode() for b in batches for v in b.column("value").to_pylist()] == [str(o) for o in offsets]


def test_explicit_starting_offsets_must_cover_every_partition(bootstrap, new_topic):
    topic = new_topic(partitions=2)
    source = reader(bootstrap, topic, startingOffsets=f'{{"{topic}":{{"0":0}}}}')
    with pytest.raises(KafkaSourceError, match=rf"missing: {topic}\[1\]"):
        source.initialOffset()
    source.stop()
