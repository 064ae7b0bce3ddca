"""Options of the Kinesis source, parsed once (Spark passes them lower-cased)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from streamstate_jobs.kinesis.retry import Backoff
from streamstate_jobs.source_options import boolean, positive_int
from streamstate_pipeline.errors import ConfigurationError

STARTING_POSITIONS = ("TRIM_HORIZON", "LATEST", "AT_TIMESTAMP")
OPTIONS = (
    "streamName",
    "endpointUrl",
    "region",
    "startingPosition",
    "startingTimestamp",
    "maxRecordsPerTrigger",
    "maxRecordsPerFetch",
    "failOnDataLoss",
    "retryInitialMs",
    "retryMaxMs",
    "retryTimeoutMs",
    "readTimeoutMs",
)
GET_RECORDS_MAX = 10_000  # Kinesis' own cap on GetRecords' Limit


class KinesisOptionError(ConfigurationError, ValueError):
    """An option of the Kinesis source is missing or malformed."""


@dataclass(frozen=True)
class KinesisOptions:
    stream: str
    endpoint_url: str | None = None
    region: str = "us-east-1"
    starting_position: str = "LATEST"
    starting_timestamp_ms: int | None = None
    max_records_per_trigger: int | None = None
    max_records_per_fetch: int = GET_RECORDS_MAX
    fail_on_data_loss: bool = True
    backoff: Backoff = Backoff()
    read_timeout_ms: int = 120_000

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "KinesisOptions":
        opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
        unknown = sorted(set(opts) - {o.lower() for o in OPTIONS})
        if unknown:
            raise KinesisOptionError(f"unsupported Kinesis source option(s) {unknown}; supported: {list(OPTIONS)}")
        stream = opts.get("streamname", "").strip()
        if not stream:
            raise KinesisOptionError("option streamName is required")
        position = opts.get("startingposition", "LATEST").strip().upper()
        if position not in STARTING_POSITIONS:
            raise KinesisOptionError(f"option startingPosition must be one of {list(STARTING_POSITIONS)}, got {opts['startingposition']!r}")
        timestamp = parse_timestamp_ms(opts["startingtimestamp"]) if "startingtimestamp" in opts else None
        if (position == "AT_TIMESTAMP") != (timestamp is not None):
            raise KinesisOptionError("option startingTimestamp is required with startingPosition=AT_TIMESTAMP, and only then")
        fetch = _positive_int_or(opts, "maxrecordsperfetch", GET_RECORDS_MAX)
        if fetch > GET_RECORDS_MAX:
            raise KinesisOptionError(f"option maxRecordsPerFetch must be at most {GET_RECORDS_MAX} (GetRecords' limit), got {fetch}")
        backoff = Backoff(
            initial_ms=_positive_int_or(opts, "retryinitialms", 100),
            max_ms=_positive_int_or(opts, "retrymaxms", 5_000),
            timeout_ms=_positive_int_or(opts, "retrytimeoutms", 120_000),
        )
        return cls(
            stream=stream,
            endpoint_url=opts.get("endpointurl") or None,
            region=opts.get("region", "us-east-1"),
            starting_position=position,
            starting_timestamp_ms=timestamp,
            max_records_per_trigger=_positive_int(opts, "maxrecordspertrigger", None),
            max_records_per_fetch=fetch,
            fail_on_data_loss=_boolean(opts.get("failondataloss", "true"), "failOnDataLoss"),
            backoff=backoff,
            read_timeout_ms=_positive_int_or(opts, "readtimeoutms", 120_000),
        )


def parse_timestamp_ms(text: str) -> int:
    """Epoch milliseconds, or an ISO-8601 time (UTC unless it names a zone)."""
    value = text.strip()
    if value.isdigit():
        return int(value)
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise KinesisOptionError(f"option startingTimestamp must be epoch milliseconds or ISO-8601, got {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


def _boolean(value: str, name: str) -> bool:
    return boolean(value, name, KinesisOptionError)


def _positive_int(opts: Mapping[str, str], key: str, default: int | None) -> int | None:
    return positive_int(opts, key, default, KinesisOptionError)


def _positive_int_or(opts: Mapping[str, str], key: str, default: int) -> int:
    """An option with a default: always a number."""
    value = positive_int(opts, key, default, KinesisOptionError)
    assert value is not None
    return value
