"""Apache Spark's own test cases for the DStream state operators, ported as data.

Each :class:`SuiteCase` is one test of Spark's ``MapWithStateSuite`` or one ``updateStateByKey``
test of its ``BasicOperationsSuite``: the batches of words (each word a record with value 1, as
the suites' ``s.map(x => (x, 1))``), the function, and what Spark expects after each batch (the
outputs, and for mapWithState the whole state). ``library/tests/test_dstream_suites.py`` runs them
through the in-memory :class:`~streamstate.state.tester.StateTester`;
``tests/integration/test_dstream_suites_on_spark.py`` runs them as real streaming queries
(:func:`run_cases_on_a_streaming_query`), and ``tests/connect/`` runs the same on Spark Connect.

Cases of those suites that cannot apply to Structured Streaming, and why:

* ``mapWithState - type inferencing and class tags``: checks Scala's inferred ``ClassTag``s;
  Python has none (a typed state is ``StateSpec.state_type``, tested in test_state_api_units).
* ``mapWithState - checkpoint durations``: the DStream's RDD checkpoint interval; a Structured
  Streaming query checkpoints its state every batch.
* ``mapWithState - driver failure recovery``: a restart from the checkpoint; the Spark runs
  here restart the query from its checkpoint before every batch, and the crash tests
  (tests/reliability) kill jobs mid-batch.
* ``updateStateByKey - testing time stamps as input``: its update function takes the batch time;
  ``update_state_by_key``'s takes ``(values, state)`` only, as the seeds' do (a function that
  needs the batch time uses ``map_with_state``, whose ``State`` has ``processing_time_ms``).
* ``updateStateByKey - with initial value RDD``: the partition-iterator form of the update
  function (Scala's ``Iterator[(K, Seq[V], Option[S])]``), which has no Python counterpart;
  its data and expectations are those of ``simple with initial value RDD``, ported below.
* ``numPartitions(1)`` in ``state removing`` is left out: the partition count of a Structured
  Streaming state operator is ``spark.sql.shuffle.partitions`` (see ``StateSpec.num_partitions``).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from pyspark.sql import functions as F

from streamstate.state import StateSpec, map_with_state, update_state_by_key
from streamstate.state.tester import StateTester, by_key
from tests.state_queries import batch_sink

SECOND = 1000


@dataclass(frozen=True)
class SuiteCase:
    """One ported test: ``outputs[i]`` and ``states[i]`` are Spark's expectations after batch i
    (None: the test does not state them). ``output_view`` turns an update case's emitted state
    into the suite's output value (e.g. ``.mapValues(_.counter)``)."""

    name: str
    spec: StateSpec
    batches: list[list[str]]
    outputs: list[list] | None = None
    states: list[dict] | None = None
    processing_times_ms: list[int] | None = None  # the suite's ManualClock, one second per batch
    check: Callable[[list[list], list[dict]], None] | None = None  # a test that asserts otherwise
    output_view: Callable[[Any], Any] | None = None
    update_func: Callable[[list, Any], Any] | None = None  # an updateStateByKey case's function

    @property
    def updates(self) -> bool:
        """An updateStateByKey case: its outputs are (key, state) pairs."""
        return self.update_func is not None


def update_case(name: str, func: Callable[[list, Any], Any], batches: list[list[str]], initial: list | None = None, **expected) -> SuiteCase:
    return SuiteCase(name, StateSpec.updater(func).initial_state(initial), batches, update_func=func, **expected)


def normal(value: Any) -> Any:
    """A value as it comes back from JSON (tuples become lists)."""
    return json.loads(json.dumps(value))


def batch_outputs(case: SuiteCase, rows: list[tuple]) -> Counter:
    """The outputs among one batch's rows (``kind, key, payload, ...``), as a multiset of JSON texts."""
    found = []
    for kind, key, payload, *_ in rows:
        if kind != "output":
            continue
        value = json.loads(payload)
        if case.output_view is not None:
            value = case.output_view(value)
        found.append(json.dumps([key, value] if case.updates else value))
    return Counter(found)


def expected_outputs(case: SuiteCase, index: int) -> Counter:
    return Counter(json.dumps(normal(list(value) if case.updates else value)) for value in case.outputs[index])


def fold_states(batches: list[list[tuple]], initial: list | None = None) -> list[dict]:
    """The whole state after each batch, from the snapshot rows: a changelog (None removes) of
    the changes to the initial state (which the query does not publish again)."""
    state: dict = {key: normal(value) for key, value in initial or []}
    after = []
    for rows in batches:
        for kind, key, payload, *_ in rows:
            if kind == "snapshot":
                if payload is None:
                    state.pop(key, None)
                else:
                    state[key] = json.loads(payload)
        after.append(dict(state))
    return after


def run_on_tester(case: SuiteCase, batches: list[list[str]], processing_times_ms: list[int]) -> list[list[tuple]]:
    """Each batch's rows on the in-memory tester, at the given batch times."""
    tester = StateTester(case.spec)
    return [
        [tuple(row) for row in tester.run_batch([(word, 1) for word in words], processing_time_ms=time)]
        for words, time in zip(batches, processing_times_ms)
    ]


def assert_meets_suite(case: SuiteCase, batches: list[list[tuple]]) -> None:
    """The rows of each batch meet what Spark's test expects."""
    assert len(batches) == len(case.batches), f"{case.name}: {len(batches)} batches for {len(case.batches)}"
    states = fold_states(batches, case.spec.initial)
    if case.outputs is not None:
        for index, rows in enumerate(batches):
            assert batch_outputs(case, rows) == expected_outputs(case, index), f"{case.name}: outputs of batch {index}"
    if case.states is not None:
        for index, state in enumerate(states):
            assert state == normal(case.states[index]), f"{case.name}: state after batch {index}"
    if case.check is not None:
        case.check([sorted(batch_outputs(case, rows).elements()) for rows in batches], states)


# ---------------------------------------------------------------------------------- MapWithStateSuite
COUNTING_INPUT = [[], ["a"], ["a", "b"], ["a", "b", "c"], ["a", "b"], ["a"], []]
COUNTING_STATES = [
    {},
    {"a": 1},
    {"a": 2, "b": 1},
    {"a": 3, "b": 2, "c": 1},
    {"a": 4, "b": 3, "c": 1},
    {"a": 5, "b": 3, "c": 1},
    {"a": 5, "b": 3, "c": 1},
]


def running_sum(key: str, value: int | None, state) -> int:
    total = (value or 0) + state.get_option(0)
    state.update(total)
    return total


def doubled_key(key: str, value: int | None, state) -> str:
    state.update((value or 0) + state.get_option(0))
    return key * 2


def sum_as_pair(key: str, value: int | None, state) -> tuple[str, int]:
    total = (value or 0) + state.get_option(0)
    state.update(total)
    return (key, total)


def sum_returning_nothing(key: str, value: int | None, state) -> None:
    state.update((value or 0) + state.get_option(0))
    return None


def remove_on_second_sight(key: str, value: int | None, state) -> str | None:
    if state.exists():
        state.remove()
        return key
    state.update(value)
    return None


def mark_and_report_timeout(key: str, value: int | None, state) -> str | None:
    if value is not None:
        state.update(1)
    return key if state.is_timing_out() else None


def check_timing_out(outputs: list[list], states: list[dict]) -> None:
    # b and c are returned once each, when they time out; a stays active throughout.
    assert sorted(o for batch in outputs for o in batch) == ['"b"', '"c"']
    assert any(state == {"a": 1, "b": 1, "c": 1} for state in states)
    assert states[-1] == {"a": 1}


TIMING_OUT_INPUT = [["a", "b", "c"], ["a", "b"], ["a"], [], [], ["a"]] + [["a"]] * 20

MAP_WITH_STATE_CASES = [
    SuiteCase(
        "mapWithState - basic operations with simple API",
        StateSpec.function(running_sum),
        COUNTING_INPUT,
        outputs=[[], [1], [2, 1], [3, 2, 1], [4, 3], [5], []],
        states=COUNTING_STATES,
    ),
    SuiteCase(
        "mapWithState - basic operations with advanced API",
        StateSpec.function(doubled_key),
        COUNTING_INPUT,
        outputs=[[], ["aa"], ["aa", "bb"], ["aa", "bb", "cc"], ["aa", "bb"], ["aa"], []],
        states=COUNTING_STATES,
    ),
    SuiteCase(
        "mapWithState - states as mapped data",
        StateSpec.function(sum_as_pair),
        COUNTING_INPUT,
        outputs=[[], [("a", 1)], [("a", 2), ("b", 1)], [("a", 3), ("b", 2), ("c", 1)], [("a", 4), ("b", 3)], [("a", 5)], []],
        states=COUNTING_STATES,
    ),
    SuiteCase(
        "mapWithState - initial states, with nothing returned as from mapping function",
        StateSpec.function(sum_returning_nothing).initial_state([("a", 5), ("b", 10), ("c", -20), ("d", 0)]),
        COUNTING_INPUT,
        outputs=[[]] * len(COUNTING_INPUT),
        states=[
            {"a": 5, "b": 10, "c": -20, "d": 0},
            {"a": 6, "b": 10, "c": -20, "d": 0},
            {"a": 7, "b": 11, "c": -20, "d": 0},
            {"a": 8, "b": 12, "c": -19, "d": 0},
            {"a": 9, "b": 13, "c": -19, "d": 0},
            {"a": 10, "b": 13, "c": -19, "d": 0},
            {"a": 10, "b": 13, "c": -19, "d": 0},
        ],
    ),
    SuiteCase(
        "mapWithState - state removing",
        StateSpec.function(remove_on_second_sight),
        [[], ["a"], ["a", "b"], ["a", "b", "c"], ["a", "b", "c"], ["a", "b"], ["a"], []],
        outputs=[[], [], ["a"], ["b"], ["a", "c"], ["b"], ["a"], []],
        states=[{}, {"a": 1}, {"b": 1}, {"a": 1, "c": 1}, {"b": 1}, {"a": 1}, {}, {}],
    ),
    SuiteCase(
        "mapWithState - state timing out",
        StateSpec.function(mark_and_report_timeout).timeout(3 * SECOND),
        TIMING_OUT_INPUT,
        processing_times_ms=[(index + 1) * SECOND for index in range(len(TIMING_OUT_INPUT))],
        check=check_timing_out,
    ),
]


# ---------------------------------------------------------------------------------- BasicOperationsSuite
def add_counts(values: list[int], state: int | None) -> int:
    return sum(values) + (state or 0)


def expire_after_two_empty_batches(values: list[int], state: list | None) -> list | None:
    """Spark's ``StateObject(counter, expireCounter)`` as ``[counter, expire_counter]``."""
    counter, expire_counter = state or (0, 0)
    if sum(values) == 0:
        expire_counter += 1  # no new values
    else:
        counter, expire_counter = counter + sum(values), 0
    return None if expire_counter == 2 else [counter, expire_counter]


UPDATE_STATE_BY_KEY_CASES = [
    update_case(
        "updateStateByKey",
        add_counts,
        COUNTING_INPUT,
        outputs=[[], *[sorted(state.items()) for state in COUNTING_STATES[1:]]],
    ),
    update_case(
        "updateStateByKey - simple with initial value RDD",
        add_counts,
        [["a"], ["a", "b"], ["a", "b", "c"], ["a", "b"], ["a"], []],
        initial=[("a", 1), ("c", 2)],
        outputs=[
            [("a", 2), ("c", 2)],
            [("a", 3), ("b", 1), ("c", 2)],
            [("a", 4), ("b", 2), ("c", 3)],
            [("a", 5), ("b", 3), ("c", 3)],
            [("a", 6), ("b", 3), ("c", 3)],
            [("a", 6), ("b", 3), ("c", 3)],
        ],
    ),
    update_case(
        "updateStateByKey - object lifecycle",
        expire_after_two_empty_batches,
        [["a", "b"], [], ["a", "c", "a"], ["c"], [], []],  # the suite's null batches are empty ones
        outputs=[
            [("a", 1), ("b", 1)],
            [("a", 1), ("b", 1)],
            [("a", 3), ("c", 1)],
            [("a", 3), ("c", 2)],
            [("c", 2)],
            [],
        ],
        output_view=lambda state: state[0],  # the suite's .mapValues(_.counter)
    ),
]

CASES = MAP_WITH_STATE_CASES + UPDATE_STATE_BY_KEY_CASES


# ---------------------------------------------------------------------------------- on a streaming query
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


def run_cases_on_a_streaming_query(spark, tmp_path: Path) -> None:
    """Every case on ``spark`` (classic or Spark Connect), as the module docstring of
    tests/integration/test_dstream_suites_on_spark.py says; the batches are kept where the
    session's foreachBatch can keep them (:func:`tests.state_queries.batch_sink`)."""
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

    union = union.select("operator", "kind", "key", "payload", "reason")
    sink = batch_sink(union, tmp_path / "batches")

    def step_words(case: SuiteCase, step: int) -> list[str]:
        batches = batches_on_spark(case)
        return batches[step] if step < len(batches) else []

    checkpoint = tmp_path / "checkpoint"
    for step in range(SPARK_BATCHES):
        shared_words = [f"{index}|{word}" for index, case in enumerate(shared) for word in step_words(case, step)]
        files = {"shared": shared_words, **{case.name: step_words(case, step) for case in alone}}
        for name, words in files.items():
            (folders[name] / f"{step:03d}.json").write_text("".join(json.dumps({"word": w}) + "\n" for w in words))
        query = union.writeStream.foreachBatch(sink.function()).option("checkpointLocation", str(checkpoint)).trigger(once=True).start()
        query.awaitTermination(300)
        assert query.exception() is None, query.exception()
        assert sorted(sink.by_id()) == list(range(step + 1)), f"step {step} ran batches {sorted(sink.by_id())}"

    rows = sink.by_id()
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
