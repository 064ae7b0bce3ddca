"""A bounded loopback HTTP load on the snapshot API, run as its own process:

    python -m tests.reliability.api_load URL --duration 60 --rate 300 --paths /a /b ...

Threads with keep-alive connections send GETs on a fixed schedule (rate per second over
all threads, capped: no unbounded load) cycling through ``--paths``, and print one JSON
object: requests answered, counts by status (overall and per path, so a test can hold each
path to its own tolerance), transport errors, and the wall-clock time of each error (so a
test can tell errors during a planned outage from errors after it).
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import threading
import time
from collections import Counter
from urllib.parse import urlsplit

MAX_RATE = 2_000


def _worker(host: str, port: int, paths: list[str], start: int, step: int, interval: float, until: float, out: dict) -> None:
    connection = http.client.HTTPConnection(host, port, timeout=10)
    i, due = start, time.monotonic()
    while (now := time.monotonic()) < until:
        if due > now:
            time.sleep(due - now)
        due += interval
        path = paths[i % len(paths)]
        i += step
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            response.read()
            out["statuses"][str(response.status)] += 1
            out["by_path"].setdefault(path, Counter())[str(response.status)] += 1
        except (OSError, http.client.HTTPException) as exc:
            out["errors"].append((time.time(), f"{path}: {type(exc).__name__}"))
            connection.close()
            connection = http.client.HTTPConnection(host, port, timeout=10)
            time.sleep(0.05)  # the server is down: do not spin
    connection.close()


def run_load(url: str, paths: list[str], duration_s: float, rate: float, threads: int = 8) -> dict:
    """Drive ``rate`` requests/s for ``duration_s`` at ``url``; returns the tallies."""
    address = urlsplit(url)
    rate = min(rate, MAX_RATE)
    until = time.monotonic() + duration_s
    tallies = [{"statuses": Counter(), "by_path": {}, "errors": []} for _ in range(threads)]
    workers = [
        threading.Thread(
            target=_worker, args=(address.hostname, address.port, paths, n, threads, threads / rate, until, tallies[n])
        )
        for n in range(threads)
    ]
    started = time.time()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    statuses = sum((t["statuses"] for t in tallies), Counter())
    by_path: dict[str, Counter] = {}
    for tally in tallies:
        for path, counts in tally["by_path"].items():
            by_path.setdefault(path, Counter()).update(counts)
    errors = sorted(e for t in tallies for e in t["errors"])
    return {
        "started": started,
        "seconds": time.time() - started,
        "answered": sum(statuses.values()),
        "statuses": dict(statuses),
        "by_path": {path: dict(counts) for path, counts in sorted(by_path.items())},
        "errors": len(errors),
        "error_times": [t for t, _ in errors],
        "error_samples": [what for _, what in errors[:5]],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--paths", nargs="+", required=True)
    parser.add_argument("--duration", type=float, default=60)
    parser.add_argument("--rate", type=float, default=300)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args(argv)
    json.dump(run_load(args.url, args.paths, args.duration, args.rate, args.threads), sys.stdout)


if __name__ == "__main__":
    main()
