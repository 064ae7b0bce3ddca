"""Time to the first alert: from a user's start command to the first alert a read_committed
consumer sees on the alerts topic.

    .venv/bin/python -m bench.first_alert [--runs 3] [--target run|compose|both]

``run``: ``make run`` in this checkout, as a user starts it from a warm install (the packages,
jars and binaries in place; the broker's data and the checkpoints in ``var/`` as the last run
left them, so the jobs resume). The clock starts when ``make`` is started; the consumer joins
once the stack prints the broker's address, at the alerts topic's end, so only an alert of this
run counts. Ctrl-C (SIGINT to the process group) then stops the stack as a user's would.

``compose``: ``docker compose up -d --wait`` with the images and the compose file this checkout
configures (``make images``), then a consumer on the published Kafka port; the clock starts
with the ``up`` command. ``docker compose down -v`` after each run, so every run starts from
empty volumes (a first ``up``).

Each run's figures: seconds to the stack's "running" line (or ``up --wait``'s return) and to
the first alert. Prints the medians and writes them to ``bench/results/first_alert.json``,
where a target not measured keeps its figures. Nothing is asserted (the README's table gives
the goals: 20 s and 120 s).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_END, Consumer, KafkaError, KafkaException, TopicPartition

from streamstate_pipeline.settings import REPO_ROOT, Settings

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "first_alert.json"
BROKER_LINE = re.compile(r"^\s+Kafka broker\s+(\S+:\d+)")  # the stack's table, not make's messages
RUNNING_LINE = "streamstate is running"
COMPOSE_BOOTSTRAP = f"127.0.0.1:{os.environ.get('KAFKA_HOST_PORT', '9092')}"


class FirstAlert(threading.Thread):
    """Waits for the first committed record on the alerts topic, from the topic's end on."""

    def __init__(self, bootstrap: str, topic: str, started: float):
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.started = bootstrap, topic, started
        self.seconds: float | None = None
        self.stopping = threading.Event()

    def run(self) -> None:
        # librdkafka's long poll: the broker answers as the first transaction commits; a 10 ms
        # fetch wait cost the broker 1.7 CPU-s of the start it measures (bench/latency.py).
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "bench-first-alert", "enable.auto.commit": False,
                             "isolation.level": "read_committed", "log_level": 0})
        try:
            while not self.stopping.is_set():  # the topic exists once the stack has created it
                try:
                    metadata = consumer.list_topics(self.topic, timeout=2).topics.get(self.topic)
                except KafkaException:  # compose publishes the port before the broker behind it answers
                    metadata = None
                if metadata is not None and metadata.error is None and metadata.partitions:
                    break
                time.sleep(0.2)
            else:
                return
            consumer.assign([TopicPartition(self.topic, p, OFFSET_END) for p in metadata.partitions])
            while not self.stopping.is_set():
                message = consumer.poll(0.1)
                if message is not None and (message.error() is None or message.error().code() != KafkaError._PARTITION_EOF):
                    if message.error() is None:
                        self.seconds = time.monotonic() - self.started
                        return
        finally:
            consumer.close()

    def wait(self, timeout_s: float) -> float | None:
        self.join(timeout_s)
        self.stopping.set()
        return self.seconds


def make_run_once(timeout_s: float) -> dict[str, Any]:
    started = time.monotonic()
    proc = subprocess.Popen(["make", "run"], cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    running_s: float | None = None
    watcher: FirstAlert | None = None
    tail: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            tail = (tail + [line.rstrip()])[-40:]
            found = BROKER_LINE.search(line)
            if found and watcher is None:
                watcher = FirstAlert(found[1], Settings().topic_alerts, started)
                watcher.start()
            if RUNNING_LINE in line:
                running_s = time.monotonic() - started
            if running_s is not None and watcher is not None:  # the broker's line follows the running line
                break
            if time.monotonic() - started > timeout_s:
                break
        if watcher is None:
            raise RuntimeError("make run never printed the broker's address; its last lines:\n" + "\n".join(tail))
        # Keep draining the stack's output so that it never blocks on a full pipe.
        threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()  # type: ignore[union-attr]
        first_alert_s = watcher.wait(max(1.0, timeout_s - (time.monotonic() - started)))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(90)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return {"running_s": running_s, "first_alert_s": first_alert_s}


def compose_once(timeout_s: float) -> dict[str, Any]:
    subprocess.run(["docker", "compose", "down", "-v"], cwd=REPO_ROOT, capture_output=True, timeout=300)
    started = time.monotonic()
    watcher = FirstAlert(COMPOSE_BOOTSTRAP, Settings().topic_alerts, started)
    up = subprocess.Popen(["docker", "compose", "up", "-d", "--wait"], cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # The broker's port answers before --wait returns: the consumer starts as soon as it does.
        while up.poll() is None and not _port_open(COMPOSE_BOOTSTRAP):
            time.sleep(0.5)
        watcher.start()
        output, _ = up.communicate(timeout=timeout_s)
        if up.returncode != 0:
            raise RuntimeError(f"docker compose up -d --wait exited {up.returncode}:\n{output[-3000:]}")
        running_s = time.monotonic() - started
        first_alert_s = watcher.wait(max(1.0, timeout_s - running_s))
    finally:
        watcher.stopping.set()
        subprocess.run(["docker", "compose", "down", "-v"], cwd=REPO_ROOT, capture_output=True, timeout=300)
    return {"running_s": running_s, "first_alert_s": first_alert_s}


def _port_open(address: str) -> bool:
    import socket

    host, port = address.rsplit(":", 1)
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, int(port))) == 0


def _median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 1) if len(present) == len(values) and present else None


def measure(target: str, runs: int, timeout_s: float) -> dict[str, Any]:
    once = make_run_once if target == "run" else compose_once
    results = []
    for index in range(runs):
        result = once(timeout_s)
        results.append(result)
        print(f"  {target} run {index + 1}/{runs}: running after {result['running_s']} s, first alert after {result['first_alert_s']} s",
              flush=True)
    return {
        "runs": results,
        "running_s": _median([r["running_s"] for r in results]),
        "first_alert_s": _median([r["first_alert_s"] for r in results]),
    }


def write_figures(path: Path, figures: dict[str, Any]) -> None:
    """Write the measured targets' figures into ``path``, keeping the other target's as they were
    (``--target run`` leaves the compose figures of an earlier run in place)."""
    kept = json.loads(path.read_text()) if path.exists() else {}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**kept, **figures}, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--target", choices=("run", "compose", "both"), default="run")
    parser.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS", help="per run (default 300)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.target != "run" and subprocess.run(["docker", "info"], capture_output=True, timeout=60).returncode != 0:
        parser.error("the compose target needs a running Docker engine and the images built here: run `make images` "
                     "first (it starts the engine, builds the images and points plain `docker compose` at them)")
    figures: dict[str, Any] = {}
    for target in ("run", "compose") if args.target == "both" else (args.target,):
        print(f"first alert after `{'make run' if target == 'run' else 'docker compose up -d --wait'}`, {args.runs} runs:", flush=True)
        figures[target] = measure(target, args.runs, args.timeout)
        print(f"  median: running {figures[target]['running_s']} s, first alert {figures[target]['first_alert_s']} s", flush=True)
    write_figures(args.out, figures)
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
