"""Broker outage: the broker of a dedicated stack (not the session broker other tests
use) stops while a job and the API run. The API reports it (/readyz 503 with the reason,
``streamstate_api_broker_up`` 0), and the job says in its log what happened and what to
do, and shows ``streamstate_job_up`` 0 while it retries from its checkpoint (or exits
non-zero with that message): no silent crash loop."""

from __future__ import annotations

import re

import httpx
import pytest

from streamstate_pipeline.settings import Settings
from streamstate_stack.launcher import EmbeddedStack, free_port
from tests.integration.api_harness import wait_until
from tests.scenario import build_scenario, produce_scenario

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture
def outage_stack(tmp_path):
    settings = Settings(
        checkpoint_root=str(tmp_path / "checkpoints"),
        trigger_interval="1 second",
        api_port=free_port(),
        anomalies_metrics_port=free_port(),
        api_retry_s=0.5,
        api_store_path=tmp_path / "api-store",
    )
    stack = EmbeddedStack(settings=settings, workdir=tmp_path, quiet=True)
    stack.start_broker()
    yield stack
    stack.stop()


def _get(url: str) -> httpx.Response | None:
    try:
        return httpx.get(url, timeout=5)
    except httpx.TransportError:
        return None


def _sample(text: str, name: str) -> float | None:
    match = re.search(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else None


def test_jobs_and_api_report_a_broker_outage(outage_stack):
    stack, settings = outage_stack, outage_stack.settings
    produce_scenario(settings.bootstrap_servers, build_scenario(seed=3, events=50, metrics=200), settings)
    job = stack.start_job("anomalies")
    stack.start_api()
    api_url = f"http://{settings.api_host}:{settings.api_port}"
    job_metrics = f"http://127.0.0.1:{settings.anomalies_metrics_port}/metrics"

    def job_up() -> float | None:
        assert job.alive(), f"the job exited before the outage:\n{job.tail(40)}"
        response = _get(job_metrics)
        return None if response is None else _sample(response.text, "streamstate_job_up")

    wait_until(lambda: (r := _get(f"{api_url}/readyz")) is not None and r.status_code == 200, 90, "the API to be ready")
    wait_until(lambda: job_up() == 1, 180, f"the job's query to run:\n{job.tail()}")

    stack.processes["broker"].stop()

    def api_reports_outage() -> dict | None:
        ready = _get(f"{api_url}/readyz")
        metrics = _get(f"{api_url}/metrics")
        if ready is None or metrics is None or ready.status_code != 503:
            return None
        return ready.json() if _sample(metrics.text, "streamstate_api_broker_up") == 0 else None

    report = wait_until(api_reports_outage, 60, "the API to report the outage")
    assert settings.bootstrap_servers in report["reason"] and "unreachable" in report["reason"], report

    wait_until(lambda: "unreachable" in job.tail(200) or not job.alive(), 180, f"the job to report the outage:\n{job.tail()}")
    log = job.tail(200)
    message = next(line for line in log.splitlines() if "unreachable" in line)
    assert settings.bootstrap_servers in message and "checkpoint" in message, message
    if job.alive():
        wait_until(lambda: job_up() == 0, 60, "streamstate_job_up to drop to 0")
        # Stopped meanwhile, as `docker compose stop` does (SIGTERM, then SIGKILL after 10 s): its
        # stream thread waits on the broker and would never end; it stops cleanly in that time.
        job.stop()
        stopping = job.log_path.read_text(errors="replace").split("signal 15:", 1)[-1]
        assert job.popen.returncode == 0, f"the job did not stop cleanly while its broker was down:\n{job.tail(40)}"
        assert "Traceback" not in stopping, job.tail(40)
    else:
        assert job.popen.returncode != 0
    print(f"\nbroker outage: API said {report['reason']!r}; the job said {message.split(' ', 3)[-1]!r}")


def test_a_job_started_while_its_broker_is_down_waits_and_then_writes_in_transactions(outage_stack):
    """A job whose process started during an outage took the unanswered transaction probe for
    "this broker cannot run transactions" and wrote at least once for its whole life (its first
    query start also died on a timeout with a traceback). It now reports the outage, retries, and
    once the broker answers writes in transactions."""
    stack, settings = outage_stack, outage_stack.settings
    produce_scenario(settings.bootstrap_servers, build_scenario(seed=3, events=50, metrics=200), settings)
    stack.processes["broker"].stop()
    job = stack.start_job("anomalies")
    wait_until(lambda: "unreachable" in job.tail(200) or not job.alive(), 120, f"the job to report the outage:\n{job.tail(40)}")
    assert job.alive(), f"the job exited during the outage:\n{job.tail(40)}"
    assert stack.start_broker() == settings.bootstrap_servers, "the broker must come back on its address"
    job_metrics = f"http://127.0.0.1:{settings.anomalies_metrics_port}/metrics"

    def job_up() -> bool:
        assert job.alive(), f"the job exited:\n{job.tail(60)}"
        response = _get(job_metrics)
        return response is not None and _sample(response.text, "streamstate_job_up") == 1

    wait_until(job_up, 180, f"the job's query to run once the broker answers:\n{job.tail(40)}")
    log = job.log_path.read_text(errors="replace")
    assert "written at least once" not in log, "the outage was taken for a broker without transactions"
    assert "Traceback" not in log, job.tail(80)
    outage = next(line for line in log.splitlines() if "unreachable" in line)
    assert settings.bootstrap_servers in outage and "restarting from the checkpoint in" in outage, outage
    assert "query anomalies did not start;" in outage, outage
