"""Producer parts without a broker: scenario files, the token bucket, the progress line."""

from __future__ import annotations

import io

import pytest

from streamstate_producers.generators import MetricGenerator, ProducedRecord, UserEventGenerator
from streamstate_producers.kafka_writer import PACE_STEP_S, _pace, _paced, _wait
from streamstate_producers.pacing import ProgressLine, TokenBucket
from streamstate_producers.scenario import ScenarioError, read_scenario, write_scenario


def test_scenario_round_trips_every_record_byte_for_byte(tmp_path):
    records = [
        *UserEventGenerator(seed=9, users=20, duplicate_rate=0.1, late_rate=0.1, malformed_rate=0.3).take(400),
        *MetricGenerator(seed=9, series=5, anomaly_rate=0.05, malformed_rate=0.3, min_history=2).take(200),
        ProducedRecord("t", None, b"\xff\x00binary", "value is not valid UTF-8 (byte 0xff at position 0)", "malformed"),
        ProducedRecord("t", b"\xfe", None, "value is null", "malformed"),
    ]
    path = tmp_path / "scenario.jsonl"
    assert write_scenario(path, records) == len(records)
    assert list(read_scenario(path)) == records
    assert any(b"value_base64" in line for line in path.read_bytes().splitlines())


def test_missing_scenario_file_fails_at_the_call(tmp_path):
    with pytest.raises(ScenarioError, match=r"cannot read scenario file .*missing\.jsonl: No such file"):
        read_scenario(tmp_path / "missing.jsonl")


@pytest.mark.parametrize(
    "line, cause",
    [
        (b"{not json", "Expecting property name"),
        (b"[1, 2]", "expected a JSON object"),
        (b'{"key": "k", "value": "v"}', "'topic' must be a non-empty string"),
        (b'{"topic": "t", "kind": "weird", "value": "v"}', "'kind' must be one of"),
        (b'{"topic": "t", "value_base64": "***"}', "line 2"),
        (b'{"topic": "t", "value": 5}', "'value' must be a string or null"),
        (b'{"topic": "t", "value": "\xff"}', "utf-8"),
    ],
)
def test_bad_scenario_lines_are_named_by_line_number(tmp_path, line, cause):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"topic": "t", "key": "k", "value": "v"}\n' + line + b"\n")
    records = read_scenario(path)
    assert next(records) == ProducedRecord("t", b"k", b"v", None, "event")
    with pytest.raises(ScenarioError, match=r"bad\.jsonl, line 2: not a scenario record") as raised:
        next(records)
    assert cause in str(raised.value)
    assert "\n" not in str(raised.value)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("rate", [5.0, 300.0, 100_000.0])
def test_token_bucket_holds_the_rate_when_its_delays_are_honoured(rate):
    clock = FakeClock()
    bucket = TokenBucket(rate, clock=clock)
    sends = int(rate * 10)
    for _ in range(sends):
        clock.now += bucket.delay()
    # the first burst is free, every further record costs 1/rate seconds
    assert clock.now - 100.0 == pytest.approx((sends - bucket.capacity) / rate, rel=1e-6)


def test_token_bucket_lets_a_slow_caller_catch_up_only_by_its_burst():
    clock = FakeClock()
    bucket = TokenBucket(10.0, burst=3, clock=clock)
    clock.now += 60  # idle for a minute
    assert [bucket.delay() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.delay() == pytest.approx(0.1)


class MillisecondPoll:
    """``confluent_kafka.Producer.poll`` as librdkafka times it: whole milliseconds, so less
    than one returns at once. Refuses to be spun on."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.calls = 0

    def poll(self, timeout: float) -> int:
        self.calls += 1
        if self.calls > 100_000:
            raise AssertionError("poll spun: called again and again without waiting")
        self.clock.now += int(timeout * 1000) / 1000
        return 0


def test_a_wait_shorter_than_a_millisecond_waits_instead_of_spinning():
    clock = FakeClock()
    producer = MillisecondPoll(clock)
    _wait(producer, clock.now + 0.0002, clock)  # a record's wait at 5,000 records/s
    assert producer.calls == 1
    assert 100.0002 <= clock.now <= 100.001


@pytest.mark.parametrize("rate", [300.0, 5_000.0, 100_000.0])
def test_paced_sends_keep_the_rate_with_millisecond_waits(rate):
    clock = FakeClock()
    bucket, producer = TokenBucket(rate, clock=clock), MillisecondPoll(clock)
    sends = int(rate * 2)
    for _ in range(sends):
        _wait(producer, clock.now + bucket.delay(), clock)
    # As with exact waits (test_token_bucket_holds_the_rate_when_its_delays_are_honoured), to
    # within one wait: a longer wait is made up by the bucket's tokens, never beyond the rate.
    assert clock.now - 100.0 == pytest.approx((sends - bucket.capacity) / rate, abs=0.001)
    assert producer.calls <= 2 * sends  # a wait's whole milliseconds, then at most one more


@pytest.mark.parametrize("rate", [30.0, 300.0, 5_000.0, 100_000.0])
def test_paced_records_wait_in_steps_and_keep_the_rate(rate):
    clock = FakeClock()
    bucket, producer = TokenBucket(rate, clock=clock), MillisecondPoll(clock)
    sends = int(rate * 2)
    for _ in range(sends):
        _pace(producer, bucket, clock)
    paced_s = clock.now - 100.0
    # The rate holds, to within the one step the last records may still owe.
    assert (sends - bucket.capacity) / rate - PACE_STEP_S - 0.001 <= paced_s <= (sends - bucket.capacity) / rate + 0.001
    # At most two polls a step (its whole milliseconds, then one more), whatever the rate: a
    # wait per record polled twice a record (12 a step at 300 records/s).
    assert producer.calls <= 2 * paced_s / PACE_STEP_S + 2


def test_a_paced_record_is_made_after_its_wait_not_before():
    """The generators stamp a record with the clock as they make it: no wait may pass between
    the stamp and the hand-over (it would count in an event-to-alert latency)."""
    clock = FakeClock()
    bucket, producer = TokenBucket(300.0, clock=clock), MillisecondPoll(clock)
    stamped = (clock.now for _ in range(900))  # each record: the time it was made
    handed = [(made, clock.now) for made in _paced(stamped, producer, bucket, clock)]
    assert len(handed) == 900 and producer.calls > 0
    assert all(made == at for made, at in handed)
    assert handed[-1][1] - 100.0 >= (900 - bucket.capacity) / 300.0 - PACE_STEP_S  # and paced all the same


def test_token_bucket_refuses_a_non_positive_rate():
    with pytest.raises(ValueError, match="rate must be positive"):
        TokenBucket(0)


def test_progress_line_shows_a_bar_when_the_total_is_known():
    out = io.StringIO()
    progress = ProgressLine(out, total=200)
    progress.update(sent=100, failed=0, queued=5, elapsed_s=2.0, force=True)
    assert out.getvalue() == "[##########----------]  50%  sent 100  failed 0  in flight 5  50/s  2.0s\n"
    progress.update(sent=150, failed=0, queued=0, elapsed_s=2.5)  # too soon after the last line in a log
    assert out.getvalue().count("\n") == 1


def test_disabled_progress_line_writes_nothing():
    out = io.StringIO()
    progress = ProgressLine(out, enabled=False)
    progress.update(1, 0, 0, 1.0, force=True)
    progress.close()
    assert out.getvalue() == ""


def test_checked_in_smoke_scenario_agrees_with_the_contracts():
    from streamstate_pipeline.contracts import ContractError, Metric, UserEvent, parse_input
    from streamstate_pipeline.settings import REPO_ROOT

    records = list(read_scenario(REPO_ROOT / "infra" / "scenarios" / "smoke.jsonl"))
    assert {r.kind for r in records} == {"event", "duplicate", "late", "malformed", "metric", "anomaly"}
    for record in records:
        model = UserEvent if record.topic == "user-events" else Metric
        try:
            parse_input(model, record.key, record.value)
            reason = None
        except ContractError as exc:
            reason = exc.reason
        assert reason == record.malformed_reason
