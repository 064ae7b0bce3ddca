"""Each job is declared once (spark-jobs/src/streamstate_jobs/registry.py): what the runner, routing, metrics,
Prometheus, the launcher and the command lines know of a job comes from its JobSpec."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap

import pytest

from streamstate_jobs.declaration import Counter, JobDeclarationError
from streamstate_jobs.registry import JOBS, job_spec
from streamstate_pipeline.settings import REPO_ROOT, Settings


def _doc_job_spec(**changes):
    from tests.doc_job import load_doc_job

    return dataclasses.replace(load_doc_job().JOB, **changes)


@pytest.mark.parametrize("spec", JOBS.values(), ids=list(JOBS))
def test_builders_are_functions_of_the_declaration(spec):
    assert all(callable(query.build) for query in spec.queries)
    assert [query.name for query in spec.queries] == [spec.name, *(extra.name for extra in spec.extra_queries)]


def test_a_setting_that_does_not_exist_is_refused_when_declared():
    with pytest.raises(JobDeclarationError, match="clicks_metrics_port"):
        _doc_job_spec(metrics_port="clicks_metrics_port")
    with pytest.raises(JobDeclarationError, match="topic_clicks"):
        _doc_job_spec(inputs=("topic_clicks",))


def test_two_metrics_of_one_name_are_refused_when_declared():
    with pytest.raises(JobDeclarationError, match="share a metric name"):
        _doc_job_spec(counters=(Counter("storms", "a"), Counter("other", "b", metric="streamstate_job_storms")))


def test_an_unknown_job_is_named_with_the_known_ones():
    with pytest.raises(JobDeclarationError, match="sessions, anomalies"):
        job_spec("clicks")


def test_settings_are_read_through_the_declared_fields():
    settings = Settings(topic_metrics="m2", topic_alerts="a2", anomalies_metrics_port=19102)
    anomalies = JOBS["anomalies"]
    assert anomalies.input_topics(settings) == ["m2"]
    assert anomalies.output_topics(settings)["alert"] == "a2"
    assert (anomalies.port(settings), anomalies.default_port()) == (19102, 9102)


# The third job of docs/adding-a-job.md, declared in a fresh interpreter before the readers import
# the registry: every reader must pick it up with nothing else changed.
THIRD_JOB = textwrap.dedent(
    """
    import dataclasses, json, sys
    from types import MappingProxyType
    from tests.doc_job import load_doc_job
    import streamstate_jobs.registry as registry
    clicks = dataclasses.replace(load_doc_job().JOB, metrics_port="prometheus_port")  # a port field that exists
    registry.JOBS = MappingProxyType({**registry.JOBS, "clicks": clicks})

    from streamstate_stack.observability import COMPOSE_TARGETS, SCRAPE_JOBS, embedded_targets
    from streamstate_jobs.metrics import JobMetrics
    from streamstate_jobs.runner import _checkpoints, parse_args
    from streamstate_pipeline.settings import Settings
    from streamstate_stack.up import input_streams
    from streamstate_pipeline.cli import main

    args, settings = parse_args(clicks, ["--metrics-port", "19999"])
    metrics = JobMetrics(clicks)
    samples = {(s.name, tuple(sorted(s.labels.items()))) for m in metrics.registry.collect() for s in m.samples}
    print(json.dumps({
        "scrape": SCRAPE_JOBS.get("clicks"),
        "compose": COMPOSE_TARGETS.get("clicks"),
        "embedded": embedded_targets(Settings(prometheus_port=19090)).get("clicks"),
        "alert_series": sorted(dict(labels)["kind"] for name, labels in samples if name == "streamstate_job_alerts_total"),
        "counter": ("streamstate_job_click_storms_total", (("job", "clicks"),)) in samples,
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
        "alert_series": ["click_storm"],
        "counter": True,
        "port": 19999,
        "checkpoints": ["cp/clicks"],
        "streams": ["metrics", "user-events"],
    }
    assert "clicks\tClicks job: click storms per user from the user-events topic." in listing
    assert "writes alert -> alerts, dead_letter -> dead-letters" in listing and "command streamstate-clicks-job" in listing


@pytest.mark.parametrize("spec", JOBS.values(), ids=list(JOBS))
def test_the_spark_submit_application_runs_each_declared_job(spec):
    """spark-jobs/submit.py <name> runs the declared job (its --help parses before Spark starts)."""
    application = REPO_ROOT / "spark-jobs" / "submit.py"
    result = subprocess.run([sys.executable, str(application), spec.name, "--help"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert spec.description in " ".join(result.stdout.split())


def test_the_spark_submit_application_refuses_an_undeclared_job():
    application = REPO_ROOT / "spark-jobs" / "submit.py"
    result = subprocess.run([sys.executable, str(application), "clicks"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "no job named 'clicks'" in result.stderr and ", ".join(JOBS) in result.stderr
