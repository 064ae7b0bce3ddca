"""The small JSON files the jobs keep next to a checkpoint (``streamstate/engine.json``,
``streamstate/topic-ids.json``), encoded so that damage is always noticed.

A wrong value in these files is worse than none: a flipped digit in the bucket count would
look up every key's state in another bucket, and a flipped character in a topic id would look
like a recreated topic (and, with ``on_source_reset=start-over``, throw the state away). So
each file carries the SHA-256 of its content, and reading checks the digest and the shape.
Damage of any kind (a flipped bit, a cut or torn write, an empty file, garbage) is a
:class:`CheckpointMetadataDamaged` naming the file and the fix, never a guess. Files written
before the digest existed are accepted when their shape is exact.

The writes themselves are atomic (``CheckpointFiles.write``: a temporary file renamed into
place, or one PUT on S3), so a crash mid-write leaves the old file or the new one.

Pure functions: no SparkSession needed to read, write or test them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from streamstate_pipeline.errors import CheckpointError
from streamstate.state.placement import are_bucket_labels

DIGEST = "sha256"


class CheckpointMetadataDamaged(CheckpointError):
    """A metadata file next to a checkpoint does not read back as the job wrote it."""


def _digest(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def encode(body: dict[str, Any]) -> str:
    """The file's text: ``body`` plus the digest of its canonical JSON."""
    if DIGEST in body:
        raise ValueError(f"a metadata body cannot use the key {DIGEST!r}")
    return json.dumps({**body, DIGEST: _digest(body)}, sort_keys=True)


def decode(text: str, where: str, shape_ok: Callable[[dict[str, Any]], bool], fix: str) -> dict[str, Any]:
    """The body ``encode`` wrote, or :class:`CheckpointMetadataDamaged` saying ``where`` and ``fix``."""

    def damaged(why: str) -> CheckpointMetadataDamaged:
        return CheckpointMetadataDamaged(f"{where} is damaged ({why}): the job does not guess what it held. {fix}")

    try:
        found = json.loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, or bytes that are not UTF-8 text
        raise damaged(f"not JSON: {' '.join(str(exc).split())[:120]}") from None
    if not isinstance(found, dict):
        raise damaged(f"a JSON {type(found).__name__}, not an object")
    body = {key: value for key, value in found.items() if key != DIGEST}
    if DIGEST in found and found[DIGEST] != _digest(body):
        raise damaged("its content does not match its sha256")
    if not shape_ok(body):
        raise damaged(f"unexpected content {json.dumps(body)[:200]}")
    return body


def engine_shape(body: dict[str, Any]) -> bool:
    """``{"state_buckets": B}``, and since balanced placement ``"bucket_labels"``: B distinct
    non-negative ints (without them, a bucket's label is its number)."""
    buckets = body.get("state_buckets")
    if not (type(buckets) is int and buckets > 0):
        return False
    if set(body) == {"state_buckets"}:
        return True
    labels = body.get("bucket_labels")
    return set(body) == {"state_buckets", "bucket_labels"} and are_bucket_labels(labels, buckets)


def topic_ids_shape(body: dict[str, Any]) -> bool:
    return all(isinstance(topic, str) and isinstance(topic_id, str) and topic_id for topic, topic_id in body.items())
