"""Every fuzzed bad record is refused by its contract with a one-line reason, and its
dead letter fits in a default-sized Kafka record (no Spark: many examples, fast)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamstate_pipeline.contracts import DEAD_LETTER_TEXT_LIMIT, ContractError, Metric, UserEvent, dead_letter_text, parse_input
from tests.reference_rules import SourceRecord, dead_letter
from tests.reliability.bad_records import bad_record

KAFKA_DEFAULT_MAX_RECORD = 1_000_000
MODELS = {"events": UserEvent, "metrics": Metric}


def _refusal(topic: str, key: bytes | None, value: bytes | None) -> str:
    with pytest.raises(ContractError) as refused:
        parse_input(MODELS[topic], key, value)
    return refused.value.reason


FUZZ = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
any_bad_record = st.sampled_from(sorted(MODELS)).flatmap(lambda topic: st.tuples(st.just(topic), bad_record(topic, big=True)))


@FUZZ
@given(any_bad_record)
def test_bad_record_is_refused_with_a_one_line_reason(bad):
    topic, (key, value) = bad
    reason = _refusal(topic, key, value)
    assert reason.strip() and "\n" not in reason and len(reason) < 300, reason


@FUZZ
@given(any_bad_record)
def test_dead_letter_of_any_bad_record_fits_a_default_kafka_record(bad):
    topic, (key, value) = bad
    letter = dead_letter(SourceRecord(topic, 0, 7, key, value, 1), _refusal(topic, key, value))
    assert len(letter.to_json()) < KAFKA_DEFAULT_MAX_RECORD
    assert (letter.source_partition, letter.source_offset) == (0, 7)


def test_dead_letter_text_keeps_small_records_whole_and_cuts_big_ones_with_a_note():
    assert dead_letter_text(None) is None
    assert dead_letter_text(b'{"a":1}') == '{"a":1}'
    assert dead_letter_text(b"\xff\x00") == "base64:/wA="
    cut = dead_letter_text(b"y" * 500_000)
    assert cut.startswith("y" * DEAD_LETTER_TEXT_LIMIT) and not cut.startswith("y" * (DEAD_LETTER_TEXT_LIMIT + 1))
    assert "truncated: the record had 500000 bytes" in cut
    binary = dead_letter_text(b"\xff" * 300_000)
    assert binary.startswith("base64:") and "truncated: the record had 300000 bytes" in binary
