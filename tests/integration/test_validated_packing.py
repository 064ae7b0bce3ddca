"""The jobs' one Python pass over the source (validate, lay out, bucket, pack) gives the
stateful operator exactly the rows, buckets and watermark input that Spark's own steps give:
validation, the invalid-records key, ``map_with_state``'s layout and ``bucket_of``. A key in
another bucket would lose its state, so the hash is checked against Spark's ``xxhash64``."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from streamstate_jobs.anomalies import job as anomalies_job
from streamstate_jobs.sessions import job as sessions_job
from streamstate_jobs.validation import (
    DEAD_LETTER_COLUMNS,
    INVALID_RECORDS_KEY,
    RowLayout,
    _raw_columns,
    _validating_packer,
    validate,
    validated_schema,
)
from streamstate_pipeline.settings import Settings
from streamstate.state.keyrun import INPUT_COLUMNS, TIME
from streamstate.state.operators import _input_layout, bucket_of
from streamstate.state.packing import BLOB, BUCKET, LATEST, PACKED_WITH_LATEST_SCHEMA, unpack
from streamstate.state.placement import balanced_labels, key_buckets
from streamstate.state.spec import StateSpec
from tests.json_records import KEY_FIELD, MODELS
from tests.json_records import raw_batches

pytestmark = pytest.mark.spark

RAW_SCHEMA = "key BINARY, value BINARY, topic STRING, `partition` INT, offset LONG, timestamp TIMESTAMP"
JOBS = {"events": sessions_job, "metrics": anomalies_job}


@pytest.mark.parametrize("count, labels", [(8, None), (64, None), (8, balanced_labels(8, 2)), (7, balanced_labels(7, 3))])
def test_key_buckets_are_sparks_bucket_of(spark, count, labels):
    rnd = random.Random(count)
    alphabet = "az09-_.é漢\u2028\x00😀\U0010ffff "
    keys = ["", "a", INVALID_RECORDS_KEY] + ["".join(rnd.choices(alphabet, k=rnd.randint(1, 80))) for _ in range(2000)]
    spec = StateSpec.batch_function(lambda key, rows, state: []).buckets(count, labels)
    frame = spark.createDataFrame([(i, k) for i, k in enumerate(keys)], "i INT, k STRING")
    sparks = [row.b for row in frame.select("i", bucket_of(F.col("k"), spec).alias("b")).orderBy("i").collect()]
    assert key_buckets(pa.array(keys), count, spec.bucket_labels).to_pylist() == sparks


def _sparks_layout(raw, model, columns, spec, max_clock_skew_ms):
    """The rows and buckets Spark's own steps give the stateful operator (the jobs' earlier plan)."""
    key = columns[0]
    validated = validate(raw, model, max_clock_skew_ms)
    keyed = validated.withColumn(key, F.when(F.col("error").isNull(), F.col(key)).otherwise(F.lit(INVALID_RECORDS_KEY)))
    layout = _input_layout(keyed.select(*columns, *DEAD_LETTER_COLUMNS), key, spec, None)
    return layout.withColumn(BUCKET, bucket_of(layout[INPUT_COLUMNS[0]], spec)).toArrow()


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(raw_batches(), st.sampled_from([None, balanced_labels(8, 2)]))
def test_the_one_pass_gives_the_operator_what_sparks_steps_give(spark, case, labels):
    topic, batch, max_clock_skew_ms = case
    batch = batch.drop_columns([c for c in batch.schema.names if c == "sequenceNumber"])
    model, job = MODELS[topic], JOBS[topic]
    columns = job.STATE_COLUMNS
    assert columns[0] == KEY_FIELD[topic]
    spec = job.state_spec(Settings()).buckets(8, labels)
    raw = spark.createDataFrame(pa.Table.from_batches([batch]), RAW_SCHEMA)

    expected = _sparks_layout(raw, model, columns, spec, max_clock_skew_ms)
    layout = RowLayout(columns[0], (*columns, *DEAD_LETTER_COLUMNS), "ts", spec.bucket_count, spec.bucket_labels)
    packer = _validating_packer(model, validated_schema(model), max_clock_skew_ms, layout)
    packed = _raw_columns(raw).mapInArrow(packer, PACKED_WITH_LATEST_SCHEMA).collect()

    got = []
    for row in packed:
        rows = unpack([row[BLOB]])
        assert rows is not None
        assert [f.type for f in rows.schema] == [f.type for f in expected.schema if f.name != BUCKET]
        times = [t for t in rows.column(INPUT_COLUMNS[TIME]).to_pylist() if t is not None]
        assert row[LATEST] == (max(times) if times else None)
        got += [{**r, BUCKET: row[BUCKET]} for r in rows.to_pylist()]

    def by_offset(rows):
        return sorted(rows, key=lambda r: (r[INPUT_COLUMNS[4]], r[INPUT_COLUMNS[5]], repr(r)))

    assert by_offset(got) == by_offset(expected.to_pylist())
