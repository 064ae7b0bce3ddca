"""Validation micro-benchmark: µs per record of the jobs' validation step, per-record pydantic vs the fast path.

    .venv/bin/python -m bench.validation [--records 100000] [--runs 5]
    .venv/bin/python -m bench --only validation        (the same figure in bench/results.json; opt-in)

No broker and no Spark: the bench's own datasets (the producers' generators with the seed
and sizes of bench/dataset.py: user events over a tenth as many users, metric points over a
hundredth as many series) are cut into Arrow batches of 10,000 rows (Spark's
``spark.sql.execution.arrow.maxRecordsPerBatch``) shaped as ``mapInArrow`` hands them to the
validation step, then validated by

- *per-record*: the step as it was before the fast path, kept here as the baseline: one
  ``parse_input`` (pydantic) call and one dict of columns per record;
- *fast path*: :func:`streamstate_jobs.validation.validate_batch`, msgspec decoders derived
  from the contracts, the contract only for what they leave open, vectorized clock-skew check.

Each dataset is measured with good records only and with 3% bad ones (the producers'
malformed kinds, ``malformed_rate=0.03``). Both paths must produce equal batches, or the
figure fails. The figure is µs per record: the median (and best) of ``--runs`` passes over
every batch, CPU time of this one process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any, Callable

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema

from streamstate_pipeline.contracts import ContractError, Metric, UserEvent, dead_letter_text, parse_input
from streamstate.state.schema import spark_schema
from streamstate_jobs.contracts_fast import fast_contract
from streamstate_jobs.rules.event_time import STAGE as CLOCK_SKEW, clock_skew_reason
from streamstate_jobs.validation import validate_batch, validated_schema
from streamstate_producers.generators import MetricGenerator, UserEventGenerator

BATCH_ROWS = 10_000
SEED = 20_261_122  # bench/__main__.py's
MAX_CLOCK_SKEW_MS = 60_000
BAD_SHARE = 0.03


def per_record_batch(batch: pa.RecordBatch, model, arrow_schema: pa.Schema, names: list[str], max_clock_skew_ms: int) -> pa.RecordBatch:
    """The validation step before the fast path (spark-jobs/src/streamstate_jobs/validation.py until this benchmark): the baseline."""
    columns: dict[str, list] = {f.name: [] for f in arrow_schema}
    keys = batch.column("key").to_pylist()
    values = batch.column("value").to_pylist()
    timestamps = batch.column("timestamp").cast(pa.int64()).to_pylist()
    columns["topic"] = batch.column("topic").to_pylist()
    columns["partition"] = batch.column("partition").to_pylist()
    columns["offset"] = batch.column("offset").to_pylist()
    columns["kafka_ts"] = [None if t is None else t // 1000 for t in timestamps]
    columns["sequence_number"] = batch.column("sequenceNumber").to_pylist() if "sequenceNumber" in batch.schema.names else [None] * batch.num_rows
    for key, value, kafka_ts in zip(keys, values, columns["kafka_ts"]):
        try:
            record = parse_input(model, key, value)
            stage, reason = CLOCK_SKEW, clock_skew_reason(record.ts, kafka_ts, max_clock_skew_ms)
        except ContractError as exc:
            stage, reason = "contract", exc.reason
        if reason is not None:
            for name in names:
                columns[name].append(None)
            columns["error"].append(reason)
            columns["error_stage"].append(stage)
            columns["raw_key"].append(dead_letter_text(key))
            columns["raw_value"].append(dead_letter_text(value))
            continue
        for name in names:
            columns[name].append(getattr(record, name))
        columns["error"].append(None)
        columns["error_stage"].append(None)
        columns["raw_key"].append(None)
        columns["raw_value"].append(None)
    return pa.RecordBatch.from_arrays([pa.array(columns[f.name], type=f.type) for f in arrow_schema], schema=arrow_schema)


def dataset(kind: str, records: int, bad_share: float) -> list[pa.RecordBatch]:
    """The bench's records of ``kind`` as mapInArrow input batches, stamped by a producer on time."""
    if kind == "user_events":
        generator = UserEventGenerator(seed=SEED, users=max(1, records // 10), topic="bench-user-events", malformed_rate=bad_share)
    else:
        generator = MetricGenerator(seed=SEED, series=max(1, records // 100), topic="bench-metrics", anomaly_rate=0.001, malformed_rate=bad_share)
    rows = list(generator.take(records))
    batches = []
    for start in range(0, records, BATCH_ROWS):
        part = rows[start : start + BATCH_ROWS]
        kafka_ms = [_event_time(r.value) for r in part]
        batches.append(pa.RecordBatch.from_pydict({
            "key": pa.array([r.key for r in part], pa.binary()),
            "value": pa.array([r.value for r in part], pa.binary()),
            "topic": pa.array([r.topic for r in part], pa.string()),
            "partition": pa.array([i % 4 for i in range(len(part))], pa.int32()),
            "offset": pa.array(range(start, start + len(part)), pa.int64()),
            "timestamp": pa.array([t * 1000 for t in kafka_ms], pa.timestamp("us", tz="UTC")),
        }))
    return batches


def _event_time(value: bytes | None) -> int:
    try:
        ts = json.loads(value)["ts"]
        return ts if isinstance(ts, int) and 0 <= ts < 2**53 else 1_700_000_000_000
    except Exception:  # noqa: BLE001 - a malformed record: any timestamp will do
        return 1_700_000_000_000


def _cpu_seconds(run: Callable[[], Any]) -> float:
    started = time.process_time()
    run()
    return time.process_time() - started


def measure_one(model, batches: list[pa.RecordBatch], runs: int) -> dict[str, Any]:
    schema = to_arrow_schema(validated_schema(model))
    names = [f.name for f in spark_schema(model).fields]
    contract = fast_contract(model)
    records = sum(b.num_rows for b in batches)
    before = [per_record_batch(b, model, schema, names, MAX_CLOCK_SKEW_MS) for b in batches]
    after = [validate_batch(b, contract, schema, MAX_CLOCK_SKEW_MS) for b in batches]
    if not all(a.equals(b) for a, b in zip(before, after)):
        raise AssertionError(f"{model.__name__}: the fast path's batches differ from the per-record path's")
    fallback = sum(contract.parse(b.column("key"), b.column("value")).fallback for b in batches)
    refused = records - sum(b.column("error").null_count for b in before)
    figures: dict[str, Any] = {"records": records, "refused": refused, "fallback_records": fallback}
    for label, step in (
        ("per_record", lambda: [per_record_batch(b, model, schema, names, MAX_CLOCK_SKEW_MS) for b in batches]),
        ("fast_path", lambda: [validate_batch(b, contract, schema, MAX_CLOCK_SKEW_MS) for b in batches]),
    ):
        times = [_cpu_seconds(step) / records * 1e6 for _ in range(runs)]
        figures[label] = {"median_us_per_record": round(statistics.median(times), 3), "best_us_per_record": round(min(times), 3)}
    figures["speedup"] = round(figures["per_record"]["median_us_per_record"] / figures["fast_path"]["median_us_per_record"], 1)
    return figures


def measure(records: int = 100_000, runs: int = 5) -> dict[str, Any]:
    """Every dataset, good only and with 3% bad records: µs per record before and after."""
    result: dict[str, Any] = {"batch_rows": BATCH_ROWS, "runs": runs, "bad_share": BAD_SHARE, "datasets": {}}
    for kind, model in (("user_events", UserEvent), ("metrics", Metric)):
        for label, share in (("good", 0.0), ("with_bad", BAD_SHARE)):
            figures = measure_one(model, dataset(kind, records, share), runs)
            result["datasets"][f"{kind}_{label}"] = figures
            print(f"  {kind:11s} {label:8s}: per-record {figures['per_record']['median_us_per_record']:.2f} µs, "
                  f"fast path {figures['fast_path']['median_us_per_record']:.2f} µs per record "
                  f"({figures['speedup']}x; {figures['refused']:,} refused, {figures['fallback_records']:,} through the contract)", flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.validation", description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000, help="records per dataset")
    parser.add_argument("--runs", type=int, default=5, help="passes per path; the figure is their median")
    args = parser.parse_args(argv)
    print(f"validation: {args.records:,} records per dataset in batches of {BATCH_ROWS:,}, {args.runs} runs, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    measure(args.records, args.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
