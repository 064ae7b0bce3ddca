"""Producers: realistic user-event and metric generators, delivery-checked Kafka writing, scenario record/replay, and the ``streamstate-produce`` CLI."""
