"""What a streaming job declares about itself: :class:`JobSpec` and the metrics it feeds.

A job is one declaration plus its rule. The declaration says everything the rest of the
project needs to know: its name (query name, checkpoint directory, ``job`` label of its
metrics, process and compose service name), the function that builds its rows, the queries
it runs beside the main one, the topics it reads, which topic each kind of row goes to, the
setting of its ``/metrics`` port, the alert kinds it raises and the counters and gauges of
its own. The runner, the routing of its rows, the job metrics, the Prometheus configuration,
the stack launcher and the command lines all read the declarations listed in
:mod:`streamstate_jobs.registry`; none of them names a job or one of its counters.

Settings are referred to by their field names, spelled out in full and checked against
:class:`~streamstate_pipeline.settings.Settings` when the job is declared, never built from the
job's name. Builders are the functions themselves, called with a
:class:`~streamstate_jobs.context.JobContext`. Adding a job: docs/adding-a-job.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping

from streamstate_pipeline.settings import Settings
from streamstate_pipeline.errors import ConfigurationError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from streamstate_jobs.context import JobContext

# build(ctx) -> DataFrame of string columns (kind, key, payload)
JobBuilder = Callable[["JobContext"], "DataFrame"]
OutputMode = Literal["append", "update", "complete"]


class JobDeclarationError(ConfigurationError, ValueError):
    """A job's declaration names something that does not exist or contradicts itself."""


def _check_setting(job: str, what: str, name: str) -> None:
    if name not in Settings.model_fields:
        raise JobDeclarationError(f"job {job!r}: {what} names {name!r}, which is not a Settings field")


@dataclass(frozen=True)
class ExtraQuery:
    """A secondary streaming query of a job: its own checkpoint (``<job checkpoint>-<name>``),
    the same input topics, rows routed like the job's own."""

    name: str
    build: JobBuilder
    output_mode: OutputMode = "append"


def count_key(key: str) -> tuple[str, str | None]:
    """A COUNT record's key as (counter name, label value or None): ``"<name>"`` or ``"<name>:<label value>"``."""
    name, _, label = key.partition(":")
    return name, label or None


@dataclass(frozen=True)
class _Metric:
    """What a job's counters and gauges share: the metric is ``streamstate_job_<name>`` with the
    job's ``job`` label unless ``metric`` names another (then ``job_label`` says whether it has one)."""

    name: str
    documentation: str
    metric: str = ""
    job_label: bool = True
    label: str | None = None

    @property
    def metric_name(self) -> str:
        return self.metric or f"streamstate_job_{self.name}"


@dataclass(frozen=True)
class Counter(_Metric):
    """A Prometheus counter that the job's rows feed.

    The job's function yields ``Emit(Kind.COUNT, "<name>", "<increment>")``, or
    ``"<name>:<label value>"`` for a labelled counter; routing adds each batch's increments.
    ``label_values`` exist at 0 from the first scrape: a ``rate()`` over a series that appears
    at its first increment loses it.
    """

    label_values: tuple[str, ...] = ()


@dataclass(frozen=True)
class Gauge(_Metric):
    """A Prometheus gauge of the job, fed in one of two ways.

    - ``adds`` / ``subtracts``: counter names (declared or not) whose increments move it, a
      running balance since the process started, never below 0 (sessions opened minus closed).
    - ``reads``: a kind of row and a pure function of that batch's payloads (decoded JSON) to
      ``{label value: value}``; it is called only on batches holding rows of that kind.
    """

    adds: tuple[str, ...] = ()
    subtracts: tuple[str, ...] = ()
    reads: tuple[str, Callable[[list[dict[str, Any]]], Mapping[str, float]]] | None = None


@dataclass(frozen=True)
class JobSpec:
    """One streaming job of the pipeline."""

    name: str
    description: str  # one line: the job's --help and the registry listing
    build: JobBuilder
    inputs: tuple[str, ...]  # Settings fields naming the topics the job reads
    outputs: Mapping[str, str]  # kind of row -> Settings field naming its topic
    metrics_port: str | None = None  # Settings field of the job's /metrics port (None: the job serves none)
    alert_kinds: tuple[str, ...] = ()  # Alert.kind values the job raises (their counters exist from the start)
    extra_queries: tuple[ExtraQuery, ...] = ()
    counters: tuple[Counter, ...] = ()
    gauges: tuple[Gauge, ...] = ()
    count_names: frozenset[str] = field(init=False)  # what the job's COUNT rows may name

    def __post_init__(self) -> None:
        object.__setattr__(self, "outputs", MappingProxyType(dict(self.outputs)))
        for name in self.inputs:
            _check_setting(self.name, "an input", name)
        for kind, name in self.outputs.items():
            _check_setting(self.name, f"the output of kind {kind!r}", name)
        if self.metrics_port is not None:
            _check_setting(self.name, "metrics_port", self.metrics_port)
        names = {c.name for c in self.counters} | {n for g in self.gauges for n in (*g.adds, *g.subtracts)}
        object.__setattr__(self, "count_names", frozenset(names))
        metrics = [c.metric_name for c in self.counters] + [g.metric_name for g in self.gauges]
        if len(set(metrics)) != len(metrics):
            raise JobDeclarationError(f"job {self.name!r}: two of its counters and gauges share a metric name: {metrics}")

    @property
    def service(self) -> str:
        """The job's process name: the stack's log file, compose's service and host name."""
        return f"{self.name}-job"

    @property
    def command(self) -> str:
        return f"streamstate-{self.name}-job"

    @property
    def queries(self) -> tuple[ExtraQuery, ...]:
        """The job's queries: its own (named after the job), then the extra ones."""
        return (ExtraQuery(self.name, self.build), *self.extra_queries)

    def input_topics(self, settings: Settings) -> list[str]:
        return [getattr(settings, name) for name in self.inputs]

    def output_topics(self, settings: Settings) -> dict[str, str]:
        """kind -> topic, under ``settings``."""
        return {kind: getattr(settings, name) for kind, name in self.outputs.items()}

    def port(self, settings: Settings) -> int:
        """The job's /metrics port under ``settings`` (0: no server)."""
        return getattr(settings, self.metrics_port) if self.metrics_port else 0

    def default_port(self) -> int:
        return Settings.model_fields[self.metrics_port].default if self.metrics_port else 0
