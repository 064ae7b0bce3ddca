"""Stopping a benchmark run: a Ctrl-C while a dataset is produced, against the real embedded
broker, and ``kill -INT`` on a run started in the background, which must take its broker with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from bench.dataset import consume_all, produce
from streamstate_jobs.jvm_recycle import descendants
from streamstate_pipeline.settings import REPO_ROOT
from streamstate_producers.generators import UserEventGenerator

pytestmark = pytest.mark.timeout(180)


def test_a_ctrl_c_while_a_dataset_is_produced_stops_the_benchmark_after_flushing(bootstrap):
    """The producers' writer takes Ctrl-C as a stop and returns what it sent; the benchmark must
    stop there too, not go on to measure a partial dataset."""
    topic = f"bench-interrupted-{uuid.uuid4().hex[:8]}"
    handed = list(UserEventGenerator(seed=7, users=10, topic=topic).take(100))

    def records():
        yield from handed
        raise KeyboardInterrupt  # where Ctrl-C lands: in the producing loop

    with pytest.raises(KeyboardInterrupt, match=f"producing {topic}: sent 100 records"):
        produce(bootstrap, topic, records(), partitions=2)
    # The records handed over before it reached the broker.
    assert consume_all(bootstrap, topic, 2, expected=100, timeout_s=30)[0] == 100


def test_kill_int_stops_a_run_started_in_the_background_and_the_broker_it_started(tmp_path):
    out = tmp_path / "results.json"
    bench = subprocess.Popen(
        [sys.executable, "-m", "bench", "--only", "ceiling", "--start-busy", "--out", str(out)],
        cwd=REPO_ROOT, env={**os.environ, "PYTHONHASHSEED": "0"}, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        # As a shell starts `python -m bench ... &`: with SIGINT ignored, which Python inherits.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        assert bench.stdout is not None
        for line in bench.stdout:  # the broker is up once the run says it produces the datasets
            if "producing" in line:
                break
        else:
            pytest.fail(f"the run ended before producing its datasets: {bench.wait()}, {bench.stderr.read()}")  # type: ignore[union-attr]
        started = descendants(bench.pid)
        assert started, "the run started no broker"
        bench.send_signal(signal.SIGINT)
        _, stderr = bench.communicate(timeout=90)
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
    assert bench.returncode == 130, stderr
    assert "bench: interrupted" in stderr  # with what it had sent, when the signal came while it produced
    assert not out.exists()  # no figure was measured
    deadline = time.monotonic() + 10
    while (left := [pid for pid in started if os.path.exists(f"/proc/{pid}")]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"still running after the run ended: {left}"
