"""bench.first_alert finds the broker in the stack's own table, not in make's messages before it."""

from bench.first_alert import BROKER_LINE


def test_the_broker_address_comes_from_the_stacks_table():
    assert BROKER_LINE.search("  Kafka broker    127.0.0.1:9092  (e.g. streamstate topics list ...)")[1] == "127.0.0.1:9092"


def test_makes_messages_naming_the_broker_are_not_its_address():
    assert BROKER_LINE.search("the class archive of the Kafka broker is up to date: /repo/.deps/x.jsa") is None
