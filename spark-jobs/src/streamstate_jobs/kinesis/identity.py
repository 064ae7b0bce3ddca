"""Which stream a checkpoint's offsets belong to: the stream's creation time.

A Kinesis stream deleted and created again under the same name gets the same shard ids
(``shardId-000000000000``, ...) and the same ARN, so the checkpoint's positions would be used
on a stream they do not belong to: a shard the checkpoint holds as read to its end would be
skipped in the new stream without a word, and an old sequence number is refused with an error
that does not say why (AWS: "did not come from this stream"; the local server:
ResourceNotFoundException), which a restart only repeats. ``StreamCreationTimestamp``
(DescribeStreamSummary) is what tells the two apart, as a topic id does for Kafka
(:mod:`streamstate_jobs.kafka.identity`). The offsets carry it (``"created"``, epoch
milliseconds, :mod:`~streamstate_jobs.kinesis.offsets`), and the driver compares it with the
stream's before planning every batch. The error is the Kafka path's
:class:`~streamstate_jobs.kafka.identity.SourceResetError`, so the runner handles it the same
way: the job stops (exit 2), or starts over with ``STREAMSTATE_ON_SOURCE_RESET=start-over``.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from streamstate_jobs.kafka.identity import SourceResetError

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
MILLISECOND = timedelta(milliseconds=1)


def epoch_ms(moment: datetime) -> int:
    """``moment`` (timezone-aware, as botocore parses timestamps) in whole epoch milliseconds.

    Integer arithmetic on the timedelta: a float detour could round the same timestamp to two
    different milliseconds, which would read as a recreated stream.
    """
    return (moment - EPOCH) // MILLISECOND


def iso_ms(ms: int) -> str:
    return (EPOCH + ms * MILLISECOND).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def check_same_stream(stream: str, recorded_ms: int | None, current_ms: int) -> None:
    """Raise :class:`SourceResetError` when the stream was created at another time than the one
    the offsets were read from; ``recorded_ms`` None (offsets from before creation times were
    recorded) has nothing to compare with."""
    if recorded_ms is None or recorded_ms == current_ms:
        return
    # Short: the runner logs a failure's first 1500 characters, and a traceback comes first.
    raise SourceResetError(
        f"Kinesis stream {stream!r} was deleted and created again since the checkpoint read it (created "
        f"{iso_ms(recorded_ms)} then, {iso_ms(current_ms)} now): the checkpoint's positions belong to the old "
        "stream. To read the new stream from its beginning, set STREAMSTATE_ON_SOURCE_RESET=start-over (the "
        "checkpoint is moved aside, state starts empty) or delete the checkpoint"
    )
