"""The dead-letter contract's Kinesis addition leaves Kafka dead letters byte for byte as they were."""

from __future__ import annotations

import json

from streamstate_pipeline.contracts import DeadLetter

KAFKA_FIELDS = ["reason", "stage", "source_topic", "source_partition", "source_offset", "key", "value", "ts"]


def letter(**extra) -> DeadLetter:
    return DeadLetter(reason="r", stage="contract", source_topic="t", source_partition=1, source_offset=2, key=None, value="v", ts=3, **extra)


def test_a_kafka_dead_letter_has_exactly_the_kafka_fields():
    assert list(json.loads(letter().model_dump_json())) == KAFKA_FIELDS


def test_a_kinesis_dead_letter_adds_the_exact_sequence_number_and_reads_back():
    seq = "49680478993133993994988306641846787455812600058399948802"
    wire = letter(source_sequence_number=seq).model_dump_json()
    assert json.loads(wire)["source_sequence_number"] == seq
    assert DeadLetter.model_validate_json(wire).source_sequence_number == seq
    assert DeadLetter.model_validate_json(letter().model_dump_json()).source_sequence_number is None
