"""Fault injection into the files the jobs keep next to a checkpoint (``streamstate/engine.json``
and ``streamstate/topic-ids.json``): every kind of damage in tests/reliability/damage.py at many
offsets. Each case must end one of two ways: the file reads back exactly as written, or the job
refuses it with a message naming the file and the fix. Never another value, never a JSON
traceback. The pure cases run without Spark; the last ones go through Hadoop's FileSystem and
the real job entry point, so the message reaches the user and no query starts."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from streamstate_jobs.checkpoint_metadata import (
    CheckpointMetadataDamaged,
    decode,
    encode,
    engine_shape,
    topic_ids_shape,
)
from streamstate_jobs.checkpoints import ENGINE_FILE, ENGINE_FIX, TOPIC_IDS_FILE, TOPIC_IDS_FIX, bucket_labels
from streamstate.state.placement import balanced_labels
from tests.reliability.damage import damages_of

FILES = {
    # name: (the body the job wrote, the body a later write would put there, shape, fix)
    ENGINE_FILE: (
        {"state_buckets": 8, "bucket_labels": list(balanced_labels(8, 2))},
        {"state_buckets": 16, "bucket_labels": list(balanced_labels(16, 2))},
        engine_shape,
        ENGINE_FIX,
    ),
    TOPIC_IDS_FILE: (
        {"metrics": "q3Yh2Z0hRIaXbD7oZ9-Ubg", "user-events": "Xp0mJ5s2Q8e4cY1vT6rN3w"},
        {"metrics": "q3Yh2Z0hRIaXbD7oZ9-Ubg", "user-events": "Xp0mJ5s2Q8e4cY1vT6rN3w", "sessions": "B2kD9f7GTq6v0Lw3yZ5aHc"},
        topic_ids_shape,
        TOPIC_IDS_FIX,
    ),
}
OUTCOMES: Counter = Counter()


def _outcome(path: Path, body: dict, shape, fix: str) -> str:
    try:
        read = decode(path.read_bytes().decode("utf-8", "replace"), str(path), shape, fix)
    except CheckpointMetadataDamaged as refused:
        message = str(refused)
        assert str(path) in message and fix in message, message
        return "refused, naming the file and the fix"
    assert read == body, f"{path.name} read back as {read}, not {body}: a damaged file gave another value"
    return "read back exactly"


@pytest.mark.parametrize("name", sorted(FILES))
def test_every_damage_to_a_metadata_file_is_read_exactly_or_refused(name, tmp_path):
    body, next_body, shape, fix = FILES[name]
    rng = random.Random(name)
    path = tmp_path / Path(name).name
    path.write_text(encode(body))
    cases = list(damages_of(path, rng, offsets=12, new=encode(next_body).encode()))
    for damage in cases:
        path.write_text(encode(body))
        damage.apply(path)
        OUTCOMES[(name, damage.kind, _outcome(path, body, shape, fix))] += 1
    kinds = {damage.kind for damage in cases}
    assert kinds == {"empty", "flip", "garbage", "truncate", "torn"}, kinds
    print(f"\n{name}: {len(cases)} damages: " + ", ".join(f"{k[1]} {k[2]}: {n}" for k, n in sorted(OUTCOMES.items()) if k[0] == name))


def test_a_file_from_before_the_digest_is_still_read():
    assert decode('{"state_buckets": 64}', "engine.json", engine_shape, ENGINE_FIX) == {"state_buckets": 64}
    with pytest.raises(CheckpointMetadataDamaged, match="unexpected content"):
        decode('{"state_buckets": 64, "sha257": "0"}', "engine.json", engine_shape, ENGINE_FIX)


@pytest.mark.spark
def test_a_damaged_engine_file_stops_the_start_through_hadoop(spark, tmp_path):
    checkpoint = tmp_path / "cp"
    bucket_labels(spark, str(checkpoint), 64, 2)
    engine = checkpoint / ENGINE_FILE
    recorded = {"state_buckets": 64, "bucket_labels": list(balanced_labels(64, 2))}
    assert decode(engine.read_text(), "engine.json", engine_shape, ENGINE_FIX) == recorded
    engine.write_text(engine.read_text().replace('"state_buckets": 64', '"state_buckets": 65'))  # Hadoop's .crc disagrees too
    with pytest.raises(CheckpointMetadataDamaged, match="engine.json"):
        bucket_labels(spark, str(checkpoint), 64, 2)
    for crc in engine.parent.glob(".*.crc"):  # damage Hadoop's own checksum cannot see: ours must
        crc.unlink()
    with pytest.raises(CheckpointMetadataDamaged, match="does not match its sha256.*Restore it"):
        bucket_labels(spark, str(checkpoint), 64, 2)


@pytest.mark.spark
@pytest.mark.slow
def test_the_job_refuses_damaged_topic_ids_at_start_and_says_what_to_do(stack, tmp_path):
    settings = stack.settings.model_copy(update={"checkpoint_root": str(tmp_path / "checkpoints")})
    files = Path(settings.checkpoint("anomalies")) / "streamstate"
    files.mkdir(parents=True)
    (files / Path(TOPIC_IDS_FILE).name).write_text(encode(FILES[TOPIC_IDS_FILE][0])[:-9])  # a cut write
    job = stack.sibling(settings, tmp_path).start_job("anomalies")
    assert job.popen.wait(timeout=300) == 2, job.tail(40)
    log = job.tail(60)
    assert "topic-ids.json is damaged" in log and "Restore it from a backup" in log, log
    assert "query anomalies started" not in log, log
