"""Sessions-job throughput on ``local[2]`` vs a 2-worker Spark standalone cluster, same input.

    .venv/bin/python -m bench.cluster_throughput [--events 300000] [--seed 7] [--out PATH]

1. starts Apache Kafka (KRaft, :meth:`streamstate_stack.launcher.EmbeddedStack.start_broker`) and
   produces ``--events`` user events (``events / 10`` users, fixed seed, no bad records:
   :mod:`bench.dataset`) to a 4-partition topic;
2. ``local[2]``: a SparkSession in this process, one ``availableNow`` run of the sessions
   job over the whole topic (fresh checkpoint and output topics);
3. ``cluster``: a standalone master and two 1-core workers from the PySpark installation
   (:mod:`infra.spark.standalone`), a driver in this process with ``--master spark://``
   and the project's wheel shipped to the executors; the same run on the same topic;
4. prints rows/s of both (rows / the batch's ``triggerExecution``, SparkSession start-up
   excluded) and writes them as JSON with the machine's cores and load average.

The default is 300,000 events, not 1,000,000: both modes, a standalone cluster's start-up
and two SparkSessions must fit next to ``make bench``'s other figures on 2 cores.
Nothing is asserted: see docs/cluster.md for how to read the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import uuid
from pathlib import Path
from typing import Any

from bench.dataset import produce_user_events
from bench.measure import fresh_outputs, query_figures
from streamstate_jobs.sessions import job as sessions_job
from streamstate_jobs.runner import start_query
from streamstate_jobs.spark import build_spark
from infra.spark.standalone import StandaloneCluster
from streamstate_pipeline.settings import Settings
from streamstate_stack.launcher import EmbeddedStack

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "cluster_throughput.json"
DEFAULT_EVENTS = 300_000
WORKERS, CORES_PER_WORKER = 2, 1


def sessions_run(settings: Settings, master: str, topic: str, records: int, checkpoint: Path) -> dict[str, Any]:
    """One fresh ``availableNow`` run of the sessions job over ``topic``, its driver in this process."""
    run_settings = fresh_outputs(settings.model_copy(update={"spark_master": master, "topic_user_events": topic}), "cluster")
    spark = build_spark(run_settings, app_name="streamstate-bench-cluster", spark__ui__enabled="false")
    try:
        query = start_query(spark, run_settings, sessions_job.JOB, str(checkpoint), available_now=True)
        return {"master": master, **query_figures(query, records)}
    finally:
        spark.stop()


def run(events: int = DEFAULT_EVENTS, seed: int = 7) -> dict[str, Any]:
    """Measure both modes on one produced input; the figures as a dict (also what ``main`` writes)."""
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as scratch:
        workdir = Path(scratch)
        stack = EmbeddedStack(settings=Settings(checkpoint_root=str(workdir / "checkpoints")), workdir=workdir / "stack", quiet=True)
        try:
            bootstrap = stack.start_broker()
            topic = f"bench-cluster-events-{uuid.uuid4().hex[:6]}"
            print(f"producing {events:,} user events to {topic} ...", flush=True)
            dataset = produce_user_events(bootstrap, topic, events, users=max(1, events // 10), seed=seed)
            print("sessions job on local[2] ...", flush=True)
            local = sessions_run(stack.settings, "local[2]", topic, dataset.records, workdir / "local")
            print(f"  {local['rows_per_s']:,} rows/s", flush=True)
            with StandaloneCluster(workdir / "cluster", workers=WORKERS, cores=CORES_PER_WORKER) as cluster:
                print(f"sessions job on {cluster.master_url} ({WORKERS} workers x {CORES_PER_WORKER} core) ...", flush=True)
                on_cluster = sessions_run(stack.settings, cluster.master_url, topic, dataset.records, workdir / "cluster-run")
            print(f"  {on_cluster['rows_per_s']:,} rows/s", flush=True)
        finally:
            stack.stop()
    return {
        "dataset": vars(dataset),
        "local": local,
        "cluster": {**on_cluster, "workers": WORKERS, "cores_per_worker": CORES_PER_WORKER},
        "ratio_cluster_vs_local": round(on_cluster["rows_per_s"] / local["rows_per_s"], 2),
        "machine": {"cores": os.cpu_count(), "load_average_1m": round(os.getloadavg()[0], 2)},
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster_throughput", description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=DEFAULT_EVENTS, help=f"user events to produce (default {DEFAULT_EVENTS:,})")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON result (default {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    result = run(args.events, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"sessions job, {args.events:,} events: local[2] {result['local']['rows_per_s']:,} rows/s, "
        f"2-worker cluster {result['cluster']['rows_per_s']:,} rows/s (x{result['ratio_cluster_vs_local']}); written to {args.out}"
    )
    return result


if __name__ == "__main__":
    main()
