"""Source options, parsed once, with the names and meanings of Spark's Kafka source.

Spark hands a Python data source its options case-insensitively (keys lower-cased), so
every lookup here is lower case; ``kafka.*`` options become librdkafka client settings.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from streamstate.jobs.kafka.offsets import EARLIEST, Offsets, describe, offsets_from_json
from streamstate.jobs.source_options import boolean, positive_int
from streamstate.kafka_clients import MANAGED_KEYS, SPARK_PREFIX, from_spark_options

CLIENT_PREFIX = SPARK_PREFIX
SOURCE_OPTIONS = (
    "subscribe",
    "startingOffsets",
    "maxOffsetsPerTrigger",
    "failOnDataLoss",
    "kafkaConsumer.pollTimeoutMs",
    "endProbeTimeoutMs",
)
# Client settings that the reader manages itself: a user value would break offset control.
RESERVED_CLIENT_SETTINGS = tuple(key for key in MANAGED_KEYS if key != "bootstrap.servers")


class KafkaOptionError(ValueError):
    """An option of the Kafka source or sink is missing or malformed."""


@dataclass(frozen=True)
class SourceOptions:
    """The Python Kafka source's options after validation."""

    topics: tuple[str, ...]
    # "earliest", "latest", or explicit offsets per partition (EARLIEST/LATEST sentinels allowed).
    starting: str | Offsets
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    client_conf: dict[str, str] = field(default_factory=dict, repr=False)  # may hold secrets
    poll_timeout_ms: int = 120_000
    end_probe_timeout_ms: int = 5_000

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "SourceOptions":
        """Validate ``options`` (as Spark passes them) or raise :class:`KafkaOptionError`."""
        opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
        known = {name.lower() for name in SOURCE_OPTIONS}
        unknown = sorted(k for k in opts if k not in known and not k.startswith(CLIENT_PREFIX))
        if unknown:
            raise KafkaOptionError(
                f"unsupported Kafka source option(s) {unknown}; supported: {list(SOURCE_OPTIONS)} and kafka.*"
            )
        client_conf = client_settings(opts)
        reserved = sorted(set(client_conf) & set(RESERVED_CLIENT_SETTINGS))
        if reserved:
            raise KafkaOptionError(f"kafka.{reserved[0]} is managed by the source and cannot be set")
        if "bootstrap.servers" not in client_conf:
            raise KafkaOptionError("option kafka.bootstrap.servers is required")
        topics = parse_topics(opts.get("subscribe", ""))
        return cls(
            topics=topics,
            starting=parse_starting_offsets(opts.get("startingoffsets", "latest"), topics),
            max_offsets_per_trigger=_positive_int(opts, "maxoffsetspertrigger", None),
            fail_on_data_loss=_boolean(opts.get("failondataloss", "true"), "failOnDataLoss"),
            client_conf=client_conf,
            poll_timeout_ms=_positive_int(opts, "kafkaconsumer.polltimeoutms", 120_000) or 120_000,
            end_probe_timeout_ms=_positive_int(opts, "endprobetimeoutms", 5_000) or 5_000,
        )


def client_settings(options: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` options without their prefix: librdkafka client settings."""
    return from_spark_options(options)


def parse_topics(subscribe: str) -> tuple[str, ...]:
    """``"a, b"`` -> ``("a", "b")``; at least one topic is required."""
    topics = tuple(dict.fromkeys(t.strip() for t in subscribe.split(",") if t.strip()))
    if not topics:
        raise KafkaOptionError("option subscribe must name at least one topic (comma-separated)")
    return topics


def parse_starting_offsets(value: str, topics: tuple[str, ...]) -> str | Offsets:
    """``earliest`` / ``latest`` / Spark's JSON ``{"topic":{"0":23,"1":-2}}`` (-2 earliest, -1 latest)."""
    text = value.strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        offsets = offsets_from_json(json.loads(text))
    except (ValueError, TypeError, AttributeError) as exc:
        raise KafkaOptionError(
            f'startingOffsets must be earliest, latest or JSON like {{"topic":{{"0":23,"1":-2}}}}: {exc}'
        ) from None
    foreign = sorted({topic for topic, _ in offsets} - set(topics))
    if foreign:
        raise KafkaOptionError(f"startingOffsets names topic(s) {foreign} that are not subscribed ({list(topics)})")
    bad = {tp: o for tp, o in offsets.items() if o < EARLIEST}
    if bad:
        raise KafkaOptionError(f"startingOffsets has invalid offsets {describe(bad)}; use >= 0, -1 (latest) or -2 (earliest)")
    return offsets


def _boolean(value: str, name: str) -> bool:
    return boolean(value, name, KafkaOptionError)


def _positive_int(opts: Mapping[str, str], key: str, default: int | None) -> int | None:
    return positive_int(opts, key, default, KafkaOptionError)

