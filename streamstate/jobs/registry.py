"""The pipeline's streaming jobs, each declared once.

A :class:`JobSpec` says everything the rest of the project needs to know about a job: its
name (query name, checkpoint directory, ``job`` label of its metrics, process and compose
service name), where its builder lives, the extra queries it runs beside the main one,
the topics it reads, which topic each kind of row it emits goes to, the setting of its
``/metrics`` port and the alert kinds it raises. The runner, the routing of its rows, the
stack launcher (``streamstate up``), the Prometheus configuration, the job metrics and the
command lines all read :data:`JOBS`; none of them names a job.

Settings are referred to by their field names, spelled out here in full (checked against
:class:`~streamstate.settings.Settings` when the module is imported), never built from the
job's name. Builders are ``"module:function"`` references, as console scripts are, because
this module is part of the shared core: the launcher, the API and the command lines import
it without importing Spark. Adding a job: docs/adding-a-job.md.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Literal, Mapping

from streamstate.settings import Settings


def _resolve(reference: str) -> Callable[..., Any]:
    """The function a ``"package.module:function"`` reference names."""
    module, _, name = reference.partition(":")
    if not module or not name:
        raise ValueError(f"builder reference {reference!r} is not 'module:function'")
    return getattr(importlib.import_module(module), name)


def _check_setting(job: str, what: str, name: str) -> None:
    if name not in Settings.model_fields:
        raise ValueError(f"job {job!r}: {what} names {name!r}, which is not a Settings field")


@dataclass(frozen=True)
class ExtraQuery:
    """A secondary streaming query of a job: its own checkpoint (``<job checkpoint>-<name>``),
    the same input topics, rows routed like the job's own."""

    name: str
    builder: str  # "module:function": build(spark, settings) -> DataFrame of (kind, key, payload)
    output_mode: Literal["append", "update", "complete"] = "append"

    def load_builder(self) -> Callable[..., Any]:
        return _resolve(self.builder)


@dataclass(frozen=True)
class JobSpec:
    """One streaming job of the pipeline."""

    name: str
    description: str  # one line: the job's --help and the registry listing
    builder: str  # "module:function": build(spark, settings) -> DataFrame of (kind, key, payload) rows
    inputs: tuple[str, ...]  # Settings fields naming the topics the job reads
    outputs: Mapping[str, str]  # kind of row -> Settings field naming its topic
    metrics_port: str  # Settings field of the job's /metrics port
    alert_kinds: tuple[str, ...] = ()  # Alert.kind values the job raises (their counters exist from the start)
    extra_queries: tuple[ExtraQuery, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "outputs", MappingProxyType(dict(self.outputs)))
        for name in self.inputs:
            _check_setting(self.name, "an input", name)
        for kind, name in self.outputs.items():
            _check_setting(self.name, f"the output of kind {kind!r}", name)
        _check_setting(self.name, "metrics_port", self.metrics_port)

    @property
    def service(self) -> str:
        """The job's process name: the stack's log file, compose's service and host name."""
        return f"{self.name}-job"

    @property
    def command(self) -> str:
        return f"streamstate-{self.name}-job"

    def load_builder(self) -> Callable[..., Any]:
        return _resolve(self.builder)

    def input_topics(self, settings: Settings) -> list[str]:
        return [getattr(settings, name) for name in self.inputs]

    def output_topics(self, settings: Settings) -> dict[str, str]:
        """kind -> topic, under ``settings``."""
        return {kind: getattr(settings, name) for kind, name in self.outputs.items()}

    def port(self, settings: Settings) -> int:
        """The job's /metrics port under ``settings`` (0: no server)."""
        return getattr(settings, self.metrics_port)

    def default_port(self) -> int:
        return Settings.model_fields[self.metrics_port].default


SESSIONS = JobSpec(
    name="sessions",
    description="Sessions job: per-user sessions, behaviour and alerts from the user-events topic.",
    builder="streamstate.jobs.sessions_job:build",
    inputs=("topic_user_events",),
    outputs={
        "alert": "topic_alerts",
        "session": "topic_sessions",
        "session_state": "topic_session_state",
        "dead_letter": "topic_dead_letters",
        "event_count": "topic_event_counts",
    },
    metrics_port="sessions_metrics_port",
    alert_kinds=("bot_burst", "purchase_without_view", "long_session"),
    extra_queries=(ExtraQuery("event-counts", "streamstate.jobs.sessions_job:event_counts", "update"),),
)

ANOMALIES = JobSpec(
    name="anomalies",
    description="Anomalies job: rolling-window z-score alerts and running statistics per metric series.",
    builder="streamstate.jobs.anomalies_job:build",
    inputs=("topic_metrics",),
    outputs={"alert": "topic_alerts", "metric_state": "topic_metric_state", "dead_letter": "topic_dead_letters"},
    metrics_port="anomalies_metrics_port",
    alert_kinds=("anomaly",),
)

# In start order: `streamstate up` starts them so, the Prometheus configs list them so.
JOBS: Mapping[str, JobSpec] = MappingProxyType({spec.name: spec for spec in (SESSIONS, ANOMALIES)})


def job_spec(name: str) -> JobSpec:
    """The declared job ``name``; ValueError naming the known ones otherwise."""
    try:
        return JOBS[name]
    except KeyError:
        raise ValueError(f"no job named {name!r}; declared jobs: {', '.join(JOBS)}") from None
