"""Valid but hostile input through both jobs on real Spark: seeded random records that
honour the contracts at their limits (numbers at ±1e308 and 1e200, subnormals, signed
zeros, any finite double, integers as large as a double holds, ids of any Unicode up to
1,024 characters, page strings that fill a record to the broker's 1 MB limit, clocks far ahead of the Kafka timestamp, re-sent
copies with and without a changed ts). The queries never fail, every
record is either applied or dead-lettered exactly once, and every output equals the
plain-Python reference.

Event times stay within four minutes of each other (under the five-minute watermark delay),
so no record can be late whatever the batch cuts: lateness is the job's to decide, and the
reference does not model it.
"""

from __future__ import annotations

import json
import os
import random
import struct
from collections import Counter

import pytest

from streamstate_pipeline.contracts import EVENT_TYPES, ID_MAX_CHARS, DeadLetter
from streamstate_producers.produced_record import ProducedRecord
from tests.reliability.conftest import LARGE
from tests.scenario import Scenario, differences, produce_scenario, read_topic, run_jobs_in_process

pytestmark = pytest.mark.spark

PER_TOPIC = 400 if LARGE else 150
# One seeded draw per run (each Spark run costs a minute); set the variable to explore others.
SEED = int(os.environ.get("RELIABILITY_FUZZ_SEED", "20261123"))
BASE_TS = 1_700_000_000_000
SPREAD_MS = 4 * 60_000
KAFKA_TS = BASE_TS + SPREAD_MS  # the relay's clock: at or after every honest event time
# 980,000 bytes of UTF-8: the record fills Kafka's and librdkafka's default 1 MB record limit.
PAGE_CHARS = 490_000

EXTREME_NUMBERS = [1e308, -1e308, 1.7976931348623157e308, 1e200, -1e200, 5e-324, -5e-324, 0.0, -0.0, 10**300, -(10**300)]
# Any Unicode a JSON string can carry, lone surrogates aside (they cannot be UTF-8 encoded).
CODE_POINTS = [*range(0x20, 0xD800), *range(0xE000, 0x110000)]


def number(rng: random.Random) -> float | int:
    pick = rng.random()
    if pick < 0.5:
        return rng.choice(EXTREME_NUMBERS)
    if pick < 0.75:
        return struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64) & ~(0x7FF << 52) | (rng.randrange(0x7FF) << 52)))[0]
    return rng.randint(-(2**63), 2**63)


def text(rng: random.Random, length: int) -> str:
    return "".join(chr(rng.choice(CODE_POINTS)) for _ in range(length))


def identifier(rng: random.Random) -> str:
    return text(rng, ID_MAX_CHARS if rng.random() < 0.1 else rng.randint(1, 40))


def event_time(rng: random.Random, skewed_share: float) -> int:
    if rng.random() < skewed_share:  # a client clock from a minute to a year fast
        return KAFKA_TS + rng.randint(61_000, 365 * 86_400_000)
    return BASE_TS + rng.randint(0, SPREAD_MS)


def _record(topic: str, key: str, body: dict) -> ProducedRecord:
    return ProducedRecord(topic, key.encode(), json.dumps(body, ensure_ascii=False).encode(), None, "normal")


def user_event(rng: random.Random, user: str) -> ProducedRecord:
    body = {"event_id": identifier(rng), "user_id": user, "type": rng.choice(EVENT_TYPES), "ts": event_time(rng, 0.05)}
    if rng.random() < 0.5:
        body["amount"] = number(rng)
    if rng.random() < 0.1:
        body["page"] = text(rng, rng.randint(0, 50))
    return _record("user-events", user, body)


def metric_point(rng: random.Random, series_id: str) -> ProducedRecord:
    body = {"series_id": series_id, "ts": event_time(rng, 0.05), "value": number(rng)}
    return _record("metrics", series_id, body)


def hostile_records(seed: int) -> list[ProducedRecord]:
    rng = random.Random(seed)
    users = list({identifier(rng) for _ in range(10)})
    series = list({identifier(rng) for _ in range(6)})
    records = [user_event(rng, rng.choice(users)) for _ in range(PER_TOPIC)]
    records += [metric_point(rng, rng.choice(series)) for _ in range(PER_TOPIC)]
    # Re-sent copies of a few events, one with a changed ts.
    copies = rng.sample([r for r in records if r.topic == "user-events"], 5)
    records += copies
    changed = json.loads(copies[0].value) | {"ts": BASE_TS + SPREAD_MS // 2}
    records.append(_record("user-events", changed["user_id"], changed))
    for index, user in enumerate(users[:2]):  # strings that fill a record in a valid one; a client clock an hour fast
        body = {"event_id": f"big-{index}", "user_id": user, "type": "page_view", "ts": BASE_TS, "page": "é" * PAGE_CHARS}
        records.append(_record("user-events", user, body))
        body = {"event_id": f"fast-{index}", "user_id": user, "type": "click", "ts": KAFKA_TS + 3_600_000}
        records.append(_record("user-events", user, body))
    for series_id in series[:2]:
        records.append(_record("metrics", series_id, {"series_id": series_id, "ts": KAFKA_TS + 86_400_000, "value": 1.0}))
    rng.shuffle(records)
    return records


@pytest.fixture
def extremes_settings(pipeline_stack):
    return pipeline_stack.settings


def test_valid_extremes_are_applied_or_dead_lettered_once(spark, bootstrap, extremes_settings):
    scenario = Scenario(seed=SEED, records=hostile_records(SEED))
    records = scenario.records
    produced = produce_scenario(bootstrap, scenario, extremes_settings, [KAFKA_TS] * len(records))
    expected = scenario.expected(extremes_settings)
    stages = Counter(letter.stage for letter in expected.dead_letters.values())
    assert stages["clock_skew"] > 0 and not stages["contract"], f"the drawn records must be valid: {stages}"

    outputs = run_jobs_in_process(spark, bootstrap, extremes_settings, scenario)

    problems = differences(expected, outputs)
    assert not problems, "outputs differ from the reference:\n" + "\n".join(problems)
    letters = [DeadLetter.model_validate_json(m.value()) for m in read_topic(bootstrap, extremes_settings.topic_dead_letters)]
    copies = Counter((d.source_topic, d.source_partition, d.source_offset) for d in letters)
    assert set(copies) == set(expected.dead_letters) and set(copies.values()) <= {1}, "a record dead-lettered twice or wrongly"
    applied = sum(s.behaviour.total_events for s in outputs.session_state.values()) + sum(
        s.count for s in outputs.metric_state.values()
    )
    print(
        f"\nvalid extremes (seed {SEED}): {len(produced)} records; {len(letters)} dead letters {dict(stages)}; "
        f"{applied} applied to the live state; {len(outputs.alerts)} alerts"
    )
