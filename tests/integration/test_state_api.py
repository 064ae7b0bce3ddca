"""The state API's own guarantees on real queries: event-time and processing-time timeouts,
keeping a key during its timeout, late records, batch functions with typed outputs and an
initial-state DataFrame, the columnar form, a state whose type changed between releases, and
a checkpoint of the per-key engine carried on by a bucket function."""

from __future__ import annotations

import pytest
from pydantic import BaseModel
from pyspark.errors import StreamingQueryException
from pyspark.sql.types import StructType

from examples.runner import EVENT_TIME, read_json_topic
from streamstate.state import Emit, StateSpec, map_with_state, processor
from streamstate.state.bucket_function import KEY_COLUMN, BucketResult
from streamstate.state.keyrun import OUTPUT_SCHEMA
from streamstate.state.tester import StateTester, by_key
from tests.state_queries import RowCollector, kinds, produce_json

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

SCHEMA = "key STRING, n STRING, ts LONG"


def visits(key, value, state):
    """Counts a key's records; at its idle timeout a key named keep* tries to stay, which the
    timing-out contract refuses (a dead letter, and the key still goes)."""
    if value is None:
        current = state.get()
        if key.startswith("keep"):
            state.update({**current, "closed": True})  # raises StateUsageError
        return ("expired", current["n"])
    n = state.get_option({"n": 0})["n"] + 1
    state.update({"n": n, "closed": False})
    return ("seen", n, state.watermark_ms)


def run_beside_the_tester(spark, settings, bootstrap, topic, spec, batches, tmp_path, before_step=None) -> list:
    """Each batch of (key, ts) through a live event-time query and through the in-memory tester;
    the query's rows, once asserted equal, key by key, to the tester's. ``before_step`` maps a
    batch's index to what to do before it is produced."""
    df = read_json_topic(spark, settings.bootstrap_servers, topic, SCHEMA, event_time_ms="ts", watermark_delay="0 seconds")
    collector = RowCollector(map_with_state(df, key="key", spec=spec, value="ts"), str(tmp_path / "cp"))
    reference = StateTester(spec)
    try:
        for step, batch in enumerate(batches):
            (before_step or {}).get(step, lambda: None)()
            produce_json(bootstrap, topic, [{"key": k, "n": "1", "ts": ts} for k, ts in batch])
            collector.settle()
            reference.run_batch([(k, ts, ts) for k, ts in batch])
    finally:
        rows = collector.finish()
    assert by_key(rows) == by_key(reference.rows)
    return rows


def test_event_time_timeouts_remove_keys_and_late_records_are_dead_lettered(spark, settings, bootstrap, new_topic, tmp_path):
    topic = new_topic()
    batches = [
        [("a", 1_000), ("keep", 2_000), ("b", 3_000)],
        [("c", 30_000)],  # watermark 30 s: a, keep, b are idle past 10 s
        [("a", 5_000), ("keep", 31_000), ("c", 35_000)],  # a@5 s is late
        [("d", 60_000)],  # watermark 60 s: keep (new data at 31 s) and c time out
    ]
    spec = StateSpec.function(visits).timeout("10 seconds").event_time(EVENT_TIME, late="dead_letter")
    rows = run_beside_the_tester(spark, settings, bootstrap, topic, spec, batches, tmp_path)
    outputs = [(r[1], r[2]) for r in kinds(rows, "output") if '"seen"' not in r[2]]
    assert sorted(outputs) == sorted([("a", '["expired",1]'), ("b", '["expired",1]'), ("c", '["expired",2]')])
    dead = kinds(rows, "dead_letter")
    assert [(r[1], r[2], r[3]) for r in dead if r[1] == "a"] == [
        ("a", "5000", "late record: event time 5000 ms is at or behind the watermark 30000 ms")
    ]
    refused = [r[3] for r in dead if r[1] == "keep"]
    assert len(refused) == 2 and all(reason.startswith("StateUsageError: cannot update") for reason in refused)
    # keep's state went at each timeout: the second time it had only its record at 31 s
    assert [r[2] for r in kinds(rows, "snapshot") if r[1] == "keep"] == ['{"n":1,"closed":false}', None] * 2


def test_processing_time_timeout(spark, settings, bootstrap, new_topic, tmp_path):
    topic = new_topic()
    # a's second record must be processed before a's first times out. Produced up front and
    # split by the batch cap, only batch 1's run lies between them; a batch can take over 4 s
    # on a loaded 2-core machine, so the timeout leaves room for that.
    timeout_ms = 15_000

    def idle(key, value, state):
        if value is None:
            waited = state.processing_time_ms - state.get()["at"]
            return ("timeout", state.get()["n"], waited >= timeout_ms)
        n = state.get_option({"n": 0})["n"] + 1
        state.update({"n": n, "at": state.processing_time_ms})
        return ("seen", n)

    spec = StateSpec.function(idle).timeout(timeout_ms)
    records = [{"key": "a", "n": "1", "ts": 0}, {"key": "b", "n": "1", "ts": 0}, {"key": "a", "n": "1", "ts": 0}]
    produce_json(bootstrap, topic, records)
    df = read_json_topic(spark, settings.bootstrap_servers, topic, SCHEMA, records_per_batch=2)
    collector = RowCollector(map_with_state(df, key="key", spec=spec, value="n"), str(tmp_path / "cp"))
    try:
        collector.wait_for(lambda rows: sum('"timeout"' in r[2] for r in kinds(rows, "output")) >= 2)
    finally:
        rows = collector.finish()
    outputs = {key: [payload for kind, payload, _ in seq if kind == "output"] for key, seq in by_key(rows).items()}
    assert outputs == {
        "a": ['["seen",1]', '["seen",2]', '["timeout",2,true]'],
        "b": ['["seen",1]', '["timeout",1,true]'],
    }
    last_snapshots = {r[1]: r[2] for r in kinds(rows, "snapshot")}
    assert last_snapshots == {"a": None, "b": None}  # both removed by their timeout
    seen_a = [i for i, batch in enumerate(collector.batches) for r in batch if r[:2] == ("output", "a") and '"seen"' in r[2]]
    assert len(set(seen_a)) == 2  # a's second record reset its timer from a later batch


def test_batch_function_error_typed_output_and_initial_state_frame(spark, settings, bootstrap, new_topic, tmp_path):
    topic = new_topic()

    def totals(key, values, state):
        total = state.get_option(0) + sum(int(v) for v in values)
        state.update(total)
        return [{"total": total, "values": len(values)}]

    initial = spark.createDataFrame([("a", 100)], "key STRING, state INT")
    spec = StateSpec.batch_function(totals).initial_state(initial)
    df = read_json_topic(spark, settings.bootstrap_servers, topic, SCHEMA)
    result = map_with_state(df, key="key", spec=spec, value="n", output_schema="total INT, values INT")
    collector = RowCollector(result, str(tmp_path / "cp"))
    batches = [
        [{"key": "a", "n": "1", "ts": 0}, {"key": "b", "n": "2", "ts": 0}, {"key": "b", "n": "x", "ts": 0}],
        [{"key": "b", "n": "3", "ts": 0}, {"key": "a", "n": "4", "ts": 0}],
    ]
    try:
        for batch in batches:
            produce_json(bootstrap, topic, batch)
            collector.settle()
    finally:
        rows = collector.finish()
    frame = spark.createDataFrame(rows, OUTPUT_SCHEMA)
    typed = sorted(tuple(r) for r in result.outputs_of(frame).collect())
    # b's first batch raised on "x": b is re-run one record at a time, so only "x" is a dead letter.
    assert typed == [("a", 101, 1), ("a", 105, 1), ("b", 2, 1), ("b", 5, 1)]
    dead = sorted(tuple(r) for r in result.dead_letters_of(frame).collect())
    reason = "ValueError: invalid literal for int() with base 10: 'x'"
    assert dead == [("b", reason, '"x"', topic, 0, 2)]
    assert sorted(tuple(r) for r in result.snapshots_of(frame).collect()) == [("a", "101"), ("a", "105"), ("b", "2"), ("b", "5")]


def test_a_columnar_function_gets_what_a_batch_function_gets(spark, settings, bootstrap, new_topic, tmp_path):
    """Records out of event-time order, a record the function refuses (dead-lettered with its
    value), keys timing out: the columnar form's rows are the in-memory batch function's."""
    topic = new_topic()

    def totals(key, values, state):
        if state.is_timing_out():
            return [["timed out", state.get()]]
        total = state.get_option(0) + sum(int(value["n"]) for value in values)
        state.update(total)
        return [[total, [value["ts"] for value in values]]]

    def columnar_totals(key, values, state):
        if state.is_timing_out():
            return [["timed out", state.get()]]
        total = state.get_option(0) + sum(int(n) for n in values["n"])
        state.update(total)
        return [[total, values["ts"]]]

    batches = [
        [("a", "1", 3_000), ("a", "2", 1_000), ("b", "x", 2_000), ("b", "4", 2_500)],
        [("a", "5", 4_000), ("b", "6", 5_000), ("b", "7", 4_500)],
        [("c", "1", 60_000)],  # watermark 60 s: a and b are idle past 10 s
    ]
    spec = StateSpec.columnar_function(columnar_totals).timeout("10 seconds").event_time(EVENT_TIME)
    df = read_json_topic(spark, settings.bootstrap_servers, topic, SCHEMA, event_time_ms="ts", watermark_delay="0 seconds")
    collector = RowCollector(map_with_state(df, key="key", spec=spec, value=["n", "ts"]), str(tmp_path / "cp"))
    reference = StateTester(StateSpec.batch_function(totals).timeout("10 seconds").event_time(EVENT_TIME))
    try:
        for batch in batches:
            produce_json(bootstrap, topic, [{"key": k, "n": n, "ts": ts} for k, n, ts in batch])
            collector.settle()
            reference.run_batch([(k, {"n": n, "ts": ts}, ts) for k, n, ts in batch])
    finally:
        rows = collector.finish()
    assert by_key(rows) == by_key(reference.rows)
    assert [r[2] for r in kinds(rows, "dead_letter")] == ['{"n":"x","ts":2000}']
    assert ("output", "a", '[3,[1000,3000]]') in [r[:3] for r in rows]
    assert ("output", "b", '["timed out",17]') in [r[:3] for r in rows]


def timer_scenario(kind: str, broken):
    """A spec whose timer call raises while the file ``broken`` exists: the function's own timer
    (set_timeout_timestamp, 1 s after a record) or the spec's idle timeout (1 s). Keys named
    clock* only move the watermark."""

    def close(key, value, state):
        if state.has_timed_out() or state.is_timing_out():
            if broken.exists():
                raise RuntimeError("timer broke")
            kept = state.get()
            if state.has_timed_out():
                state.remove()
            return ("fired", kept)
        if key.startswith("clock"):
            return None
        state.update(value)
        if kind == "own timer":
            state.set_timeout_timestamp(value + 1_000)
        return None

    spec = StateSpec.function(close).event_time(EVENT_TIME)
    return spec if kind == "own timer" else spec.timeout("1 second")


@pytest.mark.parametrize("kind", ["own timer", "idle timeout"])
def test_a_timer_call_that_raises_is_retried_with_no_new_data_as_the_tester_retries_it(
    kind, spark, settings, bootstrap, new_topic, tmp_path
):
    """Issue 51: a raising call of either kind of timer is dead-lettered and re-armed, so the key
    is called again once the watermark moves on, without new data of its own; the engine's rows
    are the tester's."""
    topic, broken = new_topic(), tmp_path / "broken"
    broken.touch()
    batches = [
        [("a", 1_000)],  # a's timer at 2 s
        [("clock", 5_000)],  # watermark 5 s: a's timer call raises
        [("clock", 9_000)],  # watermark 9 s, the call no longer raises: a is called again
    ]
    spec = timer_scenario(kind, broken)
    rows = run_beside_the_tester(spark, settings, bootstrap, topic, spec, batches, tmp_path, before_step={2: broken.unlink})
    assert by_key(rows)["a"] == [
        ("snapshot", "1000", None),
        ("dead_letter", None, "RuntimeError: timer broke"),
        ("output", '["fired",1000]', None),
        ("snapshot", None, None),
    ]


class Counter(BaseModel):
    count: int


def test_state_type_changed_between_releases_fails_clearly(spark, settings, bootstrap, new_topic, tmp_path):
    topic = new_topic()
    checkpoint = str(tmp_path / "cp")

    def count_v1(key, value, state):
        state.update(state.get_option(0) + 1)

    def count_v2(key, value, state):
        current = state.get_option(Counter(count=0))
        state.update(Counter(count=current.count + 1))

    produce_json(bootstrap, topic, [{"key": "a", "n": "1", "ts": 0}])
    df = read_json_topic(spark, settings.bootstrap_servers, topic, SCHEMA)
    RowCollector(map_with_state(df, "key", StateSpec.function(count_v1), value="n"), checkpoint, available_now=True).await_done()

    produce_json(bootstrap, topic, [{"key": "a", "n": "1", "ts": 0}])
    spec_v2 = StateSpec.function(count_v2).state_type(Counter)
    collector = RowCollector(map_with_state(df, "key", spec_v2, value="n"), checkpoint, available_now=True)
    with pytest.raises(StreamingQueryException, match=r"StateTypeError: stored state of key 'a' is not a valid Counter"):
        collector.await_done()


def test_the_state_variables_schemas_are_the_ddl_existing_checkpoints_recorded(spark):
    """The processor gives Spark StructTypes (no parse round trip per task); a checkpoint
    written when it gave DDL text holds Spark's parse of that text, which must be the same."""
    recorded = {
        "hot": "blob BINARY", "cold key": "key STRING", "cold value": "state BINARY, deadline LONG",
        "wheel key": "tick LONG", "wheel value": "keys BINARY",
    }
    given = {
        "hot": processor.HOT_SCHEMA, "cold key": processor.COLD_KEY_SCHEMA, "cold value": processor.COLD_VALUE_SCHEMA,
        "wheel key": processor.WHEEL_KEY_SCHEMA, "wheel value": processor.WHEEL_VALUE_SCHEMA,
    }
    assert {name: schema.json() for name, schema in given.items()} == {
        name: StructType.fromDDL(ddl).json() for name, ddl in recorded.items()
    }


def test_a_session_without_the_rocksdb_store_is_refused_before_the_query_starts(spark, settings, new_topic):
    """Spark runs the transformWithState family on RocksDB only, and says so only once the query
    runs (STORE_BACKEND_NOT_SUPPORTED_FOR_TWS); the library says it when the operator is defined,
    naming the setting."""
    from streamstate.state import StateStoreUnsupported
    from streamstate.state.operators import PROVIDER_SETTING, ROCKSDB_PROVIDER

    df = read_json_topic(spark, settings.bootstrap_servers, new_topic(), SCHEMA)
    spec = StateSpec.function(lambda key, value, state: None)
    before = spark.conf.get(PROVIDER_SETTING)
    spark.conf.set(PROVIDER_SETTING, "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider")
    try:
        with pytest.raises(StateStoreUnsupported, match=f"{PROVIDER_SETTING}={ROCKSDB_PROVIDER}"):
            map_with_state(df, key="key", spec=spec)
    finally:
        spark.conf.set(PROVIDER_SETTING, before)
    map_with_state(df, key="key", spec=spec)  # with the store set, the same call defines the query


def _counts_per_key(key, values, state):
    """Per key: its records so far, with a deadline ten minutes on (filed in the timer wheel when evicted)."""
    state.update(state.get_option(0) + values.num_rows)
    state.set_timeout_timestamp(max(values["ts"]) + 600_000)
    return [Emit("count", key, str(state.get()))]


def _counts_per_bucket(state, records, watermark_ms):
    """The same counts over a whole bucket at once (no deadlines)."""
    state = dict(state or {})
    keys = [] if records is None else records.column(KEY_COLUMN).to_pylist()
    for key in keys:
        state[key] = state.get(key, 0) + 1
    touched = sorted(set(keys))
    return BucketResult(state, [Emit("count", k, str(state[k])) for k in touched], [(k, str(state[k])) for k in touched], None)


def test_a_checkpoint_of_the_per_key_engine_is_carried_on_by_a_bucket_function(spark, settings, bootstrap, new_topic, tmp_path):
    """One bucket with room for one hot key: the others' states are in the cold map and their
    deadlines in the wheel when the spec gains a bucket function, which gets every one of them."""
    topic, checkpoint = new_topic(), str(tmp_path / "cp")
    df = read_json_topic(spark, settings.bootstrap_servers, topic, SCHEMA, event_time_ms="ts", watermark_delay="0 seconds")
    per_key = StateSpec.columnar_function(_counts_per_key).event_time(EVENT_TIME).buckets(1).hot_keys(1)

    for keys in (("a", "b", "c"), ("a",)):  # the second run touches a alone: b and c go cold
        produce_json(bootstrap, topic, [{"key": k, "n": "1", "ts": 1_000} for k in keys])
        RowCollector(map_with_state(df, "key", per_key, value=["n", "ts"]), checkpoint, available_now=True).await_done()

    produce_json(bootstrap, topic, [{"key": k, "n": "1", "ts": 2_000} for k in ("a", "b", "c")])
    carried = per_key.over_buckets(_counts_per_bucket, from_keys=dict)
    collector = RowCollector(map_with_state(df, "key", carried, value=["n", "ts"]), checkpoint, available_now=True)
    collector.await_done()
    rows = collector.finish()
    assert sorted((r[1], r[2]) for r in kinds(rows, "count")) == [("a", "3"), ("b", "2"), ("c", "2")]
