"""bench.first_alert finds the broker in the stack's own table, not in make's messages before it,
and keeps the figures of the target it did not measure."""

import json

from bench.first_alert import BROKER_LINE, write_figures


def test_the_broker_address_comes_from_the_stacks_table():
    assert BROKER_LINE.search("  Kafka broker    127.0.0.1:9092  (e.g. streamstate topics list ...)")[1] == "127.0.0.1:9092"


def test_makes_messages_naming_the_broker_are_not_its_address():
    assert BROKER_LINE.search("the class archive of the Kafka broker is up to date: /repo/.deps/x.jsa") is None


def test_measuring_one_target_keeps_the_other_targets_figures(tmp_path):
    out = tmp_path / "results" / "first_alert.json"
    write_figures(out, {"run": {"first_alert_s": 23.7}, "compose": {"first_alert_s": 80.0}})
    write_figures(out, {"run": {"first_alert_s": 21.0}})
    assert json.loads(out.read_text()) == {"run": {"first_alert_s": 21.0}, "compose": {"first_alert_s": 80.0}}
