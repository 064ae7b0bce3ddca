"""The scripted end-to-end scenario, shared by the embedded, cluster, crash and compose tests.

A fixed-seed mix of user sessions (with duplicates, late events and malformed records)
and metric series (with injected anomalies and malformed points) is produced to the input
topics; the delivery reports give every record's (partition, offset), and the plain-Python
reference (:mod:`tests.reference_rules`) computes from those exact records what
the jobs must write. :func:`collect_outputs` reads the output topics (and optionally the
API) until they match or stop changing; :func:`assert_outputs_match` compares exactly.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Sequence

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from streamstate_pipeline.contracts import Alert, ClosedSession, DeadLetter, MetricSnapshot, SessionSnapshot
from tests.reference_rules import PipelineOutputs, SourceRecord, run_reference
from streamstate_producers.generators import MetricGenerator, UserEventGenerator, interleave
from streamstate_pipeline.settings import Settings, defaults
from streamstate_pipeline.topics import load_topics

EVENTS = 2_500
METRICS = 1_500
# A job may plan a batch while a scenario is being produced. The producer sends each partition's
# records on its own, so one partition can lag the others; a lag longer in event time than the
# watermark's slack (delay minus the scenario's lateness: 5 - 1 minutes) would make its records
# late in the job but not in the reference. Flushing whenever event time moved this far bounds it,
# provided each flush waits until every record is delivered: a partition whose leader is being
# re-elected (the broker-lost test feeds while a node is dead) can hold its records for longer than
# any short flush timeout, and the next slice would then overtake them. So a flush waits as long as
# librdkafka's own delivery timeout (300 s), after which a record fails instead of waiting.
FLUSH_EVERY_EVENT_MS = 60_000
DELIVERY_TIMEOUT_S = 300


@dataclass
class Scenario:
    seed: int
    records: list  # ProducedRecord, topic names as generated (user-events / metrics)
    produced: list[SourceRecord] = field(default_factory=list)  # filled by produce_scenario

    def expected(self, settings: Settings) -> PipelineOutputs:
        return run_reference(self.produced, settings)


def build_scenario(seed: int = 7, events: int = EVENTS, metrics: int = METRICS, users: int = 60) -> Scenario:
    users = UserEventGenerator(
        seed=seed, users=users, duplicate_rate=0.04, late_rate=0.04, malformed_rate=0.03, max_lateness_ms=60_000
    )
    series = MetricGenerator(seed=seed + 1, series=8, interval_ms=15_000, anomaly_rate=0.01, malformed_rate=0.02)
    records = list(itertools.islice(interleave([(users.take(events), events), (series.take(metrics), metrics)]), events + metrics))
    return Scenario(seed=seed, records=records)


def pipeline_topics(new_topic) -> dict[str, str]:
    """Fresh input and output topics for one pipeline run, as Settings fields (``new_topic``: the fixture),
    each with the configuration ``infra/kafka/topics.toml`` gives it, except that the input
    topics keep their records whatever their age. Tests produce records stamped with their
    relay's clock of 2023 (a scenario's event times): under the 7-day retention the broker's
    retention check, every 5 minutes, deleted them before the jobs read them (the job then
    rightly stops with lost input)."""
    config = {spec.name: spec.config for spec in load_topics(defaults().topics_file)}
    kept = {"retention.ms": "-1"}
    return {
        "topic_user_events": new_topic(4, "events", {**config["user-events"], **kept}),
        "topic_metrics": new_topic(4, "metrics", {**config["metrics"], **kept}),
        "topic_alerts": new_topic(2, "alerts", config["alerts"]),
        "topic_sessions": new_topic(2, "sessions", config["sessions"]),
        "topic_session_state": new_topic(2, "session-state", config["session-state"]),
        "topic_metric_state": new_topic(2, "metric-state", config["metric-state"]),
        "topic_dead_letters": new_topic(1, "dead", config["dead-letters"]),
        "topic_event_counts": new_topic(1, "counts", config["event-counts"]),
    }


def input_topics(settings: Settings) -> dict[str, str]:
    """The topic each generated record goes to, by the generator's topic name."""
    return {"user-events": settings.topic_user_events, "metrics": settings.topic_metrics}


def produce_scenario(
    bootstrap: str,
    scenario: Scenario,
    settings: Settings,
    timestamps: Sequence[int] | None = None,
    max_bytes: int | None = None,
) -> list[SourceRecord]:
    """Produce every record (in order, per-key order kept) and remember where each landed.

    ``timestamps`` sets each record's Kafka timestamp (default: the producer's clock);
    ``max_bytes`` raises the producer's record size limit (librdkafka's default is 1,000,000)."""
    topic_of = input_topics(settings)
    limit = {} if max_bytes is None else {"message.max.bytes": max_bytes}
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5, **limit})
    landed: list[SourceRecord] = []
    failures: list[str] = []

    def report(error, message):
        if error is not None:
            failures.append(str(error))
            return
        landed.append(
            SourceRecord(message.topic(), message.partition(), message.offset(), message.key(), message.value(), message.timestamp()[1])
        )

    # Per topic (each job has its own watermark): the event time at the last flush, and the latest.
    flushed_at: dict[str, int] = {}
    latest: dict[str, int] = {}
    for index, record in enumerate(scenario.records):
        stamp = {} if timestamps is None else {"timestamp": timestamps[index]}
        producer.produce(topic_of[record.topic], key=record.key, value=record.value, on_delivery=report, **stamp)
        producer.poll(0)
        event_time = _event_time(record.value)
        if event_time is None:
            continue
        latest[record.topic] = event_time
        if abs(event_time - flushed_at.setdefault(record.topic, event_time)) > FLUSH_EVERY_EVENT_MS:
            _deliver_all(producer, failures)  # every partition has what came before, whatever batch reads it next
            flushed_at = dict(latest)
    _deliver_all(producer, failures)
    assert not failures, f"scenario records not delivered: {failures[:3]}"
    assert len(landed) == len(scenario.records)
    scenario.produced = landed
    return landed


def _deliver_all(producer: Producer, failures: list[str]) -> None:
    undelivered = producer.flush(DELIVERY_TIMEOUT_S)
    assert not undelivered, f"{undelivered} scenario records neither delivered nor failed in {DELIVERY_TIMEOUT_S} s: {failures[:3]}"


def _event_time(value: bytes | None) -> int | None:
    """A record's ``ts`` (malformed records have none)."""
    try:
        ts = json.loads(value)["ts"]
    except (TypeError, ValueError, KeyError):
        return None
    return ts if isinstance(ts, int) and not isinstance(ts, bool) else None


def unproduced_records(scenario: Scenario, settings: Settings) -> list[SourceRecord]:
    """The scenario's records as the reference reads them, before any is produced: each topic's
    in the order they would be produced (one partition, offsets by position)."""
    topic_of = input_topics(settings)
    return [SourceRecord(topic_of[r.topic], 0, i, r.key, r.value) for i, r in enumerate(scenario.records)]


def records_to_first_alerts(scenario: Scenario, settings: Settings) -> int:
    """How many of the scenario's first records the reference needs to raise an alert of each
    job (an anomaly, and one of the sessions rules'). Alerts are rare (the crash tests' scenario
    has eight, its first anomaly past half of it): a test whose crash point needs a batch with
    alerts feeds this much first."""
    as_produced = unproduced_records(scenario, settings)

    def alerts_of_both_jobs(count: int) -> bool:
        kinds = {alert.kind == "anomaly" for alert in run_reference(as_produced[:count], settings).alerts.values()}
        return kinds == {True, False}

    low, high = 0, len(as_produced)
    if not alerts_of_both_jobs(high):
        return high
    while low < high:  # `high` always has both: a prefix that has them keeps them as it grows
        middle = (low + high) // 2
        low, high = (low, middle) if alerts_of_both_jobs(middle) else (middle + 1, high)
    return high


class Feeder:
    """Produces the scenario in ``chunks`` consecutive slices, each once, on demand: the first
    slice at least its ``first`` records, the rest of equal size."""

    def __init__(self, bootstrap: str, settings: Settings, scenario: Scenario, chunks: int, first: int = 0):
        self._bootstrap, self._settings, self.scenario = bootstrap, settings, scenario
        records = scenario.records
        head = records[:first] if chunks > 1 and first > -(-len(records) // chunks) else []
        rest = records[len(head) :]
        size = -(-len(rest) // (chunks - bool(head))) or 1
        self._slices = ([head] if head else []) + [rest[i : i + size] for i in range(0, len(rest), size)]
        self._fed = 0
        self._lock = threading.Lock()
        scenario.produced = []

    def feed(self, upto: int) -> None:
        with self._lock:
            while self._fed <= min(upto, len(self._slices) - 1):
                chunk = Scenario(self.scenario.seed, self._slices[self._fed])
                self.scenario.produced += produce_scenario(self._bootstrap, chunk, self._settings)
                self._fed += 1

    def produced_on(self, topic: str) -> int:
        with self._lock:
            return sum(r.topic == topic for r in self.scenario.produced)


@dataclass
class Outputs:
    alerts: dict[str, Alert]
    alert_copies: int  # records on the alerts topic, duplicates included
    sessions: dict[str, ClosedSession]
    dead_letters: dict[tuple[str, int, int], DeadLetter]
    session_state: dict[str, SessionSnapshot]
    metric_state: dict[str, MetricSnapshot]
    api_alert_ids: list[str] | None = None
    copies: dict[str, int] = field(default_factory=dict)  # records read per id'd output, duplicates included

    def records(self) -> int:
        return sum(self.copies.values())

    def duplicates(self) -> dict[str, str]:
        """Each id'd output read more often than it has distinct records: ``copies of distinct``."""
        distinct = {"alerts": len(self.alerts), "sessions": len(self.sessions), "dead_letters": len(self.dead_letters)}
        return {name: f"{n} copies of {distinct[name]}" for name, n in self.copies.items() if n != distinct[name]}


def read_topic(bootstrap: str, topic: str, idle_s: float = 1.5, isolation: str = "read_committed") -> list:
    """Every record of ``topic`` from the beginning up to its end (:func:`read_topics`)."""
    return read_topics(bootstrap, [topic], idle_s, isolation)[topic]


def read_topics(
    bootstrap: str, topics: Sequence[str], idle_s: float = 1.5, isolation: str = "read_committed", until_ends: bool = False,
) -> dict[str, list]:
    """Every record of each of ``topics`` from the beginning, in one consumer, until every
    partition reports its end: the last stable offset for ``read_committed`` (as the API reads:
    none of an aborted or still open transaction), the high watermark otherwise. The read
    ends earlier only if nothing at all arrives for ``idle_s`` (a partition without a leader),
    and then returns what it has, as a read that waited for quiet did before; or, with
    ``until_ends``, fails naming the partitions that sent no end."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "scenario-reader", "enable.auto.commit": False, "fetch.wait.max.ms": 100,
         "isolation.level": isolation, "enable.partition.eof": True}
    )
    try:
        topics = list(dict.fromkeys(topics))
        partitions = [TopicPartition(topic, p, 0) for topic in topics for p in consumer.list_topics(topic, timeout=10).topics[topic].partitions]
        consumer.assign(partitions)
        records: dict[str, list] = {topic: [] for topic in topics}
        ended: set[tuple[str, int]] = set()
        last_event = time.monotonic()
        while len(ended) < len(partitions) and time.monotonic() - last_event < idle_s:
            for message in consumer.consume(1000, timeout=0.2):
                last_event = time.monotonic()
                error = message.error()
                if error is None:
                    records[message.topic()].append(message)
                elif error.code() == KafkaError._PARTITION_EOF:
                    ended.add((message.topic(), message.partition()))
                else:
                    raise RuntimeError(f"reading {message.topic()}: {error}")
        missing = sorted({(tp.topic, tp.partition) for tp in partitions} - ended)
        assert not (until_ends and missing), f"no end of {missing} after {idle_s} s without a record"
        return records
    finally:
        consumer.close()


def _compacted(messages, model):
    latest: dict[str, object] = {}
    for message in sorted(messages, key=lambda m: (m.partition(), m.offset())):
        key = message.key().decode()
        if message.value() is None:
            latest.pop(key, None)
        else:
            latest[key] = model.model_validate_json(message.value())
    return latest


def read_outputs(
    bootstrap: str, settings: Settings, api_url: str | None = None, api_token: str | None = None, isolation: str = "read_committed"
) -> Outputs:
    read = read_topics(
        bootstrap,
        [settings.topic_alerts, settings.topic_sessions, settings.topic_dead_letters, settings.topic_session_state, settings.topic_metric_state],
        isolation=isolation,
    )
    alerts = read[settings.topic_alerts]
    sessions = [ClosedSession.model_validate_json(m.value()) for m in read[settings.topic_sessions]]
    dead = [DeadLetter.model_validate_json(m.value()) for m in read[settings.topic_dead_letters]]
    outputs = Outputs(
        alerts={a.alert_id: a for a in (Alert.model_validate_json(m.value()) for m in alerts)},
        alert_copies=len(alerts),
        sessions={s.session_id: s for s in sessions},
        dead_letters={(d.source_topic, d.source_partition, d.source_offset): d for d in dead},
        session_state=_compacted(read[settings.topic_session_state], SessionSnapshot),
        metric_state=_compacted(read[settings.topic_metric_state], MetricSnapshot),
        copies={"alerts": len(alerts), "sessions": len(sessions), "dead_letters": len(dead)},
    )
    if api_url is not None:
        headers = {"Authorization": f"Bearer {api_token}"} if api_token else {}
        request = urllib.request.Request(f"{api_url}/alerts?limit=1000", headers=headers)
        with urllib.request.urlopen(request, timeout=10) as response:
            body = json.loads(response.read())
        outputs.api_alert_ids = [a["alert_id"] for a in body["items"]]
    return outputs


def differences(expected: PipelineOutputs, got: Outputs) -> list[str]:
    """What differs between the reference and the outputs read, a line per output; with the
    API's alert ids read too, whether it shows each expected alert, once and no other."""
    problems = []
    for name in ("alerts", "sessions", "dead_letters", "session_state", "metric_state"):
        want, have = getattr(expected, name), getattr(got, name)
        missing = sorted(set(want) - set(have), key=str)
        extra = sorted(set(have) - set(want), key=str)
        changed = sorted((k for k in set(want) & set(have) if want[k] != have[k]), key=str)
        if missing or extra or changed:
            problems.append(
                # An unexpected record is shown whole (a dead letter's reason and stage say why it is one).
                f"{name}: {len(missing)} missing {missing[:3]}, {len(extra)} unexpected {[(k, have[k]) for k in extra[:3]]}, "
                f"{len(changed)} different {[(k, want[k], have[k]) for k in changed[:1]]}"
            )
    if got.api_alert_ids is not None:  # the API follows the alerts topic: it may lag the topic a moment
        shown = set(got.api_alert_ids)
        unseen, unknown = sorted(set(expected.alerts) - shown), sorted(shown - set(expected.alerts))
        twice = len(got.api_alert_ids) - len(shown)
        if unseen or unknown or twice:
            problems.append(f"the API's alerts: {len(unseen)} missing {unseen[:3]}, {len(unknown)} unexpected {unknown[:3]}, {twice} shown twice")
    return problems


def collect_outputs(
    bootstrap: str,
    settings: Settings,
    api_url: str | None = None,
    scenario: Scenario | None = None,
    timeout_s: float = 240,
    api_token: str | None = None,
) -> Outputs:
    """Read the outputs until they equal the scenario's expectation (or the timeout passes)."""
    expected = scenario.expected(settings) if scenario is not None else None
    deadline = time.monotonic() + timeout_s
    while True:
        got = read_outputs(bootstrap, settings, api_url, api_token)
        if expected is None or not differences(expected, got) or time.monotonic() > deadline or unexpected_for_good(expected, got):
            return got
        time.sleep(1)  # a read ends at the topics' ends, well under a second


# Outputs whose topics only grow, read committed: a record there the reference has no place for
# stays, so waiting cannot make the outputs match (a failing run waited out its whole timeout).
APPEND_ONLY_OUTPUTS = ("alerts", "sessions", "dead_letters")


def unexpected_for_good(expected: PipelineOutputs, got: Outputs) -> bool:
    """Whether ``got`` holds an alert, closed session or dead letter the reference lacks."""
    return any(set(getattr(got, name)) - set(getattr(expected, name)) for name in APPEND_ONLY_OUTPUTS)


def start_jobs_in_process(spark, settings: Settings) -> list:
    """Every declared job's main query on the shared SparkSession (sessions first)."""
    from streamstate_jobs.registry import JOBS
    from streamstate_jobs.runner import start_query

    return [
        start_query(spark, settings, spec, settings.checkpoint(name))
        for name, spec in JOBS.items()
    ]


def run_jobs_in_process(spark, bootstrap: str, settings: Settings, scenario: Scenario, timeout_s: float = 300) -> Outputs:
    """Both jobs as queries of the shared SparkSession until their outputs match the scenario
    (or the timeout); each query must still be running, with no error, at the end."""
    queries = start_jobs_in_process(spark, settings)
    try:
        outputs = collect_outputs(bootstrap, settings, scenario=scenario, timeout_s=timeout_s)
        for query in queries:
            assert query.isActive and query.exception() is None, query.exception()
    finally:
        for query in queries:
            query.stop()
    return outputs


def records_read(query) -> int:
    """Input records a query has read so far (the sum of its source end offsets on fresh topics)."""
    progress = query.lastProgress
    if not progress:
        return 0
    from streamstate_jobs.metrics import offsets_by_topic

    ends = [offsets_by_topic(source.get("endOffset")) or {} for source in progress["sources"]]
    return sum(offset for end in ends for partitions in end.values() for offset in partitions.values())


def assert_outputs_match(scenario: Scenario, got: Outputs, settings: Settings | None = None) -> None:
    settings = settings or Settings()
    expected = scenario.expected(settings)
    # The scenario must exercise every path, or matching it proves little.
    kinds = {a.kind for a in expected.alerts.values()}
    assert {"anomaly", "purchase_without_view"} <= kinds, f"scenario raises too few alert kinds: {kinds}"
    assert {s.ended_by for s in expected.sessions.values()} == {"logout", "timeout"}
    assert expected.dead_letters and expected.metric_state and expected.session_state
    problems = differences(expected, got)
    assert not problems, "outputs differ from the reference:\n" + "\n".join(problems)
