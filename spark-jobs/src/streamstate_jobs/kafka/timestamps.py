"""Input topics that would accept a record timestamp Spark's Kafka source cannot read as it is.

Spark's Kafka source turns each record's timestamp (milliseconds) into microseconds with an
exact multiplication, and a timestamp beyond +-2^63 microseconds (year 294,247) fails the task:
"has timestamp value ... that overflows when converting to Spark's microsecond-precision
TimestampType". Kafka lets a producer set any 64-bit timestamp, and Spark re-reads the same
record after every restart, so one such record stops a job for good. There is no option to skip
it. The conversion also goes through ``java.sql.Timestamp``, which shifts a time before the
Gregorian calendar (1582-10-15) by the Julian one: a dead letter would carry another time.
The broker can refuse both instead: ``message.timestamp.after.max.ms`` and ``before.max.ms``
bound how far a record's timestamp may be from the broker's clock (``infra/kafka/topics.toml``
sets both on the input topics), and ``LogAppendTime`` replaces producers' timestamps with the
broker's. At start the jobs check their input topics and warn about any that would still
accept one.

Why the job cannot read around such a record (Spark 4.2.0's connector, read in its bytecode):
``KafkaRecordToRowConverter`` converts every fetched record's timestamp while it builds the
row (``parseTimestamp``: ``DateTimeUtils.fromJavaTimestamp(new java.sql.Timestamp(ms))``, an
ArithmeticException turned into ``KafkaIllegalStateException``), before any projection, so no
choice of columns, ``includeHeaders`` or cast avoids it, and the source refuses
``kafka.interceptor.classes``, the one client hook that could rewrite a record. On a topic
without the bounds (an existing one, or one made with Kafka's defaults) the query fails on such
a record, and :mod:`streamstate_jobs.kafka.unreadable_records` dead-letters it, skips that one
offset through the checkpoint's offset log and starts the query again (issue 51); the bounds
still spare the jobs those restarts, and the Julian shift.
"""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import KafkaException
from confluent_kafka.admin import ConfigResource, ResourceType

from streamstate_pipeline.kafka_clients import KafkaConnection, admin

SPARK_LIMIT_MS = (2**63 - 1) // 1000  # the largest millisecond timestamp Spark converts
GREGORIAN_START_MS = -12_219_292_800_000  # 1582-10-15T00:00Z: earlier, Spark shifts the time
TIMEOUT_S = 10.0


def exposed_reason(config: dict[str, str], now_ms: int) -> str | None:
    """Why a topic with this configuration accepts an unreadable timestamp; None when it cannot."""
    if config.get("message.timestamp.type") == "LogAppendTime":
        return None
    legacy = int(config.get("message.timestamp.difference.max.ms", 2**63 - 1))
    after = min(int(config.get("message.timestamp.after.max.ms", legacy)), legacy)
    before = min(int(config.get("message.timestamp.before.max.ms", legacy)), legacy)
    if now_ms + after <= SPARK_LIMIT_MS and now_ms - before >= GREGORIAN_START_MS:
        return None
    return (
        f"message.timestamp.after.max.ms={after} and before.max.ms={before} let a producer set a timestamp after "
        f"{SPARK_LIMIT_MS} ms, which Spark's Kafka source cannot convert (the query fails on such a record; the job "
        "dead-letters it, skips it and restarts the query), or before 1582-10-15, which it shifts by the Julian calendar. Set after.max.ms to "
        "9000000000000000 and before.max.ms to 3155760000000 (100 years) or less, as infra/kafka/topics.toml does, "
        "or message.timestamp.type=LogAppendTime"
    )


def exposed_topics(broker: KafkaConnection, topics: Iterable[str], now_ms: int) -> dict[str, str]:
    """Topic -> :func:`exposed_reason`, for the topics whose configuration could be read."""
    client = admin(broker)  # held until the futures are resolved
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in sorted(set(topics))]
    exposed = {}
    for resource, future in client.describe_configs(resources, request_timeout=TIMEOUT_S).items():
        try:
            entries = future.result(TIMEOUT_S)
        except (KafkaException, TimeoutError):
            continue  # a missing topic or a broker not answering: the source reports either
        reason = exposed_reason({name: entry.value for name, entry in entries.items() if entry.value is not None}, now_ms)
        if reason is not None:
            exposed[resource.name] = reason
    return exposed
