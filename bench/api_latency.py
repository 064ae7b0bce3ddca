"""The snapshot API at scale: cold rebuild, restart with the store present, RSS, and latency
at fixed request rates, for each view size.

    .venv/bin/python bench/api_latency.py [--sizes 1000000,10000000] [--rates 1000,2500,5000] [--duration S] [--runs N] [--out PATH]

For each size, end to end through the real parts, on a fresh Apache Kafka broker (KRaft):
1. publishes N session snapshots to ``session-state`` (half with an open session) and a
   few thousand alerts: the view is *not* built in-process, the API rebuilds it from Kafka;
2. starts the API (``python -m streamstate_api``) on an empty store and times the cold
   rebuild from process start until /readyz is 200; notes the RSS;
3. at each rate, drives an open-loop load from a second process: requests are sent on a
   fixed schedule whatever the answers do, and latency is measured from the scheduled send
   time, so a stalled server shows up in the tail instead of silently lowering the rate;
4. stops the API (SIGTERM, then SIGKILL) and times each restart to ready with the store present;
5. prints p50/p99 (overall and per route) and writes everything as JSON.

Request mix: 90 % ``GET /sessions/{random user}``, 10 % ``GET /sessions?limit=100&cursor=<random user>``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "api_latency.json"


# --------------------------------------------------------------------------- load generator
# A minimal HTTP/1.1 keep-alive client on asyncio streams: httpx's per-request overhead
# (and a pool that stalled on server-closed connections here) would make the generator,
# not the server, the bottleneck on two shared cores.
class _Connection:
    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def get(self, target: str) -> int:
        for attempt in (1, 2):  # one retry: the server may have closed an idle keep-alive connection
            try:
                if self.writer is None:
                    self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
                self.writer.write(f"GET {target} HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode())
                head = await self.reader.readuntil(b"\r\n\r\n")
                status = int(head.split(b" ", 2)[1])
                length = next(
                    int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
                )
                await self.reader.readexactly(length)
                return status
            except (ConnectionError, asyncio.IncompleteReadError):
                self.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def drive(url: str, rate: float, duration_s: float, users: int, connections: int, seed: int) -> dict:
    """Open-loop load; returns latency samples in ms per route, status counts and errors."""
    from urllib.parse import urlsplit

    from streamstate_api.cursor import encode_cursor

    address = urlsplit(url)
    rng = random.Random(seed)
    samples: dict[str, list[float]] = {"/sessions/{user_id}": [], "/sessions": []}
    statuses: dict[str, int] = {}
    slow_by_second: dict[int, int] = {}  # when the >100 ms answers were scheduled: one stall or spread out?
    errors = 0
    due: asyncio.Queue = asyncio.Queue()

    async def worker() -> None:
        nonlocal errors
        connection = _Connection(address.hostname, address.port)
        while (item := await due.get()) is not None:
            scheduled, route, target = item
            try:
                status = await connection.get(target)
            except (OSError, asyncio.IncompleteReadError, StopIteration, ValueError):
                errors += 1
                continue
            statuses[str(status)] = statuses.get(str(status), 0) + 1
            latency_ms = (time.perf_counter() - scheduled) * 1000
            samples[route].append(latency_ms)
            if latency_ms > 100:
                second = int(scheduled - start)
                slow_by_second[second] = slow_by_second.get(second, 0) + 1
        connection.close()

    workers = [asyncio.create_task(worker()) for _ in range(connections)]
    interval = 1.0 / rate
    start = time.perf_counter() + 0.2
    for i in range(int(rate * duration_s)):
        scheduled = start + i * interval
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        user = user_id(rng.randrange(users))
        if rng.random() < 0.9:
            due.put_nowait((scheduled, "/sessions/{user_id}", f"/sessions/{user}"))
        else:
            due.put_nowait((scheduled, "/sessions", f"/sessions?limit=100&cursor={encode_cursor(user)}"))
    sent_over_s = time.perf_counter() - start
    for _ in workers:
        due.put_nowait(None)
    await asyncio.gather(*workers)
    return {"samples": samples, "statuses": statuses, "errors": errors, "sent_over_s": sent_over_s, "slow_by_second": slow_by_second}


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)

    return {"count": len(ordered), "p50_ms": at(0.50), "p90_ms": at(0.90), "p99_ms": at(0.99), "p999_ms": at(0.999), "max_ms": round(ordered[-1], 3)}


# --------------------------------------------------------------------------- data
def user_id(i: int) -> str:
    return f"user-{i:07d}"


def snapshot_bodies(count: int):
    from streamstate_pipeline.contracts import ActivitySpan, Behaviour, OpenSession, SessionSnapshot

    def template(active: bool) -> str:
        snapshot = SessionSnapshot(
            user_id="\x00USER\x00",
            ts=1_700_000_000_000,
            open_session=OpenSession(
                start=1_699_999_000_000, last_activity=1_700_000_000_000, events=12, page_views=7, clicks=4,
                purchases=1, purchase_total=19.99, current_activity="click", activity_start=1_699_999_990_000,
            ) if active else None,
            behaviour=Behaviour(total_sessions=3, total_page_views=40, total_events=77, total_session_ms=5_400_000, avg_session_ms=1_800_000.0),
            activities={"page_view": ActivitySpan(first=1_690_000_000_000, last=1_700_000_000_000)},
        )
        return snapshot.model_dump_json().replace("\\u0000USER\\u0000", "{user}")

    templates = (template(True), template(False))
    for i in range(count):
        user = user_id(i)
        yield user, templates[i % 2].replace("{user}", user).encode()


def publish_sessions(bootstrap: str, topic: str, count: int) -> float:
    from confluent_kafka import Producer

    started = time.perf_counter()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000, "queue.buffering.max.messages": 500_000})
    for n, (user, body) in enumerate(snapshot_bodies(count)):
        while True:
            try:
                producer.produce(topic, key=user.encode(), value=body)
                break
            except BufferError:
                producer.poll(0.05)
        if n % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0, "session snapshots not delivered"
    return time.perf_counter() - started


def publish_alerts(bootstrap: str, topic: str, count: int) -> None:
    from confluent_kafka import Producer

    from streamstate_pipeline.contracts import Alert

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(count):
        alert = Alert.build("bot_burst", user_id(i), 1_700_000_000_000 + i, "burst", page_views=60)
        producer.produce(topic, key=alert.alert_id.encode(), value=alert.to_json())
    assert producer.flush(60) == 0


# How long the machine must be quiet before a cold rebuild, and how long the bench waits for that.
# A compacted topic's freshly published snapshots are compacted by the broker's log cleaner: at
# 10 million, for about a minute, on one of two cores. A cold rebuild started meanwhile measured
# 187-197k snapshots/s in scratch runs, and 227k/s once it was done. The cleaner looks for work
# every 15 s (``log.cleaner.backoff.ms``), so it may start seconds after the publishing ends:
# quiet for longer than that, the machine has no cleaning left to do. The figure before this one
# may also still be cleaning up.
QUIET_FOR_S = 21.0
QUIET_TIMEOUT_S = 600.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def group_cpu_seconds(pgid: int) -> float:
    """User + system CPU time of every live process in a process group (the API and its validation workers)."""
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


# --------------------------------------------------------------------------- orchestration
def wait_ready(client, api, timeout_s: float = 3600) -> float:
    """Seconds until /readyz answers 200 (the view caught up with the topics' ends)."""
    import httpx

    started = time.perf_counter()
    while time.perf_counter() - started < timeout_s:
        if not api.alive():
            raise SystemExit(f"API exited:\n{api.tail()}")
        try:
            if client.get("/readyz").status_code == 200:
                return time.perf_counter() - started
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"API not ready after {timeout_s}s:\n{api.tail()}")


def metric(client, prefix: str) -> float:
    metrics = client.get("/metrics").text
    return next(float(line.rpartition(" ")[2]) for line in metrics.splitlines() if line.startswith(prefix))


def view_size(client) -> int:
    return int(metric(client, 'streamstate_api_view_size{view="sessions"}'))


def run_size(args: argparse.Namespace, sessions: int) -> dict:
    """One view size on a fresh broker: cold rebuild, RSS, load at each rate, restarts with the store present."""
    import httpx

    from bench.measure import wait_until_quiet
    from streamstate_pipeline.settings import Settings
    from streamstate_stack.launcher import EmbeddedStack, free_port

    workdir = Path(tempfile.mkdtemp(prefix="bench-api-"))
    settings = Settings(checkpoint_root=str(workdir / "checkpoints"), api_port=free_port(), api_store_path=workdir / "api-store")
    try:
        with EmbeddedStack(settings=settings, workdir=workdir, quiet=False) as stack:
            stack.start_broker()
            bootstrap = stack.settings.bootstrap_servers
            print(f"publishing {sessions:,} session snapshots ...", flush=True)
            publish_s = publish_sessions(bootstrap, stack.settings.topic_session_state, sessions)
            publish_alerts(bootstrap, stack.settings.topic_alerts, 5_000)
            print(f"published in {publish_s:.1f}s; waiting for a quiet machine (the broker's log cleaner compacts them) ...", flush=True)
            settle_s = wait_until_quiet(quiet_for_s=QUIET_FOR_S, timeout_s=QUIET_TIMEOUT_S)
            if settle_s is not None:
                print(f"quiet after {settle_s:.1f}s; starting the API on an empty store", flush=True)
            url = f"http://{stack.settings.api_host}:{stack.settings.api_port}"
            with httpx.Client(base_url=url, timeout=5) as client:
                api = stack.start_api()
                rebuild_s = wait_ready(client, api)
                rebuild_cpu_s = group_cpu_seconds(api.pid)
                size = view_size(client)
                # The follower's own catch-up: from its first fetch (after start-up and the end-offset lookup) to the last record.
                follower_s = metric(client, "streamstate_api_catch_up_seconds ")
                follower_records = metric(client, "streamstate_api_catch_up_records ")
                rss_rebuilt = rss_mb(api.pid)
                print(f"cold rebuild: {size:,} sessions in {rebuild_s:.1f}s ({size / rebuild_s:,.0f}/s from process start; "
                      f"the follower's catch-up {follower_s:.1f}s), "
                      f"API RSS {rss_rebuilt} MB", flush=True)
                loads = {
                    f"{rate:g}": [drive_once(args, url, api.pid, index, rate, sessions) for index in range(args.runs)]
                    for rate in args.rates
                }
                rss_loaded = rss_mb(api.pid)
                restarts = {}
                for how in ("sigterm", "sigkill"):
                    api.stop() if how == "sigterm" else api.kill()
                    api = stack.start_api()
                    restarts[how] = round(wait_ready(client, api), 2)
                    print(f"restart after {how} to ready with the store present: {restarts[how]}s", flush=True)
                assert view_size(client) == size, "the restarted view lost sessions"
                rss_restarted = rss_mb(api.pid)
                store_mb = round(sum(f.stat().st_size for f in settings.api_store_path.rglob("*") if f.is_file()) / 1e6, 1)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return {
        "sessions": size,
        "publish_s": round(publish_s, 1),
        "quiet_after_s": None if settle_s is None else round(settle_s, 1),
        "cold_rebuild_s": round(rebuild_s, 2),
        "cold_rebuild_per_s": round(size / rebuild_s),
        "cold_rebuild_follower_s": round(follower_s, 2),
        # CPU of the API and its validation workers until ready (start-up included): unlike the
        # wall time, this does not depend on what else runs on the machine.
        "cold_rebuild_cpu_s": round(rebuild_cpu_s, 1),
        "cold_rebuild_cpu_us_per_snapshot": round(rebuild_cpu_s * 1e6 / max(size, 1), 1),
        "cold_rebuild_follower_per_s": round(follower_records / follower_s) if follower_s else None,
        "restart_to_ready_s": restarts,
        "api_rss_mb": {"rebuilt": rss_rebuilt, "after_load": rss_loaded, "restarted": rss_restarted},
        "store_disk_mb": store_mb,
        "loads": loads,
    }


def run(args: argparse.Namespace) -> dict:
    sizes = {f"{n}": run_size(args, n) for n in args.sizes}
    return {
        "benchmark": "snapshot API: cold rebuild, restart with the store, RSS, open-loop latency at fixed rates",
        "view": "published to Apache Kafka (KRaft), rebuilt by the API process from session-state into its store",
        "duration_s": args.duration,
        "rates": args.rates,
        "machine": f"{os.cpu_count()} cores, shared with the load generator (asyncio, raw HTTP/1.1 keep-alive)",
        "sizes": sizes,
    }


def drive_once(args: argparse.Namespace, url: str, api_pid: int, index: int, rate: float, sessions: int) -> dict:
    """One period of load from a second process against the running API; its latencies and costs."""
    print(f"driving {rate:.0f} req/s for {args.duration:.0f}s from a second process (run {index + 1}) ...", flush=True)
    cpu_before = cpu_seconds(api_pid)
    driver = subprocess.run(
        [sys.executable, __file__, "--drive", url, "--rate", str(rate), "--duration", str(args.duration),
         "--sessions", str(sessions), "--connections", str(args.connections), "--seed", str(7 + index)],
        capture_output=True, text=True, check=True, timeout=args.duration * 3 + 60,
    )
    load = json.loads(driver.stdout)
    api_cpu_s = cpu_seconds(api_pid) - cpu_before
    all_samples = [v for values in load["samples"].values() for v in values]
    return {
        "achieved_send_rate_per_s": round(len(all_samples) / load["sent_over_s"], 1) if load["sent_over_s"] else None,
        "statuses": load["statuses"],
        "errors": load["errors"],
        "overall": percentiles(all_samples),
        "by_route": {route: percentiles(values) for route, values in load["samples"].items()},
        "answers_over_100ms_by_second_of_load": load["slow_by_second"],
        # CPU the API spent per answer: unlike the latencies, this does not depend on what else runs.
        "api_cpu_ms_per_request": round(api_cpu_s * 1000 / max(len(all_samples), 1), 3),
        "api_rss_mb": rss_mb(api_pid),
        # Other work on the machine moves the tail: keep the load it had next to the numbers.
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000", help="comma-separated view sizes (sessions), each on a fresh broker")
    parser.add_argument("--rates", default="1000,2500,5000", help="comma-separated request rates per second")
    parser.add_argument("--sessions", type=int, default=1_000_000, help=argparse.SUPPRESS)  # the driver's user range
    parser.add_argument("--rate", type=float, default=1000.0, help=argparse.SUPPRESS)  # the driver's rate
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of load")
    parser.add_argument("--connections", type=int, default=32, help="keep-alive connections of the load generator")
    parser.add_argument("--runs", type=int, default=1, help="periods of load against the same API (one view rebuild)")
    parser.add_argument("--seed", type=int, default=7, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--drive", metavar="URL", help=argparse.SUPPRESS)  # internal: the load-generator process
    args = parser.parse_args()
    if args.drive:
        result = asyncio.run(drive(args.drive, args.rate, args.duration, args.sessions, args.connections, seed=args.seed))
        print(json.dumps(result))
        return
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    args.sizes = [int(n) for n in args.sizes.split(",") if n]
    args.rates = [float(r) for r in args.rates.split(",") if r]
    result = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for size, figures in result["sizes"].items():
        for rate, periods in figures["loads"].items():
            for index, period in enumerate(periods):
                overall = period["overall"]
                print(f"{int(size):,} sessions, {rate} req/s, run {index + 1}: p50 {overall['p50_ms']} ms, p99 {overall['p99_ms']} ms "
                      f"over {overall['count']:,} requests ({period['errors']} errors, API CPU {period['api_cpu_ms_per_request']} ms/request)")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
