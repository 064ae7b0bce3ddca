"""Option values shared by the project's Python data sources (Kafka, Kinesis): Spark hands
every option over as a string, and both sources refuse a malformed one with the same words."""

from __future__ import annotations

from collections.abc import Mapping


def boolean(value: str, name: str, error: type[ValueError]) -> bool:
    lowered = value.strip().lower()
    if lowered not in ("true", "false"):
        raise error(f"option {name} must be true or false, got {value!r}")
    return lowered == "true"


def positive_int(opts: Mapping[str, str], key: str, default: int | None, error: type[ValueError]) -> int | None:
    if key not in opts:
        return default
    try:
        number = int(opts[key])
    except ValueError:
        number = 0
    if number < 1:
        raise error(f"option {key} must be a positive integer, got {opts[key]!r}")
    return number
