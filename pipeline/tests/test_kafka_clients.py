"""streamstate_pipeline.kafka_clients without a broker: settings layering, option parsing, masking,
translation to Spark's kafka.* options, one-line reasons."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import pickle

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


def test_a_command_line_override_keeps_the_options():
    s = settings(**{"client.id": "c"}).kafka
    other = s.with_bootstrap_servers("other:1")
    assert other.client_config() == {"bootstrap.servers": "other:1", "client.id": "c"}
    assert s.bootstrap_servers == "b1:9092,b2:9092", "the original is unchanged"
    assert s.with_bootstrap_servers(None) is s and s.with_bootstrap_servers("") is s, "no flag given: the same connection"


def test_the_connection_is_frozen_and_holds_its_own_copy_of_the_options():
    given = {"client.id": "c"}
    connection = kc.KafkaConnection("h:1", given)
    given["client.id"] = "changed"
    assert connection.options == (("client.id", "c"),)
    with pytest.raises(dataclasses.FrozenInstanceError):
        connection.bootstrap_servers = "elsewhere:1"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        connection.options = ()  # type: ignore[misc]
    assert connection.client_config() is not connection.client_config(), "each client gets its own dict"
    assert hash(connection) == hash(kc.KafkaConnection("h:1", {"client.id": "c"}))


def test_the_connection_pickles_as_spark_ships_it_to_its_workers():
    connection = settings(**SASL).kafka
    assert pickle.loads(pickle.dumps(connection)) == connection


@pytest.mark.parametrize(
    ("servers", "options", "error", "complaint"),
    [
        ("", {}, ValueError, "bootstrap servers are not set"),
        ("  ", {}, ValueError, "bootstrap servers are not set"),
        (None, {}, TypeError, "must be a string like host:port"),
        ("h:1", {"group.id": "g"}, ValueError, "group.id is managed by streamstate"),
        ("h:1", {"bootstrap.servers": "h:2"}, ValueError, r"use bootstrap_servers"),
        ("h:1", {"bad key": "v"}, ValueError, "setting name"),
        ("h:1", {"a.b": {"c": 1}}, ValueError, "string, number or boolean"),
    ],
)
def test_a_connection_is_checked_when_made_with_one_clear_error(servers, options, error, complaint):
    with pytest.raises(error, match=complaint):
        kc.KafkaConnection(servers, options)


def test_option_values_are_checked_as_in_settings():
    connection = kc.KafkaConnection("h:1", {"socket.timeout.ms": 5000, "enable.ssl.certificate.verification": False})
    assert connection.options == (("socket.timeout.ms", "5000"), ("enable.ssl.certificate.verification", "false"))


def test_the_connection_never_prints_a_secret():
    connection = settings(**SASL, **{"java.sasl.jaas.config": 'x password="hunter3";'}).kafka
    for shown in (repr(connection), str(connection), f"{connection}", repr([connection]), repr(settings(**SASL).kafka)):
        assert "hunter" not in shown, shown
    assert repr(connection).startswith("KafkaConnection(bootstrap_servers='b1:9092,b2:9092', options={")
    assert "'sasl.password': '***'" in repr(connection) and "'sasl.username': 'alice'" in repr(connection)
    assert dict(connection.options)["sasl.password"] == "hunter2", "masked when shown, not when used"


# What every role built for these settings before the connection was an object of its own
# (kafka_clients at 0c3928e, taking the Settings): the same inputs give the same client configs.
SAME_OPTIONS = {**SASL, "java.ssl.keystore.location": "/ks.p12", "linger.ms": 50}
SAME_LIBRDKAFKA = {
    "bootstrap.servers": "b1:9092,b2:9092", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
    "sasl.username": "alice", "sasl.password": "hunter2", "ssl.ca.location": "/etc/kafka/ca.pem",
    "client.id": "streamstate-x", "linger.ms": "50",
}


def test_the_roles_build_the_same_client_configs_as_before():
    connection = settings(**SAME_OPTIONS).kafka
    assert connection.client_config() == SAME_LIBRDKAFKA
    assert kc.producer_config(connection, linger__ms=20) == {"acks": "all", **SAME_LIBRDKAFKA}
    assert kc.admin_config(connection) == {"socket.timeout.ms": 10_000, "log_level": 0, **SAME_LIBRDKAFKA}
    reader = kc.reader_config(connection, "api")
    assert reader.pop("group.id").startswith("streamstate-api-")
    assert reader == {
        "isolation.level": "read_committed", **SAME_LIBRDKAFKA, "enable.auto.commit": False, "enable.auto.offset.store": False,
        "enable.partition.eof": True, "auto.offset.reset": "earliest",
    }
    assert connection.spark_options() == {
        "kafka.bootstrap.servers": "b1:9092,b2:9092", "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN",
        "kafka.client.id": "streamstate-x", "kafka.linger.ms": "50",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" password="hunter2";',
        "kafka.ssl.truststore.type": "PEM", "kafka.ssl.truststore.location": "/etc/kafka/ca.pem", "kafka.ssl.keystore.location": "/ks.p12",
    }


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
