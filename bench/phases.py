"""Where a latency figure's batches spend their time, and a throughput run's batch: each batch
split into phases.

- ``driver``: the batch's time outside its Spark stages: planning, the source's offsets,
  scheduling (``triggerExecution`` less the stages' wall time and the checkpoint's logs);
- ``source``: the stage that reads the input (Spark's Kafka source, and the Arrow exchange
  with the Python worker and the shuffle write in the same tasks), less ``validation``;
- ``validation``: contract validation, the rows' layout and packing, timed inside the source
  stage's Python function (:class:`ValidationTimer`); none where the query has no such step
  (Spark's own floor);
- ``state``: the stateful operator's share of its stage (its ``allUpdatesTimeMs`` and
  ``allRemovalsTimeMs``);
- ``write``: the rest of the stateful stage, where the Kafka write runs in the same tasks as
  the operator (the job's writer as the query's last step and Spark's Kafka sink alike): the
  writer's produce and flush, its transaction's commit, the shuffle read, the Python workers'
  start in the task;
- ``commit``: the checkpoint's logs (the offset log ``walCommit`` and the commit log
  ``commitOffsets``) and the state store's commit's share of its stage (``commitTimeMs``).

A stage's tasks run at once on the cores, and a task's steps follow one another (or run
pipelined, as the operator feeds the writer), so a stage's wall time is split between its
phases by their shares of the stage's summed task time: the phases of a batch add up to its
``triggerExecution``, each counted once.

The stage and task times come from Spark's event log, written to a scratch directory by the
bench's SparkSession (:func:`event_log_conf`) and read after each measurement from where it
stood at its start: JSON lines, each stage found by what it runs (a Kafka scan, a state store)
in the jobs that carry the query's id and the batch's id, so no stage id is assumed. The
batches' ``StreamingQueryProgress`` come from the same log, every batch of the measured
periods (``recentProgress`` keeps only the last 100).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

PHASES = ("driver", "source", "validation", "state", "write", "commit")


def event_log_conf(directory: Path) -> dict[str, str]:
    """``build_spark`` keywords that have the session write its event log into ``directory``:
    one plain JSON-lines file, neither compressed nor rolled, read while the session runs."""
    directory.mkdir(parents=True, exist_ok=True)
    return {
        "spark__eventLog__enabled": "true",
        "spark__eventLog__dir": directory.resolve().as_uri(),
        "spark__eventLog__compress": "false",
        "spark__eventLog__rolling__enabled": "false",
    }


# ---------------------------------------------------------------- the event log, parsed


@dataclass(frozen=True)
class Stage:
    """One completed stage attempt of a batch: its kind, its wall time and its tasks' times."""

    kind: str  # "source", "state" or "other"
    submitted_ms: int
    completed_ms: int
    task_ms: float  # its tasks' run times, summed (launch to finish)
    validation_ms: float = 0.0  # of which in the validation step, summed over the tasks

    @property
    def wall_ms(self) -> int:
        return self.completed_ms - self.submitted_ms


@dataclass
class Batch:
    """A batch of one query as the event log tells it: its progress and its stages."""

    progress: dict[str, Any]
    stages: list[Stage] = field(default_factory=list)

    @property
    def started_ms(self) -> int:
        return epoch_ms(self.progress["timestamp"])


def epoch_ms(timestamp: str) -> int:
    """A progress ``timestamp`` ("2026-11-28T06:05:37.765Z") in epoch milliseconds."""
    return int(datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1000)


def input_rows(progress: dict[str, Any]) -> int:
    """A progress's input rows (the log's JSON has them per source only)."""
    return sum(source.get("numInputRows", 0) for source in progress.get("sources") or [])


def stage_kind(rdds: list[dict[str, Any]]) -> str:
    """What a stage runs, from its RDDs: the stateful operator's (a state store) before the
    source's (Spark's micro-batch scan); any other stage is ``other``."""
    names = {rdd.get("Name", "") for rdd in rdds}
    scopes = {json.loads(rdd["Scope"]).get("name", "") for rdd in rdds if rdd.get("Scope")}
    if "StateStoreRDD" in names or any("WithState" in scope for scope in scopes):
        return "state"
    if "MicroBatchScan" in scopes or "KafkaSourceRDD" in names:
        return "source"
    return "other"


# The events read, found by a cheap test before parsing: the log also holds every plan.
_WANTED = (b'"SparkListenerJobStart"', b'"SparkListenerStageCompleted"', b'"SparkListenerTaskEnd"', b"QueryProgressEvent")


def parse_events(
    lines: Iterable[bytes | str], query_id: str, validation_by_stage: dict[int, float] | None = None, batches_without_data: bool = False,
) -> list[Batch]:
    """The batches of the query ``query_id`` with data (and, with ``batches_without_data``, those
    without: a throughput run's), each with its completed stages, in order.

    A job belongs to a batch by the local properties streaming sets (``sql.streaming.queryId``,
    ``streaming.sql.batchId``); ``validation_by_stage`` is :class:`ValidationTimer`'s total per
    stage id. A line that is not whole JSON (the log's last, being written) is skipped."""
    validation_by_stage = validation_by_stage or {}
    progress: dict[int, dict[str, Any]] = {}
    stage_batch: dict[int, tuple[int, str]] = {}  # stage id -> (batch id, kind)
    completed: list[dict[str, Any]] = []
    task_ms: dict[tuple[int, int], float] = {}
    for line in lines:
        raw = line.encode() if isinstance(line, str) else line
        head = raw[:120]
        if not any(wanted in head for wanted in _WANTED):
            continue
        try:
            event = json.loads(raw)
        except ValueError:
            continue
        name = event["Event"]
        if name.endswith("QueryProgressEvent"):
            if event["progress"]["id"] == query_id:
                progress[event["progress"]["batchId"]] = event["progress"]
        elif name == "SparkListenerJobStart":
            properties = event.get("Properties") or {}
            if properties.get("sql.streaming.queryId") != query_id or "streaming.sql.batchId" not in properties:
                continue
            batch_id = int(properties["streaming.sql.batchId"])
            for info in event["Stage Infos"]:
                stage_batch[info["Stage ID"]] = (batch_id, stage_kind(info.get("RDD Info", [])))
        elif name == "SparkListenerStageCompleted":
            completed.append(event["Stage Info"])
        elif name == "SparkListenerTaskEnd":
            info = event["Task Info"]
            key = (event["Stage ID"], event["Stage Attempt ID"])
            task_ms[key] = task_ms.get(key, 0.0) + (info["Finish Time"] - info["Launch Time"])
    batches = {batch_id: Batch(p) for batch_id, p in progress.items() if batches_without_data or input_rows(p) > 0}
    for info in completed:
        stage_id = info["Stage ID"]
        if stage_id not in stage_batch or "Submission Time" not in info or "Completion Time" not in info:
            continue
        batch_id, kind = stage_batch[stage_id]
        if batch_id not in batches:
            continue
        batches[batch_id].stages.append(Stage(
            kind, info["Submission Time"], info["Completion Time"], task_ms.get((stage_id, info["Stage Attempt ID"]), 0.0),
            validation_by_stage.get(stage_id, 0.0) if info["Stage Attempt ID"] == 0 else 0.0,
        ))
    return [batches[batch_id] for batch_id in sorted(batches)]


# ---------------------------------------------------------------- the phase arithmetic


def _union_ms(intervals: list[tuple[int, int]]) -> int:
    """The wall time covered by ``intervals`` (stages of two jobs may overlap)."""
    total, end = 0, None
    for start, stop in sorted(intervals):
        if end is None or start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def _shares(wall_ms: float, task_ms: float, parts: list[float]) -> list[float]:
    """``wall_ms`` split by each part's share of ``task_ms`` (capped so that they fit in it);
    the last element is what is left of the wall time."""
    if task_ms <= 0:
        return [0.0] * len(parts) + [wall_ms]
    shares, left = [], wall_ms
    for part in parts:
        share = min(left, wall_ms * max(part, 0.0) / task_ms)
        shares.append(share)
        left -= share
    return shares + [left]


def batch_phases(batch: Batch, timed_validation: bool) -> dict[str, float]:
    """One batch's phases in ms (see the module's doc); ``validation`` only where it was timed,
    ``other`` only for stages that neither read the source nor hold state."""
    durations = batch.progress["durationMs"]
    operators = batch.progress.get("stateOperators") or []
    updates = sum(op.get("allUpdatesTimeMs", 0) + op.get("allRemovalsTimeMs", 0) for op in operators)
    store_commit = sum(op.get("commitTimeMs", 0) for op in operators)
    logs = durations.get("walCommit", 0) + durations.get("commitOffsets", 0)
    stages_ms = _union_ms([(s.submitted_ms, s.completed_ms) for s in batch.stages])

    def of(kind: str) -> tuple[float, float, float]:
        chosen = [s for s in batch.stages if s.kind == kind]
        return sum(s.wall_ms for s in chosen), sum(s.task_ms for s in chosen), sum(s.validation_ms for s in chosen)

    source_wall, source_tasks, validation_tasks = of("source")
    validation, source = _shares(source_wall, source_tasks, [validation_tasks])
    state_wall, state_tasks, _ = of("state")
    state, store, write = _shares(state_wall, state_tasks, [updates, store_commit])
    other_wall = of("other")[0]
    phases = {
        "driver": max(0.0, durations["triggerExecution"] - stages_ms - logs),
        "source": source,
        "validation": validation,
        "state": state,
        "write": write,
        "commit": logs + store,
    }
    if not timed_validation:
        del phases["validation"]
    if other_wall:
        phases["other"] = other_wall
    return {name: round(ms, 1) for name, ms in phases.items()}


def breakdown(batches: list[Batch], timed_validation: bool) -> dict[str, Any]:
    """The phases of each batch and their medians over the batches (a median of each phase: the
    medians need not add up to the median batch)."""
    per_batch = [
        {"batch": b.progress["batchId"], "rows": input_rows(b.progress), "triggerExecution": b.progress["durationMs"]["triggerExecution"],
         **batch_phases(b, timed_validation)}
        for b in batches
    ]
    names = [n for n in (*PHASES, "other") if any(n in p for p in per_batch)]
    medians = {n: round(statistics.median(p.get(n, 0.0) for p in per_batch), 1) for n in names} if per_batch else {}
    if per_batch:
        medians["triggerExecution"] = statistics.median(p["triggerExecution"] for p in per_batch)
    return {"batches": len(per_batch), "medians_ms": medians, "per_batch": per_batch}


def summed_phases(batches: list[Batch]) -> dict[str, float]:
    """A throughput run's phases: each summed over its batches (for an ``availableNow`` run that
    fits a batch, that batch and the batch without data that moves its watermark on, as the rate
    counts them), validation counted with the source; a phase the query does not have (no state
    without a stateful operator) is left out."""
    total: dict[str, float] = {}
    for batch in batches:
        for name, ms in batch_phases(batch, timed_validation=False).items():
            total[name] = round(total.get(name, 0.0) + ms, 1)
    return {name: ms for name, ms in total.items() if ms}


def phases_line(medians: dict[str, float]) -> str:
    """``driver 88 · source 150 · validation 20 · state 190 · write 60 · commit 12 ms``."""
    parts = [f"{name} {medians[name]:,.0f}" for name in (*PHASES, "other") if name in medians]
    return " · ".join(parts) + " ms" if parts else ""


# ---------------------------------------------------------------- the measurement


class _StageTotals:
    """A Spark accumulator's parameter (PySpark's ``AccumulatorParam``): {stage id: ms}, summed per stage."""

    def zero(self, value: dict[int, float]) -> dict[int, float]:
        return {}

    def addInPlace(self, value1: dict[int, float], value2: dict[int, float]) -> dict[int, float]:  # noqa: N802 - PySpark's name
        for stage, ms in value2.items():
            value1[stage] = value1.get(stage, 0.0) + ms
        return value1


def _timed(items: Iterator[Any], spent: list[float], clock: Callable[[], float]) -> Iterator[Any]:
    """``items`` as they are, adding the time each ``next`` took (its end included) to ``spent[0]``."""
    source = iter(items)
    while True:
        started = clock()
        try:
            item = next(source)
        except StopIteration:
            return
        finally:
            spent[0] += clock() - started
        yield item


def timed_in_task(
    func: Callable[[Iterator[Any]], Iterator[Any]], add: Callable[[dict[int, float]], None], stage_id: Callable[[], int],
    clock: Callable[[], float] = time.perf_counter,
):
    """``func`` (a ``mapInArrow`` function) that also adds, once its output is done, the time
    spent in its own code to ``add({stage id: ms})``: the time of each of its output batches
    less the time it waited on its input (the JVM's Arrow batches, the Kafka read behind them).
    Two ``clock`` reads (seconds) per batch in and out."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        waited, busy = [0.0], [0.0]
        started = clock()
        output = iter(func(_timed(batches, waited, clock)))  # a function that reads its input at once does so here
        busy[0] += clock() - started
        yield from _timed(output, busy, clock)
        add({stage_id(): max(0.0, busy[0] - waited[0]) * 1000})

    return run


def _task_stage_id() -> int:
    from pyspark import TaskContext

    context = TaskContext.get()
    return context.stageId() if context is not None else -1


class ValidationTimer:
    """Times the jobs' validation step inside the source stage's tasks, per stage.

    While :meth:`installed`, the queries built get ``streamstate_jobs.validation``'s packer (the
    ``mapInArrow`` function that validates, lays out and packs the raw records) wrapped by
    :func:`timed_in_task`, which adds each task's time to a Spark accumulator by stage id. The
    job's code is left as it is; a query without the step (Spark's floor) is not timed
    (:attr:`timed` stays False), nor is any query when the step is no longer where this looks."""

    def __init__(self, spark) -> None:
        from pyspark import cloudpickle

        # The Python workers unpickle the timer by value: they cannot import bench.
        cloudpickle.register_pickle_by_value(sys.modules[__name__])
        self.accumulator = spark.sparkContext.accumulator({}, _StageTotals())
        self.timed = False

    @contextmanager
    def installed(self) -> Iterator[None]:
        from streamstate_jobs import validation

        original = getattr(validation, "_validating_packer", None)
        if original is None:
            yield
            return
        add = self.accumulator.add

        def timed_packer(*args: Any, **kwargs: Any):
            self.timed = True
            return timed_in_task(original(*args, **kwargs), add, _task_stage_id)

        validation._validating_packer = timed_packer
        try:
            yield
        finally:
            validation._validating_packer = original

    def by_stage(self) -> dict[int, float]:
        return dict(self.accumulator.value) if self.timed else {}


class EventLog:
    """The bench's SparkSession's event log (:func:`event_log_conf`), read from a mark on."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def of(cls, spark) -> EventLog | None:
        """The session's log, None when it writes none (or not to a local file)."""
        conf = spark.sparkContext.getConf()
        if conf.get("spark.eventLog.enabled", "false") != "true" or conf.get("spark.eventLog.compress", "false") != "false":
            return None
        directory = conf.get("spark.eventLog.dir", "")
        if not directory.startswith("file:"):
            return None
        base = Path(directory.removeprefix("file://").removeprefix("file:")) / spark.sparkContext.applicationId
        return cls(base)

    def _file(self) -> Path | None:
        for candidate in (self.path.with_name(self.path.name + ".inprogress"), self.path):
            if candidate.exists():
                return candidate
        return None

    def mark(self) -> int:
        """Where the log ends now: the next measurement reads from here."""
        found = self._file()
        return found.stat().st_size if found is not None else 0

    def lines_from(self, mark: int) -> Iterator[bytes]:
        found = self._file()
        if found is None:
            return
        with found.open("rb") as log:
            log.seek(mark)
            yield from log

    def bytes_since(self, mark: int) -> int:
        return self.mark() - mark


EVENT_LOG_THREAD = "spark-listener-group-eventLog"  # the listener bus's queue that runs only the event log


def event_log_cpu_ms(spark) -> float | None:
    """The CPU time the event log's thread in the driver's JVM has used so far (what the log
    costs: its events' JSON and their writes), None where the JVM does not say."""
    try:
        jvm = spark.sparkContext._jvm
        for thread in jvm.java.lang.Thread.getAllStackTraces().keySet():
            if thread.getName() == EVENT_LOG_THREAD:
                return jvm.java.lang.management.ManagementFactory.getThreadMXBean().getThreadCpuTime(thread.getId()) / 1e6
    except Exception:  # noqa: BLE001 - the cost is reported when the JVM tells it
        return None
    return None


class RunPhases:
    """Where a throughput run's time went (:func:`summed_phases`): the event log marked before
    its query starts, read once the query has ended."""

    def __init__(self, spark) -> None:
        self.spark = spark
        self.log = EventLog.of(spark)
        self.mark = self.log.mark() if self.log is not None else 0

    def of(self, query_id: str) -> dict[str, float] | None:
        """The query's phases in ms, None where the session writes no event log."""
        if self.log is None:
            return None
        try:
            # The log is written by the listener bus's thread: its queue holds the run's last events.
            self.spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty(10_000)  # noqa: SLF001 - PySpark keeps the JVM context only here
        except Exception:  # noqa: BLE001 - a bus still busy leaves a batch out, never half in:
            pass  # the log is in order, and a batch counts from its progress, logged after its stages
        return summed_phases(parse_events(self.log.lines_from(self.mark), query_id, batches_without_data=True))


class PhaseRecorder:
    """One latency measurement's phases: mark the log and time validation while the query is
    built, then :meth:`result` for the batches started in the measured window."""

    def __init__(self, spark) -> None:
        self.spark = spark
        self.log = EventLog.of(spark)
        self.mark = self.log.mark() if self.log is not None else 0
        self.cpu_before = event_log_cpu_ms(spark) if self.log is not None else None
        self.started = time.perf_counter()
        self.validation = ValidationTimer(spark)

    def result(self, query_id: str, window_ms: tuple[int, int]) -> dict[str, Any]:
        if self.log is None:
            return {"error": "the SparkSession writes no event log (bench.phases.event_log_conf)"}
        started = time.perf_counter()
        elapsed_s = started - self.started
        logged = parse_events(self.log.lines_from(self.mark), query_id, self.validation.by_stage())
        result = breakdown([b for b in logged if window_ms[0] <= b.started_ms < window_ms[1]], self.validation.timed)
        result["validation_timed"] = self.validation.timed
        cpu = event_log_cpu_ms(self.spark)
        cpu_ms = None if cpu is None or self.cpu_before is None else cpu - self.cpu_before
        per_batch = max(1, len(logged))
        result["event_log"] = {
            "batches_logged": len(logged),
            "kb_per_batch": round(self.log.bytes_since(self.mark) / 1024 / per_batch, 1),
            # The log's thread in the driver's JVM, over the whole measurement (warm-up to stop).
            "cpu_ms_per_batch": None if cpu_ms is None else round(cpu_ms / per_batch, 2),
            "cpu_share_of_a_core": None if cpu_ms is None else round(cpu_ms / 1000 / elapsed_s, 4),
            "parse_s": round(time.perf_counter() - started, 2),
        }
        return result
