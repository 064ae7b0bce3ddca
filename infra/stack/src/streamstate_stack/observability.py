"""Prometheus scrape configuration (and alerting rules) for the embedded stack and for docker compose.

Both configurations come from :func:`prometheus_config`, so the scrape jobs (and the
``job`` label every dashboard filters on) are the same wherever the stack runs. The
compose file ``infra/prometheus/prometheus.yml`` is rendered from this module and
checked against it by the tests; regenerate it with
``python -m streamstate_stack.observability``.
"""

from __future__ import annotations

from pathlib import Path

from streamstate_stack.files import write_atomic
from streamstate_jobs.registry import JOBS
from streamstate_pipeline.settings import REPO_ROOT, Settings

COMPOSE_CONFIG_PATH = REPO_ROOT / "infra" / "prometheus" / "prometheus.yml"
ALERT_RULES_PATH = REPO_ROOT / "infra" / "prometheus" / "alerts.yml"
# Where compose mounts ALERT_RULES_PATH in the Prometheus container (docker-compose.yml).
COMPOSE_ALERT_RULES = "/etc/prometheus/alerts.yml"

# Scrape job name -> whether the target's own ``job`` label wins. The Spark jobs (declared in
# streamstate_jobs.registry) label every metric with their job name (streamstate_jobs.metrics);
# the scrape job names equal those labels, so series look the same whichever way a label got there.
# Jobs declared without a metrics port serve no /metrics: there is nothing to scrape.
SERVING_JOBS = {name: spec for name, spec in JOBS.items() if spec.metrics_port}
SCRAPE_JOBS: dict[str, bool] = {"prometheus": False, "api": False, **{name: True for name in SERVING_JOBS}}

# Compose service names and ports (docker-compose.yml): a job's service is named <job>-job
# and serves /metrics on its setting's default port.
COMPOSE_TARGETS: dict[str, str] = {
    "prometheus": "localhost:9090",
    "api": "api:8000",
    **{name: f"{spec.service}:{spec.default_port()}" for name, spec in SERVING_JOBS.items()},
}


def prometheus_config(targets: dict[str, str], scrape_interval: str, header: str = "", rules: str | None = None) -> str:
    """A Prometheus config scraping ``targets`` (scrape job -> host:port) every interval,
    evaluating the alerting rules file ``rules`` when given."""
    unknown = set(targets) - set(SCRAPE_JOBS)
    if unknown:
        raise ValueError(f"unknown scrape jobs {sorted(unknown)}; known: {sorted(SCRAPE_JOBS)}")
    lines = [header.rstrip("\n")] if header else []
    lines += [
        "global:",
        f"  scrape_interval: {scrape_interval}",
        f"  evaluation_interval: {scrape_interval}",
        f"  scrape_timeout: {scrape_interval}",
    ]
    if rules is not None:
        lines += ["rule_files:", f"  - {rules}"]
    lines += ["scrape_configs:"]
    for job, target in targets.items():
        lines += [f"  - job_name: {job}"]
        if SCRAPE_JOBS[job]:
            lines += ["    honor_labels: true"]
        lines += ["    static_configs:", f"      - targets: ['{target}']"]
    return "\n".join(lines) + "\n"


def _loopback(host: str) -> str:
    # A server bound to every interface is scraped over loopback.
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


def embedded_targets(settings: Settings) -> dict[str, str]:
    """Scrape targets of the embedded stack, from its settings."""
    return {
        "prometheus": f"127.0.0.1:{settings.prometheus_port}",
        "api": f"{_loopback(settings.api_host)}:{settings.api_port}",
        **{name: f"127.0.0.1:{spec.port(settings)}" for name, spec in SERVING_JOBS.items()},
    }


def render_embedded_prometheus_config(settings: Settings, path: Path) -> Path:
    """Write the embedded stack's Prometheus config to ``path`` and return it.

    The scrape interval is short (settings.prometheus_scrape_interval, 2 s by default) so
    that rate() over a minute has data seconds after the stack starts.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    header = "# Rendered by streamstate_stack.observability for the embedded stack; do not edit.\n"
    write_atomic(
        path, prometheus_config(embedded_targets(settings), settings.prometheus_scrape_interval, header, str(ALERT_RULES_PATH))
    )
    return path


def render_compose_prometheus_config() -> str:
    """The text of ``infra/prometheus/prometheus.yml`` (compose service names)."""
    header = (
        "# Prometheus for docker compose: scrapes the services by their compose names.\n"
        "# Rendered by `python -m streamstate_stack.observability` from infra/stack/src/streamstate_stack/observability.py,\n"
        "# which the embedded stack's config also comes from; edit that, not this file.\n"
    )
    return prometheus_config(COMPOSE_TARGETS, "5s", header, COMPOSE_ALERT_RULES)


def main() -> None:
    """Regenerate infra/prometheus/prometheus.yml."""
    write_atomic(COMPOSE_CONFIG_PATH, render_compose_prometheus_config())
    print(f"wrote {COMPOSE_CONFIG_PATH}")


if __name__ == "__main__":
    main()
