"""A stopped query's state snapshotted before its JVM goes, so the next start replays little.

With changelog checkpointing a RocksDB state store writes one changelog per batch and keeps
its snapshots local; the executors' maintenance thread uploads the newest snapshot (made every
``minDeltasForSnapshot`` = 10 batches) once a minute (``stateStore.maintenanceInterval``), and
unloads the stores of stopped queries at its next pass. A job stopped before that pass (Ctrl-C,
a JVM recycled, every `make run` shorter than a minute) exits with its snapshot unuploaded, so
the next start loads an older one and replays every changelog since, and each short run makes
the next start's replay longer. A changelog holds each changed key's whole state: for the
sessions job's users, their de-duplication ids, megabytes a batch on the demo's traffic, where
the first batch of a `make run` took 17 s after a day of short runs, and 11 s right after an
upload (docs/profile.md).

:func:`snapshot_stopped` gives each stopped query's state stores, where this JVM holds them
(a local master: the tasks ran here), Spark's own maintenance at once: the newest local
snapshot uploaded, files no version needs deleted, the store unloaded
(``StateStore.doMaintenanceAndUnload``, the call the maintenance thread makes for a stopped
query's stores). On a cluster the stores live in the executors, where their own maintenance
thread does this, and nothing here is loaded. Failing, it only logs: the state is intact in the
checkpoint either way, and the next start replays more.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from pyspark.sql import SparkSession

from streamstate_jobs.checkpoints import CheckpointFiles

log = logging.getLogger(__name__)

STATE_STORE_PACKAGE = "org.apache.spark.sql.execution.streaming.state"
# The store every stateful operator of the jobs uses (transformWithState keeps its variables as
# column families of this one store); stream-stream joins name others, and the jobs have none.
DEFAULT_STORE = "default"


@dataclass(frozen=True)
class StoppedQuery:
    checkpoint: str
    run_id: str  # StreamingQuery.runId: the store instances of one run are keyed by it


def snapshot_stopped(spark: SparkSession, queries: list[StoppedQuery]) -> int:
    """Run Spark's maintenance on every state store of ``queries`` this JVM holds, then unload
    it; returns how many there were."""
    started, done = time.monotonic(), 0
    try:
        state = spark._jvm.__getattr__(STATE_STORE_PACKAGE)  # type: ignore[union-attr]  # noqa: SLF001 - PySpark types the JVM handle Optional; Spark's state stores are only reachable through it
        for query in queries:
            for provider in _loaded_providers(spark, state, query):
                state.StateStore.doMaintenanceAndUnload(provider)
                done += 1
    except Exception as exc:  # noqa: BLE001 - a Py4JJavaError from Spark's file I/O: the next start replays more, nothing is lost
        log.warning("state snapshot at stop failed after %d store(s) (the next start replays the changelogs since the last "
                    "snapshot instead): %s", done, " ".join(str(exc).split())[:300])
        return done
    if done:
        log.info("state of %d store(s) snapshotted for the next start in %.1fs", done, time.monotonic() - started)
    return done


def _loaded_providers(spark: SparkSession, state, query: StoppedQuery) -> list:
    """The StateStoreProviderIds of ``query``'s stores that this JVM holds loaded (``state``: Spark's
    state store package in the JVM), found from the operator and partition folders of the
    checkpoint's ``state`` folder."""
    run_id = spark._jvm.java.util.UUID.fromString(query.run_id)  # type: ignore[union-attr]  # noqa: SLF001
    files = CheckpointFiles(spark, query.checkpoint)
    root = files.qualified("state")
    stores = (
        state.StateStoreProviderId(state.StateStoreId(root, operator, partition, DEFAULT_STORE), run_id)
        for operator in files.numbered("state")
        for partition in files.numbered(f"state/{operator}")
    )
    return [store for store in stores if state.StateStore.isLoaded(store)]
