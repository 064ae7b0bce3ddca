"""Test support for the state API on real Spark: produce JSON records, run a query, collect its rows.

Used by the integration tests only, so it lives here and not in the package (the public way to
test a state function without Spark is :mod:`streamstate.state.tester`).

A :class:`RowCollector` runs ONE streaming query on ``StateResult.all`` and keeps every row
(``kind, key, payload, reason, topic, partition, offset``) in arrival order, batch by batch.

Where the batches are kept is the query's session's matter (:func:`batch_sink`): a classic
session calls a ``foreachBatch`` function back in this process (:class:`InProcessBatches`);
on Spark Connect the function runs on the server, so each batch's rows are written to a file
named by its batch id there and read back here (:class:`BatchFiles`: the tests' server runs on
this machine).
"""

from __future__ import annotations

import json
import os
import pickle
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from pyspark.sql import DataFrame

from streamstate.state.operators import StateResult
from streamstate.testing.kafka import produce


def produce_json(bootstrap: str, topic: str, records: Iterable[dict], key_field: str | None = None) -> int:
    """Write ``records`` as JSON values (key = ``record[key_field]``) and wait for delivery."""
    return produce(bootstrap, topic, ((None if key_field is None else str(r[key_field]), json.dumps(r)) for r in records))


def is_connect(df: DataFrame) -> bool:
    """``df`` is a Spark Connect DataFrame (its queries run on a server)."""
    from pyspark.sql.connect.dataframe import DataFrame as ConnectDataFrame

    return isinstance(df, ConnectDataFrame)


class InProcessBatches:
    """A classic session's foreachBatch: Spark calls the function in this process."""

    def __init__(self) -> None:
        self._batches: list[tuple[int, list[tuple]]] = []  # (batch id, rows) as they came
        self._lock = threading.Lock()

    def function(self) -> Callable[[DataFrame, int], None]:
        def collect(batch: DataFrame, batch_id: int) -> None:
            collected = [tuple(row) for row in batch.collect()]
            with self._lock:
                self._batches.append((batch_id, collected))

        return collect

    def by_id(self) -> dict[int, list[tuple]]:
        with self._lock:
            return dict(self._batches)  # a batch run again: its last run

    def batches(self) -> list[list[tuple]]:
        """Each batch's rows, in the order the batches ran."""
        with self._lock:
            return [rows for _, rows in self._batches]


class BatchFiles:
    """A Spark Connect session's foreachBatch: the function runs on the server, in a Python
    process of the server's, and cannot reach this one's memory. Each batch's rows are pickled
    to ``<folder>/<batch id>`` (written whole, then renamed: a file is there complete or not at
    all), which the tests' local server and this process share."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def function(self) -> Callable[[DataFrame, int], None]:
        folder = str(self.folder)  # all the function carries to the server

        def collect(batch: DataFrame, batch_id: int) -> None:
            collected = [tuple(row) for row in batch.collect()]
            partial = os.path.join(folder, f".{batch_id}.partial")
            with open(partial, "wb") as out:
                pickle.dump(collected, out)
            os.replace(partial, os.path.join(folder, str(batch_id)))

        return collect

    def by_id(self) -> dict[int, list[tuple]]:
        found = {}
        for path in self.folder.iterdir():
            if path.name.isdigit():
                found[int(path.name)] = pickle.loads(path.read_bytes())
        return found

    def batches(self) -> list[list[tuple]]:
        """Each batch's rows, in batch-id order (the order a query runs them)."""
        return [rows for _, rows in sorted(self.by_id().items())]


def batch_sink(df: DataFrame, folder: str | Path | None = None) -> InProcessBatches | BatchFiles:
    """Where a foreachBatch over ``df`` can keep its batches: in this process on a classic session,
    in ``folder`` (default: a new temporary directory) on Spark Connect."""
    if not is_connect(df):
        return InProcessBatches()
    return BatchFiles(folder if folder is not None else tempfile.mkdtemp(prefix="connect-batches-"))


class RowCollector:
    """Runs ``result.all`` through foreachBatch into a :func:`batch_sink`; :attr:`batches` holds each batch's rows."""

    def __init__(self, result: StateResult | DataFrame, checkpoint: str, available_now: bool = False, once: bool = False):
        rows = result.all if isinstance(result, StateResult) else result
        local = "://" not in checkpoint
        self.sink = batch_sink(rows, f"{checkpoint}-batches-{time.monotonic_ns()}" if local else None)
        writer = rows.writeStream.foreachBatch(self.sink.function()).option("checkpointLocation", checkpoint)
        if once:  # exactly one micro-batch (availableNow never ends over an every-batch update_state_by_key)
            writer = writer.trigger(once=True)
        elif available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime="200 milliseconds")
        self.query = writer.start()

    @property
    def batches(self) -> list[list[tuple]]:
        return self.sink.batches()

    @property
    def rows(self) -> list[tuple]:
        return [row for batch in self.batches for row in batch]

    def settle(self, quiet_s: float = 1.0, limit_s: float = 120.0) -> None:
        """Process everything available, then wait until no batch ran for ``quiet_s``
        (a data batch that moved the watermark is followed by a no-data batch firing timers)."""
        self.query.processAllAvailable()
        deadline = time.monotonic() + limit_s
        seen = -1
        while time.monotonic() < deadline:
            progress = self.query.lastProgress
            batch_id = progress["batchId"] if progress else -1
            if batch_id == seen and not self.query.status["isTriggerActive"]:
                return
            seen = batch_id
            time.sleep(quiet_s)
            self.query.processAllAvailable()
        raise TimeoutError(f"query kept running batches for {limit_s} s")

    def wait_for(self, predicate, limit_s: float = 120.0) -> None:
        """Wait until ``predicate(rows)`` holds (for processing-time timers)."""
        deadline = time.monotonic() + limit_s
        while not predicate(self.rows):
            if self.query.exception() is not None:
                raise self.query.exception()
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met within {limit_s} s; rows so far: {self.rows[-5:]}")
            time.sleep(0.3)

    def finish(self) -> list[tuple]:
        """Stop (or, with availableNow, await) the query; every row collected."""
        if self.query.isActive:
            self.query.stop()
        return self.rows

    def await_done(self, limit_s: float = 300.0) -> list[tuple]:
        """For an availableNow query: wait for it to end, re-raising its failure."""
        ended = self.query.awaitTermination(limit_s)
        if self.query.exception() is not None:
            raise self.query.exception()
        assert ended, f"the query did not end within {limit_s} s (availableNow over processing-time state never does)"
        return self.rows


def kinds(rows: Iterable[tuple], kind: str) -> list[tuple]:
    """The rows of one kind."""
    return [row for row in rows if row[0] == kind]


def as_json(payload: str | None) -> Any:
    return None if payload is None else json.loads(payload)
