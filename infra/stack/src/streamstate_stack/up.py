"""``streamstate up``: the whole pipeline without Docker, until Ctrl-C.

Starts the profile's broker and topics (and, in the production profile, MinIO for the
checkpoints; with ``STREAMSTATE_SOURCE=kinesis`` also the local Kinesis server and the input
streams, which the jobs then read and the producers write), both jobs, the API, Prometheus
when installed, and the demo producers; prints where to look, then a status line every few
seconds (alerts, sessions and series seen by the API) so it is visible that data flows.
Ctrl-C or SIGTERM stops every process it started.

The broker listens where ``bootstrap_servers`` says (``127.0.0.1:9092`` by default; another
free port when something listens on that one, and the output says so; a port that only holds
connections in TIME_WAIT, as right after a crash, is kept: the broker binds it all the same,
:func:`~streamstate_stack.launcher.port_free`). A second run resumes: Kafka keeps its data
in ``var/kafka`` (and MinIO in ``var/minio``), so the jobs go on from their checkpoints and
nothing is processed twice or skipped. With ``var/kafka`` deleted the run starts over,
moving the old local checkpoints aside. The start-up output says which.
"""

from __future__ import annotations

import json
import signal
import threading
import time
import urllib.request
from typing import TYPE_CHECKING, Mapping

from streamstate_stack.profiles import EMBEDDED, Profile
from streamstate_pipeline.settings import Settings
from streamstate_stack.launcher import EmbeddedStack, free_port, port_free
from streamstate_pipeline.topics import load_topics

if TYPE_CHECKING:
    from streamstate_jobs.declaration import JobSpec

STATUS_EVERY_S = 10.0


def declared_jobs() -> Mapping[str, JobSpec]:
    """The jobs of :mod:`streamstate_jobs.registry`. Their modules import PySpark, pandas and
    pyarrow (most of a second on 2 cores), so ``up`` imports them while the broker's JVM starts."""
    from streamstate_jobs.registry import JOBS

    return JOBS


def broker_port(settings: Settings) -> int:
    """The port ``bootstrap_servers`` names for the local broker, or a free one when it is busy (said)."""
    _, _, text = settings.bootstrap_servers.split(",")[0].rpartition(":")
    port = int(text) if text.isdigit() else 9092
    if port_free(port):
        return port
    moved = free_port()
    print(f"[streamstate] port {port} (bootstrap_servers) is busy; the broker listens on {moved}", flush=True)
    return moved


def _free_ports(settings: Settings) -> Settings:
    """Keep the configured ports where they are free; move the busy ones, and say so."""
    moved = {}
    for field in ("api_port", *(spec.metrics_port for spec in declared_jobs().values() if spec.metrics_port), "prometheus_port"):
        port = getattr(settings, field)
        if port and not port_free(port):
            moved[field] = free_port()
            print(f"[streamstate] port {port} ({field}) is busy; using {moved[field]}", flush=True)
    return settings.with_overrides(**moved)


def _api_json(settings: Settings, path: str) -> dict | None:
    request = urllib.request.Request(f"http://{settings.api_host}:{settings.api_port}{path}")
    if settings.api_token is not None:
        request.add_header("Authorization", f"Bearer {settings.api_token}")
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return json.loads(response.read())
    except (OSError, ValueError):
        return None


def _status_line(settings: Settings) -> str:
    alerts = _api_json(settings, "/alerts?limit=3")
    active = _api_json(settings, "/sessions?limit=1000&active=true")
    if alerts is None or active is None:
        return "waiting for the API..."
    latest = "; ".join(f"{a['kind']} on {a['entity']}" for a in alerts["items"]) or "none yet"
    more = "+" if active["next_cursor"] else ""
    return f"active sessions: {len(active['items'])}{more}; latest alerts: {latest}"


def input_streams(settings: Settings) -> dict[str, int]:
    """The Kinesis streams of ``source=kinesis``: the jobs' input topics' names, with their partition counts as shards."""
    counts = {t.name: t.partitions for t in load_topics(settings.topics_file, settings.partitions)}
    inputs = dict.fromkeys(topic for spec in declared_jobs().values() for topic in spec.input_topics(settings))
    return {name: counts.get(name, 4) for name in inputs}


def up(settings: Settings, *, producers: bool = True, jobs: bool = True, profile: Profile = EMBEDDED) -> int:
    stack = EmbeddedStack(settings=settings, profile=profile)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        stack.say(f"profile {profile.name}: {profile.summary}")
        stack.start_infrastructure(broker_port(settings), meanwhile=declared_jobs)
        declared = declared_jobs()
        stack.settings = _free_ports(stack.settings)
        if settings.source == "kinesis":
            stack.start_kinesis(streams=input_streams(settings))
        stack.say(stack.prepare_checkpoints())
        if jobs:
            for name in declared:
                stack.start_job(name)
        stack.start_api()
        stack.start_prometheus()
        if producers:
            stack.start_producers("demo")
        s = stack.settings
        print(
            "\n".join(
                [
                    "",
                    "streamstate is running. Where to look:",
                    f"  Kafka broker    {s.bootstrap_servers}  (e.g. streamstate topics list --bootstrap-servers {s.bootstrap_servers})",
                    f"  API docs        http://{s.api_host}:{s.api_port}/docs",
                    f"  recent alerts   http://{s.api_host}:{s.api_port}/alerts",
                    f"  active sessions http://{s.api_host}:{s.api_port}/sessions?active=true",
                    "  job metrics     "
                    + "  ".join(f"http://127.0.0.1:{spec.port(s)}/metrics ({name})" for name, spec in declared.items() if spec.metrics_port),
                    f"  logs            {stack.workdir / 'logs'}",
                    f"  checkpoints     {s.checkpoint_root}",
                    "The first alerts arrive 15-25 s after start on 2 cores, once Spark has warmed up. Ctrl-C stops everything.",
                    "",
                ]
            ),
            flush=True,
        )
        next_status = time.monotonic() + STATUS_EVERY_S
        while not stop.is_set():
            for proc in stack.processes.values():
                if not proc.alive():
                    print(f"[streamstate] {proc.name} exited with code {proc.popen.returncode}; last lines:\n{proc.tail()}", flush=True)
                    return 1
            if time.monotonic() >= next_status:
                print(f"[streamstate] {_status_line(s)}", flush=True)
                next_status = time.monotonic() + STATUS_EVERY_S
            stop.wait(0.5)
        print("[streamstate] stopping...", flush=True)
        return 0
    finally:
        stack.stop()
