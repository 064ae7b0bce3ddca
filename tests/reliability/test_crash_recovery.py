"""Crash recovery, repeated, on both profiles: both jobs run as separate processes on a
scripted input and are killed again and again (killed independently), then run to the end
on the same checkpoints. The final state snapshots, closed sessions and dead letters equal
the plain-Python reference exactly, every expected alert is on the alerts topic once for a
``read_committed`` consumer, and the API started afterwards shows each alert id once.

The input arrives in chunks while the jobs are being killed (one more chunk at each
cycle), as a live stream does, so kills land between and inside batches of new data. The
first chunk holds each job's first alert, so the first cycle can reach the point that needs
a batch with alerts (the scenario's alerts are few and late; spread evenly, they cost each
job two to four more cycles before it).

The first kills are the dangerous points of the exactly-once output
(:mod:`tests.reliability.crash_at`), where the job kills itself: after a batch's alerts were
written and its transactions committed, before Spark's commit log (the batch is replayed and
must write nothing again); inside a task's open transaction; and between two tasks'
transactions of one batch. On the embedded profile each job reaches all three; on the S3 path
each point is reached by one of the jobs. A job with fewer than ``CYCLES`` (S3:
``CYCLES_PRODUCTION``) kills by then is killed at seeded random moments until it has them. A
``read_uncommitted`` consumer sees the aborted records too, and the test says how many."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.integration.api_harness import wait_until
from tests.reliability.conftest import BREAK_CHECKPOINT, LARGE
from tests.reliability.crash_at import AFTER_COMMIT, BETWEEN_TRANSACTIONS, IN_TRANSACTION, POINTS
from tests.reliability.crashing import crash_repeatedly, start
from tests.scenario import Feeder, assert_outputs_match, build_scenario, collect_outputs, read_outputs, records_to_first_alerts

# Never beside the compose test: see heavy_beside_no_stack (tests/conftest.py).
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.usefixtures("heavy_beside_no_stack")]

SEED = 7
CYCLES = 10 if LARGE else 3
# The production profile repeats the test for its own parts (the built-in connector's offsets,
# state and offsets restored from s3a:// in MinIO); the kill statistics are the embedded run's
# job. Two cycles per job there keep make test's cost in bounds (each cycle is a JVM start).
CYCLES_PRODUCTION = 10 if LARGE else 2
# Every crash point is reached on the S3 path too, each by one of the jobs (on the embedded
# profile each job reaches all three): a job restart is the test's dearest step, so each job
# takes a point per cycle it has anyway (a point not reached in a cycle is tried again).
PRODUCTION_POINTS = {"sessions": (AFTER_COMMIT, BETWEEN_TRANSACTIONS), "anomalies": (IN_TRANSACTION,)}
EVENTS, METRICS = (2_500, 1_500) if LARGE else (800, 500)
JOBS = ("sessions", "anomalies")


def test_jobs_killed_repeatedly_end_equal_to_the_reference(profile_pipeline_stack, tmp_path):
    stack = profile_pipeline_stack
    production = stack.profile.s3_checkpoints
    points = PRODUCTION_POINTS if production else dict.fromkeys(JOBS, POINTS)
    markers = {job: {point: tmp_path / f"{job}-crashed-{point}" for point in points[job]} for job in JOBS}
    settings = stack.settings
    bootstrap = settings.bootstrap_servers
    cycles = CYCLES_PRODUCTION if production else CYCLES
    scenario = build_scenario(SEED, events=EVENTS, metrics=METRICS)
    chunks = cycles + len(POINTS) + 1  # a crash point is reached on new input: one chunk per cycle
    feeder = Feeder(bootstrap, settings, scenario, chunks, first=records_to_first_alerts(scenario, settings))
    topic_of = {"sessions": settings.topic_user_events, "anomalies": settings.topic_metrics}

    with ThreadPoolExecutor(len(JOBS)) as pool:
        runs = {
            job: pool.submit(
                crash_repeatedly,
                stack,
                job,
                random.Random(f"{SEED}-{job}"),
                cycles,
                feeder.feed,
                lambda topic=topic_of[job]: feeder.produced_on(topic),
                BREAK_CHECKPOINT,
                crash_markers=markers[job],
            )
            for job in JOBS
        }
        kills = {job: run.result() for job, run in runs.items()}

    feeder.feed(chunks - 1)
    final = {job: start(stack, job, BREAK_CHECKPOINT) for job in JOBS}
    outputs = collect_outputs(bootstrap, settings, scenario=scenario, timeout_s=300)
    uncommitted = read_outputs(bootstrap, settings, isolation="read_uncommitted")
    for job, proc in final.items():
        assert proc.alive(), f"{job} job exited after its restarts:\n{proc.tail(40)}"
        proc.stop()

    api = stack.start_api()
    client = httpx.Client(base_url=f"http://{settings.api_host}:{settings.api_port}", timeout=10)
    try:
        wait_until(lambda: _ready(client), 90, f"the API to be ready:\n{api.tail()}")
        outputs.api_alert_ids = [a["alert_id"] for a in client.get("/alerts", params={"limit": 1000}).json()["items"]]
    finally:
        client.close()
        api.stop()

    print(
        f"\ncrash recovery: {sum(map(len, kills.values()))} kills "
        f"({', '.join(f'{job}: {len(k)}, {sum(x.in_flight for x in k)} mid-batch' for job, k in kills.items())}); "
        f"{len(scenario.produced)} input records; {len(outputs.alerts)} alerts in {outputs.alert_copies} copies; "
        f"{len(outputs.dead_letters)} dead letters; API alert ids {len(outputs.api_alert_ids)}; "
        f"read_uncommitted also sees {uncommitted.records() - outputs.records()} aborted records"
    )
    assert all(len(k) >= cycles for k in kills.values()), kills
    missed = [marker.name for points in markers.values() for marker in points.values() if not marker.exists()]
    assert not missed, f"never reached: {missed}"
    assert_outputs_match(scenario, outputs, settings)
    assert outputs.duplicates() == {}, f"a read_committed consumer sees records more than once: {outputs.duplicates()}"


def _ready(client: httpx.Client) -> bool:
    try:
        return client.get("/readyz").status_code == 200
    except httpx.TransportError:
        return False
