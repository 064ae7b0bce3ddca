"""Each job is declared once (streamstate/jobs/registry.py): what the runner, routing, metrics,
Prometheus, the launcher and the command lines know of a job comes from its JobSpec."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from streamstate.jobs.registry import JOBS, JobSpec, job_spec
from streamstate.settings import Settings


@pytest.mark.parametrize("spec", JOBS.values(), ids=list(JOBS))
def test_builders_resolve_to_functions(spec):
    assert callable(spec.load_builder())
    for extra in spec.extra_queries:
        assert callable(extra.load_builder())


def test_a_setting_that_does_not_exist_is_refused_when_declared():
    with pytest.raises(ValueError, match="clicks_metrics_port"):
        JobSpec(name="clicks", description="", builder="m:f", inputs=(), outputs={}, metrics_port="clicks_metrics_port")
    with pytest.raises(ValueError, match="topic_clicks"):
        JobSpec(name="clicks", description="", builder="m:f", inputs=("topic_clicks",), outputs={},
                metrics_port="sessions_metrics_port")


def test_an_unknown_job_is_named_with_the_known_ones():
    with pytest.raises(ValueError, match="sessions, anomalies"):
        job_spec("clicks")


def test_settings_are_read_through_the_declared_fields():
    settings = Settings(topic_metrics="m2", topic_alerts="a2", anomalies_metrics_port=19102)
    anomalies = JOBS["anomalies"]
    assert anomalies.input_topics(settings) == ["m2"]
    assert anomalies.output_topics(settings)["alert"] == "a2"
    assert (anomalies.port(settings), anomalies.default_port()) == (19102, 9102)


# A third job, declared in a fresh interpreter before the readers import the registry: every
# reader must pick it up with nothing else changed.
THIRD_JOB = textwrap.dedent(
    """
    import json, sys
    from types import MappingProxyType
    import streamstate.jobs.registry as registry
    clicks = registry.JobSpec(
        name="clicks", description="Clicks job: a third job.", builder="json:loads",
        inputs=("topic_user_events",), outputs={"click_count": "topic_event_counts"},
        metrics_port="prometheus_port", alert_kinds=("click_storm",),
        extra_queries=(registry.ExtraQuery("clicks-extra", "json:dumps", "update"),),
    )
    registry.JOBS = MappingProxyType({**registry.JOBS, "clicks": clicks})

    from streamstate.stack.observability import COMPOSE_TARGETS, SCRAPE_JOBS, embedded_targets
    from streamstate.jobs.metrics import ALERT_KINDS_BY_JOB, JobMetrics
    from streamstate.jobs.routing import TOPIC_OF_KIND
    from streamstate.jobs.runner import _checkpoints, parse_args
    from streamstate.settings import Settings
    from streamstate.stack.up import input_streams
    from streamstate.cli import main

    args, settings = parse_args(clicks, ["--metrics-port", "19999"])
    metrics = JobMetrics("clicks")
    alert_series = sorted({s.labels["kind"] for m in metrics.registry.collect() if m.name == "streamstate_job_alerts" for s in m.samples})
    print(json.dumps({
        "scrape": SCRAPE_JOBS.get("clicks"),
        "compose": COMPOSE_TARGETS.get("clicks"),
        "embedded": embedded_targets(Settings(prometheus_port=19090)).get("clicks"),
        "alert_kinds": ALERT_KINDS_BY_JOB.get("clicks"),
        "alert_series": alert_series,
        "routing": TOPIC_OF_KIND.get("click_count"),
        "port": clicks.port(settings),
        "checkpoints": _checkpoints(clicks, "cp/clicks"),
        "streams": sorted(input_streams(Settings())),
    }))
    sys.stdout.flush()
    main(["jobs"])
    """
)


def test_a_third_job_is_one_declaration():
    result = subprocess.run([sys.executable, "-c", THIRD_JOB], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    first, _, listing = result.stdout.partition("\n")
    seen = json.loads(first)
    assert seen == {
        "scrape": True,
        "compose": "clicks-job:9090",
        "embedded": "127.0.0.1:19090",
        "alert_kinds": ["click_storm"],
        "alert_series": ["click_storm"],
        "routing": "topic_event_counts",
        "port": 19999,
        "checkpoints": ["cp/clicks", "cp/clicks-clicks-extra"],
        "streams": ["metrics", "user-events"],
    }
    assert "clicks\tClicks job: a third job." in listing
    assert "queries clicks, clicks-extra" in listing and "command streamstate-clicks-job" in listing
