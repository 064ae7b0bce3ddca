"""Clients built by streamstate_pipeline.kafka_clients against the real broker: the extra client
options really reach the broker from every role, the API and the jobs' reads and writes
(Spark's connector, the options translated for its Java client), and the reachability check
tells a live broker from one it cannot use.

What a client sent is read on the wire (:class:`ClientIdProxy`): ``client.id`` travels in
every Kafka request header, so it proves the option was applied, not merely put in a dict.
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, Producer

from streamstate_pipeline import kafka_clients as kc
from streamstate_stack.launcher import free_port
from tests.integration.api_harness import ApiProcess, make_topics, publish, wait_until
from tests.integration.kafka_proxy import ClientIdProxy
from tests.integration.kafka_testing import collect_batches, produce, read_topic


@pytest.fixture
def proxy(bootstrap):
    running = ClientIdProxy(bootstrap)
    yield running
    running.close()


def through(settings, proxy: ClientIdProxy, **options: str):
    return settings.model_copy(update={"bootstrap_servers": proxy.bootstrap, "kafka_client_options": options})


def test_every_role_sends_the_extra_options(settings, proxy, new_topic):
    topic = new_topic(partitions=1)
    kc.wait_for_broker(through(settings, proxy, **{"client.id": "role-admin"}).kafka, timeout_s=30)
    producer = Producer(kc.producer_config(through(settings, proxy, **{"client.id": "role-producer"}).kafka))
    producer.produce(topic, value=b"v")
    assert producer.flush(30) == 0
    reader = Consumer(kc.reader_config(through(settings, proxy, **{"client.id": "role-reader"}).kafka))
    try:
        assert kc.watermarks(reader, [(topic, 0)], 10) == {(topic, 0): (0, 1)}
    finally:
        reader.close()
    assert {"role-admin", "role-producer", "role-reader"} <= proxy.seen()


def test_reachability_tells_a_live_broker_from_one_the_options_cannot_use(settings, bootstrap):
    assert kc.broker_problem(settings.kafka) is None
    # TLS towards a plaintext listener: the option is applied, so the broker is unusable.
    tls = settings.model_copy(update={"kafka_client_options": {"security.protocol": "SSL"}})
    problem = kc.broker_problem(tls.kafka, timeout_s=2)
    assert problem and "\n" not in problem
    dead = f"127.0.0.1:{free_port()}"
    with pytest.raises(TimeoutError, match=rf"^Kafka broker at {dead} did not answer within 1s: .+"):
        kc.wait_for_broker(kc.KafkaConnection(dead), timeout_s=1)


@pytest.mark.timeout(180)
def test_the_api_consumer_gets_the_options_and_never_logs_a_secret(proxy, new_topic, bootstrap, tmp_path):
    topics = make_topics(new_topic)
    publish(bootstrap, topics.alerts, [(b"a", None)])
    options = {"client.id": "api-under-test", "sasl.password": "hunter2-api"}
    api = ApiProcess(proxy.bootstrap, topics, tmp_path / "api.log", kafka_client_options=json.dumps(options))
    try:
        api.wait_ready(timeout_s=90)
        wait_until(lambda: "api-under-test" in proxy.seen(), what="the API's client id on the wire")
    finally:
        api.stop()
    assert "hunter2-api" not in (tmp_path / "api.log").read_text()


@pytest.mark.spark
def test_the_jobs_kafka_reads_and_writes_get_the_options(spark, settings, proxy, bootstrap, new_topic, tmp_path):
    from streamstate_jobs.kafka import read_kafka, write_kafka

    source, target = new_topic(partitions=2), new_topic(partitions=1)
    produce(bootstrap, source, [(None, f"{i}".encode(), i % 2) for i in range(40)])
    reading = through(settings, proxy, **{"client.id": "source-under-test"})
    batches = collect_batches(read_kafka(spark, reading, subscribe=source), str(tmp_path / "ck"), ("value",))
    values = sorted(int(bytes(v)) for batch in batches for (v,) in batch)
    assert values == list(range(40))

    writing = through(settings, proxy, **{"client.id": "sink-under-test"})
    frame = spark.createDataFrame([(str(v),) for v in values], "value string")
    assert write_kafka(frame, writing, topic=target) == 40
    assert len(read_topic(bootstrap, target)) == 40
    assert {"source-under-test", "sink-under-test"} <= proxy.seen()


def test_topic_ids_are_read_through_a_client_built_by_the_module(settings, new_topic):
    """The topic-id guards (the jobs' and the API's) ask an admin client for ids; a client that is
    collected before its futures resolve fails them, and the guard then silently sees no ids."""
    from streamstate_jobs.kafka.identity import topic_ids

    topic = new_topic(1, "ids")
    ids = topic_ids(settings.kafka, [topic, "no-such-topic-here"])
    assert set(ids) == {topic} and ids[topic], ids
