"""Every seed example of the state API on a real streaming query fed from the embedded broker,
compared exactly (per key, in order) with the plain-Python reference run over the same input."""

from __future__ import annotations

import random

import pytest

from streamstate.examples import anomalies, analytics, behaviour, bounded, first_last, robust, sessions, word_count
from streamstate.examples.runner import read_json_topic
from streamstate.jobs.state import StateSpec
from streamstate.jobs.state.reference import ReferenceRun, by_key, run_map_with_state, run_update_state_by_key
from streamstate.jobs.state.testing import RowCollector, kinds, produce_json

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

MINUTE = 60_000


def run_once(spark, settings, bootstrap, topic, records, schema, build, tmp_path, key_field=None, **read):
    """Produce ``records``, run ``build(parsed_df)`` as one availableNow query, return its rows."""
    produce_json(bootstrap, topic, records, key_field)
    result = build(read_json_topic(spark, settings, topic, schema, **read))
    return RowCollector(result, str(tmp_path / "checkpoint"), available_now=True).await_done()


def run_batches(spark, settings, bootstrap, topic, batches, schema, build, tmp_path, key_field=None, **read):
    """Produce each batch and let the live query settle before the next one; return all rows."""
    result = build(read_json_topic(spark, settings, topic, schema, **read))
    collector = RowCollector(result, str(tmp_path / "checkpoint"))
    try:
        for batch in batches:
            produce_json(bootstrap, topic, batch, key_field)
            collector.settle()
        return collector.rows
    finally:
        collector.finish()


def test_running_word_count_with_initial_state(spark, settings, bootstrap, new_topic, tmp_path):
    rng = random.Random(0)
    vocabulary = ["spark", "kafka", "state", "dummy", "source", "stream"]
    lines = [" ".join(rng.choice(vocabulary) for _ in range(rng.randint(1, 6))) for _ in range(60)]
    rows = run_once(
        spark, settings, bootstrap, new_topic(), [{"line": line} for line in lines], word_count.SCHEMA,
        lambda df: word_count.running_counts(word_count.words(df)), tmp_path,
    )
    expected = run_map_with_state(
        StateSpec.function(word_count.track_state).initial_state(word_count.INITIAL_STATE),
        [[(word, 1) for line in lines for word in line.split()]],
    )
    assert by_key(rows) == by_key(expected)
    assert ("output", "dummy", '["dummy",101]', None) in [r[:4] for r in rows if r[1] == "dummy"][:1]
