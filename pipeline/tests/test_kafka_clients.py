"""streamstate_pipeline.kafka_clients without a broker: settings layering, option parsing, masking,
translation to Spark's kafka.* options, one-line reasons."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
from confluent_kafka import KafkaError, KafkaException
from pydantic import ValidationError

from streamstate_pipeline import kafka_clients as kc
from streamstate_pipeline.cli import main
from streamstate_pipeline.settings import Settings

SASL = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "PLAIN",
    "sasl.username": "alice",
    "sasl.password": "hunter2",
    "ssl.ca.location": "/etc/kafka/ca.pem",
    "client.id": "streamstate-x",
}


def settings(**options: object) -> Settings:
    return Settings(bootstrap_servers="b1:9092,b2:9092", kafka_client_options=options)


def test_every_role_gets_the_connection_and_the_options_win_over_tuning():
    s = settings(**{"linger.ms": "50", "client.id": "mine"}).kafka
    producer = kc.producer_config(s, **{"linger.ms": 20, "batch.num.messages": 7})
    assert producer["bootstrap.servers"] == "b1:9092,b2:9092"
    assert (producer["acks"], producer["linger.ms"], producer["batch.num.messages"], producer["client.id"]) == ("all", "50", 7, "mine")
    admin = kc.admin_config(s, log_level=3)
    assert (admin["log_level"], admin["client.id"], admin["socket.timeout.ms"]) == (3, "mine", 10_000)
    reader = kc.reader_config(s, "api", **{"fetch.wait.max.ms": 100})
    assert reader["client.id"] == "mine" and reader["fetch.wait.max.ms"] == 100
    assert reader["group.id"].startswith("streamstate-api-") and reader["enable.auto.commit"] is False
    assert reader["enable.partition.eof"] is True and reader["auto.offset.reset"] == "earliest"
    assert kc.reader_config(s)["group.id"] != kc.reader_config(s)["group.id"], "a throw-away group per client"


def test_tuning_takes_librdkafka_names_or_double_underscores():
    assert kc.producer_config(kc.KafkaConnection("b:1"), linger__ms=9)["linger.ms"] == 9


def test_a_reader_keeps_its_managed_settings_whatever_the_call_site_tunes():
    conf = kc.reader_config(kc.KafkaConnection("b:1"), **{"group.id": "sneaky", "enable.auto.commit": "true"})
    assert conf["group.id"] != "sneaky" and conf["enable.auto.commit"] is False


def test_the_connection_of_settings_or_of_a_bare_broker_address():
    s = settings(**{"client.id": "c", "java.sasl.jaas.config": "x"})
    assert s.kafka == kc.KafkaConnection("b1:9092,b2:9092", {"client.id": "c", "java.sasl.jaas.config": "x"})
    assert s.kafka.client_config() == {"bootstrap.servers": "b1:9092,b2:9092", "client.id": "c"}, "java. options stay out"
    assert s.kafka.bootstrap_servers == "b1:9092,b2:9092"
    assert kc.KafkaConnection("h:1").client_config() == {"bootstrap.servers": "h:1"}
    assert kc.KafkaConnection("h:2", {"client.id": "z"}).client_config() == {"bootstrap.servers": "h:2", "client.id": "z"}
    assert kc.KafkaConnection("h:2", [("client.id", "z")]) == kc.KafkaConnection("h:2", {"client.id": "z"}), "pairs or a mapping"


def test_the_environment_variable_takes_a_json_object_of_strings_numbers_and_booleans(monkeypatch):
    monkeypatch.setenv(
        "STREAMSTATE_KAFKA_CLIENT_OPTIONS", '{"client.id": "x", "socket.timeout.ms": 5000, "enable.ssl.certificate.verification": false}'
    )
    assert Settings().kafka_client_options == {
        "client.id": "x", "socket.timeout.ms": "5000", "enable.ssl.certificate.verification": "false",
    }
    monkeypatch.setenv("STREAMSTATE_KAFKA_CLIENT_OPTIONS", "")
    assert Settings().kafka_client_options == {}
    assert Settings.model_fields["kafka_client_options"].default_factory() == {}


@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        ("security.protocol=SSL", "must be a JSON object"),
        ('["a"]', "must be a JSON object"),
        ('{"group.id": "g"}', "group.id is managed"),
        ('{"bootstrap.servers": "h:1"}', "use bootstrap_servers"),
        ('{"auto.offset.reset": "latest"}', "auto.offset.reset is managed"),
        ('{"bad key": "v"}', "setting name"),
        ('{"a.b": {"c": 1}}', "string, number or boolean"),
    ],
)
def test_bad_options_are_one_clear_error(monkeypatch, value, complaint):
    monkeypatch.setenv("STREAMSTATE_KAFKA_CLIENT_OPTIONS", value)
    with pytest.raises(ValidationError, match=complaint):
        Settings()


def test_a_settings_error_never_shows_the_options_values():
    with pytest.raises(ValidationError) as caught:
        settings(**{"sasl.password": "hunter2", "group.id": "g"})
    assert "hunter2" not in str(caught.value)


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("sasl.password", True), ("sasl.jaas.config", True), ("java.sasl.jaas.config", True),
        ("ssl.key.password", True), ("ssl.keystore.location", True), ("sasl.oauthbearer.client.secret", True),
        ("sasl.oauthbearer.token.endpoint.url", True), ("sasl.username", False), ("security.protocol", False),
        ("client.id", False),
    ],
)
def test_masking_by_key(key, secret):
    assert (kc.masked({key: "v"})[key] == kc.MASK) is secret


def test_streamstate_config_prints_the_options_with_secrets_masked(monkeypatch):
    monkeypatch.setenv("STREAMSTATE_KAFKA_CLIENT_OPTIONS", json.dumps({**SASL, "java.sasl.jaas.config": 'x password="hunter3";'}))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["config"]) == 0
    line = next(printed for printed in out.getvalue().splitlines() if printed.startswith("STREAMSTATE_KAFKA_CLIENT_OPTIONS="))
    shown = json.loads(line.split("=", 1)[1])
    assert shown["sasl.username"] == "alice" and shown["security.protocol"] == "SASL_SSL"
    assert shown["sasl.password"] == kc.MASK and shown["java.sasl.jaas.config"] == kc.MASK
    assert "hunter" not in out.getvalue()


def test_the_stack_hands_the_options_to_its_children_as_json(tmp_path):
    from streamstate_stack.launcher import EmbeddedStack

    stack = EmbeddedStack(settings=settings(**SASL), workdir=tmp_path, quiet=True)
    env = stack.env()
    assert json.loads(env["STREAMSTATE_KAFKA_CLIENT_OPTIONS"]) == SASL


def test_java_client_gets_shared_names_and_translations():
    java = kc.java_client_options(SASL)
    assert java == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "client.id": "streamstate-x",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="hunter2";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/etc/kafka/ca.pem",
    }


def test_scram_quotes_in_secrets_and_librdkafka_only_names():
    java = kc.java_client_options(
        {
            "sasl.mechanisms": "scram-sha-512", "sasl.username": 'a"b', "sasl.password": "c\\d",
            "ssl.endpoint.identification.algorithm": "none", "socket.timeout.ms": "100", "ssl.key.location": "/k",
        }
    )
    assert java["sasl.mechanism"] == "SCRAM-SHA-512"
    assert java["sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="a\\"b" password="c\\\\d";'
    )
    assert java["ssl.endpoint.identification.algorithm"] == ""
    assert "socket.timeout.ms" not in java and "ssl.key.location" not in java and "sasl.mechanisms" not in java


def test_java_prefixed_options_reach_only_the_java_client_and_win():
    options = {**SASL, "java.sasl.jaas.config": "mine", "java.ssl.keystore.location": "/ks.p12"}
    java = kc.java_client_options(options)
    assert java["sasl.jaas.config"] == "mine" and java["ssl.keystore.location"] == "/ks.p12"
    assert not any(k.startswith("java.") for k in kc.librdkafka_options(options))


def test_spark_options_carry_the_connection_for_the_java_client():
    s = settings(**SASL, **{"java.sasl.jaas.config": "mine"})
    options = s.kafka.spark_options()
    assert options["kafka.bootstrap.servers"] == "b1:9092,b2:9092"
    assert options["kafka.sasl.jaas.config"] == "mine" and "kafka.sasl.password" not in options
    assert all(key.startswith("kafka.") for key in options)


def test_reason_is_one_line():
    error = KafkaError(KafkaError._TRANSPORT, "Connect to 127.0.0.1:1 failed")
    assert kc.reason(KafkaException(error)) == "Connect to 127.0.0.1:1 failed"
    assert kc.reason(error) == "Connect to 127.0.0.1:1 failed"
    assert kc.reason(RuntimeError("first\n   second")) == "first second"
    assert kc.reason(KafkaException()) == "KafkaException"
