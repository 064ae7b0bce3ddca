"""Scenario files: produced records as JSON Lines, for recording a run and replaying it.

One record per line::

    {"topic": "user-events", "kind": "event", "key": "user-0001", "value": "{...}", "malformed_reason": null}

``key`` and ``value`` hold the bytes as UTF-8 text; bytes that are not UTF-8 are stored
as ``key_base64`` / ``value_base64`` instead, so every record round-trips byte for byte.
A null key or value is ``null``.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator

from streamstate_producers.produced_record import RECORD_KINDS, ProducedRecord
from streamstate_pipeline.errors import ProducerError


class ScenarioError(ProducerError):
    """A scenario file that cannot be read; the message names the file (and line) in one line."""


def _encode_bytes(name: str, data: bytes | None) -> dict[str, Any]:
    if data is None:
        return {name: None}
    try:
        return {name: data.decode("utf-8")}
    except UnicodeDecodeError:
        return {f"{name}_base64": base64.b64encode(data).decode("ascii")}


def _decode_bytes(name: str, entry: dict[str, Any]) -> bytes | None:
    if f"{name}_base64" in entry:
        return base64.b64decode(entry[f"{name}_base64"], validate=True)
    text = entry.get(name)
    if text is not None and not isinstance(text, str):
        raise ValueError(f"'{name}' must be a string or null")
    return None if text is None else text.encode("utf-8")


def record_to_json(record: ProducedRecord) -> str:
    """One scenario line (without the newline)."""
    entry = {
        "topic": record.topic,
        "kind": record.kind,
        **_encode_bytes("key", record.key),
        **_encode_bytes("value", record.value),
        "malformed_reason": record.malformed_reason,
    }
    return json.dumps(entry, ensure_ascii=False, separators=(",", ":"))


def record_from_json(line: str) -> ProducedRecord:
    """Parse one scenario line; raises ValueError with the cause."""
    entry = json.loads(line)
    if not isinstance(entry, dict):
        raise ValueError("expected a JSON object")
    topic, kind, reason = entry.get("topic"), entry.get("kind", "event"), entry.get("malformed_reason")
    if not isinstance(topic, str) or not topic:
        raise ValueError("'topic' must be a non-empty string")
    if kind not in RECORD_KINDS:
        raise ValueError(f"'kind' must be one of {', '.join(RECORD_KINDS)}, got {kind!r}")
    if reason is not None and not isinstance(reason, str):
        raise ValueError("'malformed_reason' must be a string or null")
    return ProducedRecord(topic, _decode_bytes("key", entry), _decode_bytes("value", entry), reason, kind)


def write_scenario(path: str | Path, records: Iterable[ProducedRecord]) -> int:
    """Write records to a JSONL scenario file; returns how many were written."""
    count = 0
    try:
        with open(path, "w", encoding="utf-8") as out:
            for record in records:
                out.write(record_to_json(record) + "\n")
                count += 1
    except OSError as exc:
        raise ScenarioError(f"cannot write scenario file {path}: {exc.strerror or exc}") from None
    return count


def read_scenario(path: str | Path) -> Iterator[ProducedRecord]:
    """Records of a scenario file, lazily, in file order; blank lines are skipped.

    The file is opened before the first record is asked for, so a missing or unreadable
    file fails at the call, not later in the middle of a run. A bad line raises
    :class:`ScenarioError` naming it when the iteration reaches it.
    """
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise ScenarioError(f"cannot read scenario file {path}: {exc.strerror or exc}") from None
    return _records(path, handle)


def _records(path: str | Path, handle: BinaryIO) -> Iterator[ProducedRecord]:
    with handle:
        number = 0
        try:
            for number, raw in enumerate(handle, start=1):  # noqa: B007 - the except below names the line
                if raw.strip():
                    yield record_from_json(raw.decode("utf-8"))
        except ValueError as exc:  # also JSONDecodeError, UnicodeDecodeError and base64's binascii.Error
            raise ScenarioError(f"{path}, line {number}: not a scenario record: {exc}") from None
        except OSError as exc:
            raise ScenarioError(f"cannot read scenario file {path}: {exc.strerror or exc}") from None
