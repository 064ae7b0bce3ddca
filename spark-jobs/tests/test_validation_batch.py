"""The validation step's Arrow batch equals, row for row, what the per-record contract and
clock-skew rule give: typed columns of good records, reason, stage and raw bytes of bad ones
(no SparkSession: the batch function itself, on batches shaped as Spark hands them over)."""

from __future__ import annotations

import os

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from pyspark.sql.pandas.types import to_arrow_schema

from streamstate_pipeline.contracts import ContractError, dead_letter_text, parse_input
from streamstate_jobs.contracts_fast import fast_contract
from streamstate_jobs.rules.event_time import STAGE as CLOCK_SKEW, clock_skew_reason
from streamstate_jobs.validation import validate_batch, validated_schema
from tests.json_records import MODELS, TIMESTAMP, raw_batches, same

EXAMPLES = int(os.environ.get("FAST_PATH_EXAMPLES", "300")) // 2
BATCH = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)


def expected_row(model, key, value, topic, partition, offset, micros, sequence_number, max_clock_skew_ms) -> dict:
    """One output row as the per-record validation step made it: the contract, then the clock-skew rule."""
    kafka_ts = None if micros is None else micros // 1000
    row = dict.fromkeys(model.model_fields)
    try:
        record = parse_input(model, key, value)
        stage, reason = CLOCK_SKEW, clock_skew_reason(record.ts, kafka_ts, max_clock_skew_ms)
    except ContractError as error:
        stage, reason = "contract", error.reason
    if reason is None:
        row.update({name: getattr(record, name) for name in model.model_fields})
    row.update(topic=topic, partition=partition, offset=offset, kafka_ts=kafka_ts, sequence_number=sequence_number)
    row.update(error=reason, error_stage=None if reason is None else stage)
    row.update(raw_key=None if reason is None else dead_letter_text(key), raw_value=None if reason is None else dead_letter_text(value))
    return row


@BATCH
@given(raw_batches())
def test_a_batch_is_validated_as_the_contract_and_the_clock_skew_rule_decide_each_record(case):
    topic, batch, max_clock_skew_ms = case
    model = MODELS[topic]
    schema = to_arrow_schema(validated_schema(model))
    result = validate_batch(batch, fast_contract(model), schema, max_clock_skew_ms)
    assert result.schema == schema and result.num_rows == batch.num_rows
    micros = batch.column("timestamp").cast(pa.int64()).to_pylist()
    for got, raw, at in zip(result.to_pylist(), batch.drop_columns(["timestamp"]).to_pylist(), micros):
        expected = expected_row(
            model, raw["key"], raw["value"], raw["topic"], raw["partition"], raw["offset"], at,
            raw.get("sequenceNumber"), max_clock_skew_ms,
        )
        assert got.keys() == expected.keys()
        assert all(same(got[c], expected[c]) if expected[c] is not None else got[c] is None for c in expected), (got, expected)


def _metric_batch(values: list[bytes | None], kafka_ms: list[int | None]) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_pydict({
        "key": pa.array([None] * n, pa.binary()),
        "value": pa.array(values, pa.binary()),
        "topic": pa.array(["metrics"] * n),
        "partition": pa.array([0] * n, pa.int32()),
        "offset": pa.array(list(range(n)), pa.int64()),
        "timestamp": pa.array([None if t is None else t * 1000 for t in kafka_ms], TIMESTAMP),
    })


def test_clock_skew_is_judged_on_the_whole_batch_with_the_rules_own_reason():
    model = MODELS["metrics"]
    schema = to_arrow_schema(validated_schema(model))
    point = b'{"series_id":"s","ts":%d,"value":1}'
    batch = _metric_batch(
        [point % 1_000_060_000, point % 1_000_060_001, point % 1_000_060_001, point % 1_000_060_001, b"{}"],
        [1_000_000_000, 1_000_000_000, None, -5, 1_000_000_000],
    )
    rows = validate_batch(batch, fast_contract(model), schema, 60_000).to_pylist()
    assert [r["error_stage"] for r in rows] == [None, CLOCK_SKEW, None, None, "contract"]
    assert rows[1]["error"] == clock_skew_reason(1_000_060_001, 1_000_000_000, 60_000)
    assert rows[1]["ts"] is None and rows[1]["series_id"] is None and rows[1]["raw_value"] == (point % 1_000_060_001).decode()
    assert [r["ts"] for r in rows] == [1_000_060_000, None, 1_000_060_001, 1_000_060_001, None]
    assert [r["kafka_ts"] for r in rows] == [1_000_000_000, 1_000_000_000, None, -5, 1_000_000_000]
    assert all(r["sequence_number"] is None for r in rows)


def test_an_empty_batch_keeps_the_schema():
    model = MODELS["events"]
    schema = to_arrow_schema(validated_schema(model))
    assert validate_batch(_metric_batch([], []), fast_contract(model), schema, 60_000).schema == schema


def test_the_validator_ships_to_python_workers_by_pickle():
    """Spark pickles the mapInArrow function into its workers; the derived msgspec types cannot be pickled."""
    from pyspark import cloudpickle

    from streamstate_jobs.validation import _validator

    model = MODELS["metrics"]
    shipped = cloudpickle.loads(cloudpickle.dumps(_validator(model, validated_schema(model), 60_000)))
    (out,) = list(shipped(iter([_metric_batch([b'{"series_id":"s","ts":1,"value":2}', b"[]"], [5, 5])])))
    assert out.column("value").to_pylist() == [2.0, None]
    assert out.column("error").to_pylist() == [None, "expected a JSON object, got []"]


def test_the_layout_keys_invalid_rows_apart_and_takes_the_event_time_it_is_given():
    from streamstate_jobs.validation import INVALID_RECORDS_KEY, RowLayout
    from streamstate.state.keyrun import INPUT_COLUMNS, KEY, TIME, VALUE

    model = MODELS["metrics"]
    schema = to_arrow_schema(validated_schema(model))
    batch = _metric_batch([b'{"series_id":"s","ts":7,"value":1}', b"{}"], [5, 5])
    validated = validate_batch(batch, fast_contract(model), schema, 60_000)
    columns = ("series_id", "ts", "value", "error")
    timed = RowLayout("series_id", columns, "ts", 8, None).lay_out(validated)
    untimed = RowLayout("series_id", columns, None, 8, None).lay_out(validated)
    assert timed.column(INPUT_COLUMNS[KEY]).to_pylist() == ["s", INVALID_RECORDS_KEY]
    assert [row["series_id"] for row in timed.column(INPUT_COLUMNS[VALUE]).to_pylist()] == ["s", INVALID_RECORDS_KEY]
    assert timed.column(INPUT_COLUMNS[TIME]).to_pylist() == [7, None]
    assert untimed.column(INPUT_COLUMNS[TIME]).to_pylist() == [None, None]
