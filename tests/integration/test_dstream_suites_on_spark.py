"""Spark's own DStream state suites (tests/dstream_suites.py) as real streaming queries.

One query over JSON file sources runs every case: each step writes one file per source (an
empty file is an empty batch, as the suites' empty and null batches) and runs the query once
from its checkpoint (``trigger(once=True)``: exactly one micro-batch, so a batch holds exactly
each case's batch). A stateful operator costs every batch a fixed time, so the mapWithState
cases without a timeout share one operator, their keys prefixed with the case (the function
dispatches on it); the timing-out case and each updateStateByKey case (whose function sees no
key) have their own. Each case's rows must equal, batch by
batch, the in-memory tester's at the batch times Spark used (read from the offset log), and
meet the suite's own expectations. The timing-out case's expectations hold for its one-second
ManualClock, which a query cannot have: on Spark it is compared with the tester at Spark's
own batch times, over its first batches.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from streamstate.state import StateSpec, map_with_state, update_state_by_key
from streamstate.state.tester import by_key
from tests.dstream_suites import CASES, SuiteCase, assert_meets_suite, run_on_tester

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

SPARK_BATCHES = 8  # the longest case but the timing-out one, which runs its first 8 here


def batches_on_spark(case: SuiteCase) -> list[list[str]]:
    return case.batches[:SPARK_BATCHES]


def shares_an_operator(case: SuiteCase) -> bool:
    return not case.updates and case.spec.timeout_ms is None


def dispatching_spec(cases: list[SuiteCase]) -> StateSpec:
    """One spec for several mapWithState cases: key ``"<case>|<word>"`` calls that case's function on ``word``."""
    functions = {str(index): case.spec.func for index, case in enumerate(cases)}

    def dispatch(key: str, value, state):
        index, word = key.split("|", 1)
        return functions[index](word, value, state)

    initial = [(f"{index}|{key}", state) for index, case in enumerate(cases) for key, state in case.spec.initial or []]
    return StateSpec.function(dispatch).initial_state(initial or None)


def operator_rows(spark, name: str, folder: Path, spec: StateSpec | None = None, case: SuiteCase | None = None):
    words = spark.readStream.schema("word STRING").json(str(folder)).select("word", F.lit(1).alias("one"))
    if case is not None:
        result = update_state_by_key(words, key="word", func=case.update_func, value="one", initial_state=case.spec.initial)
    else:
        result = map_with_state(words, key="word", spec=spec, value="one")
    return result.all.withColumn("operator", F.lit(name))


def test_spark_suite_cases_on_a_streaming_query(spark, tmp_path):
    shared = [case for case in CASES if shares_an_operator(case)]
    alone = [case for case in CASES if not shares_an_operator(case)]
    folders = {name: tmp_path / f"in-{index}" for index, name in enumerate(["shared", *(case.name for case in alone)])}
    for folder in folders.values():
        folder.mkdir()
    streams = [operator_rows(spark, "shared", folders["shared"], spec=dispatching_spec(shared))]
    for case in alone:
        if case.updates:
            streams.append(operator_rows(spark, case.name, folders[case.name], case=case))
        else:
            streams.append(operator_rows(spark, case.name, folders[case.name], spec=case.spec))
    union = streams[0]
    for stream in streams[1:]:
        union = union.unionByName(stream)

    rows: dict[int, list[tuple]] = {}
    lock = threading.Lock()

    def collect(batch, batch_id: int) -> None:
        collected = [tuple(row) for row in batch.select("operator", "kind", "key", "payload", "reason").collect()]
        with lock:
            rows[batch_id] = collected

    def step_words(case: SuiteCase, step: int) -> list[str]:
        batches = batches_on_spark(case)
        return batches[step] if step < len(batches) else []

    checkpoint = tmp_path / "checkpoint"
    for step in range(SPARK_BATCHES):
        shared_words = [f"{index}|{word}" for index, case in enumerate(shared) for word in step_words(case, step)]
        files = {"shared": shared_words, **{case.name: step_words(case, step) for case in alone}}
        for name, words in files.items():
            (folders[name] / f"{step:03d}.json").write_text("".join(json.dumps({"word": w}) + "\n" for w in words))
        query = union.writeStream.foreachBatch(collect).option("checkpointLocation", str(checkpoint)).trigger(once=True).start()
        query.awaitTermination(300)
        assert query.exception() is None, query.exception()
        assert sorted(rows) == list(range(step + 1)), f"step {step} ran batches {sorted(rows)}"

    batch_times = [json.loads((checkpoint / "offsets" / str(step)).read_text().splitlines()[1])["batchTimestampMs"]
                   for step in range(SPARK_BATCHES)]
    for case in CASES:
        batches = batches_on_spark(case)
        if case in shared:
            prefix = f"{shared.index(case)}|"
            on_spark = [
                [(kind, key[len(prefix):], payload, reason) for operator, kind, key, payload, reason in rows[step]
                 if operator == "shared" and key.startswith(prefix)]
                for step in range(len(batches))
            ]
        else:
            on_spark = [[row[1:] for row in rows[step] if row[0] == case.name] for step in range(len(batches))]
        on_tester = run_on_tester(case, batches, batch_times)
        for step, (spark_rows, tester_rows) in enumerate(zip(on_spark, on_tester)):
            assert by_key(spark_rows) == by_key(tester_rows), f"{case.name}: batch {step} differs from the tester"
        if case.processing_times_ms is None:
            assert_meets_suite(case, on_spark)
