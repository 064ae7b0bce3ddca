"""The clock-skew rule: one client with a wrong clock must not move event time for everyone.

Spark's watermark is the newest event time seen (across every key and partition) minus the
allowed lateness, so a single record stamped an hour ahead would make every on-time record
of the next hour late. A record's Kafka timestamp is set by the producing client library or
the broker (``message.timestamp.type=LogAppendTime``), not by the device that wrote ``ts``,
so the rule compares the two: an event time further ahead of the Kafka timestamp than
``max_clock_skew_ms`` is refused before it reaches the watermark, and dead-lettered with the
figures. Event times *behind* the Kafka timestamp are normal (replays, offline devices
syncing, backfills); such a record is only refused if it is behind the watermark when it
arrives (lateness, decided per key by the rules).

Pure Python: the validation step and the reference pipeline call the same function.
"""

from __future__ import annotations

STAGE = "clock_skew"


def clock_skew_reason(ts: int, kafka_ts: int | None, max_clock_skew_ms: int) -> str | None:
    """Why a record with event time ``ts`` and Kafka timestamp ``kafka_ts`` is refused, or None."""
    if kafka_ts is None or kafka_ts < 0:  # no timestamp (pre-0.10 message format): nothing to compare
        return None
    ahead = ts - kafka_ts
    if ahead <= max_clock_skew_ms:
        return None
    return (
        f"clock skew: event time {ts} ms is {ahead} ms ahead of the record's Kafka timestamp {kafka_ts} ms, "
        f"more than the allowed {max_clock_skew_ms} ms (STREAMSTATE_MAX_CLOCK_SKEW_MS); "
        "it would have moved the event-time watermark for every key"
    )
