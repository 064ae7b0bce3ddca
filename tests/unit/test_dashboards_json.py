"""The Grafana dashboards and provisioning files are valid and portable.

Grafana itself is not installable here; what it requires of provisioned dashboards is
checked directly: unique uids, the provisioned datasource referenced by uid, titled
panels with queries, no hard-coded instance or host, and only metric names that the
jobs and the API really export. PromQL syntax is checked by promtool where installed.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from streamstate_api.metrics import ApiMetrics
from streamstate_api.store import open_store
from streamstate_api.view import StateView
from streamstate_jobs.metrics import JobMetrics
from streamstate_jobs.registry import JOBS
from tests.dashboards import DASHBOARDS_DIR, DATASOURCE_UID, load_dashboards, panel_queries, panels
from streamstate_pipeline.settings import REPO_ROOT

PROVISIONING = REPO_ROOT / "infra" / "grafana" / "provisioning"
DASHBOARDS = load_dashboards()
QUERIES = [q for d in DASHBOARDS.values() for q in panel_queries(d)]
EXPECTED_DATASOURCE = {"type": "prometheus", "uid": DATASOURCE_UID}
# A PromQL identifier followed by anything but "(" (which would make it a function).
IDENTIFIER = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()")
HOST_LIKE = re.compile(r"instance\s*[=!]~?|localhost|\b\d{1,3}(\.\d{1,3}){3}\b|\w:\d{2,5}\b")


def exported_metric_names() -> set[str]:
    """Every series name the jobs and the API export (families with their suffixes)."""
    names: set[str] = set()
    store = open_store(Path(tempfile.mkdtemp(prefix="dashboards-")) / "store", 8, {"format": 1}).store
    registries = [JobMetrics(JOBS["sessions"]).registry, ApiMetrics(StateView(store, 10)).registry]
    for registry in registries:
        for family in registry.collect():
            suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"]}.get(family.type, [""])
            names.update(family.name + suffix for suffix in suffixes)
    return names


def test_there_are_dashboards():
    assert len(DASHBOARDS) >= 3, f"expected the dashboards in {DASHBOARDS_DIR}"


def test_uids_are_unique_and_present():
    uids = [d.get("uid") for d in DASHBOARDS.values()]
    assert all(uids), "every dashboard needs a uid"
    assert len(set(uids)) == len(uids), f"duplicate dashboard uids: {uids}"
    for path, dashboard in DASHBOARDS.items():
        assert dashboard.get("title"), f"{path.name} has no title"
        assert "id" not in dashboard or dashboard["id"] is None, f"{path.name}: a provisioned dashboard has no id"


def test_panel_ids_are_unique_within_each_dashboard():
    for path, dashboard in DASHBOARDS.items():
        ids = [p.get("id") for p in panels(dashboard)]
        assert len(set(ids)) == len(ids), f"{path.name}: duplicate panel ids {ids}"


@pytest.mark.parametrize("path", list(DASHBOARDS), ids=lambda p: p.name)
def test_every_panel_has_a_title_targets_and_the_provisioned_datasource(path: Path):
    for panel in panels(DASHBOARDS[path]):
        title = panel.get("title")
        assert title, f"{path.name}: panel {panel.get('id')} has no title"
        assert panel.get("datasource") == EXPECTED_DATASOURCE, f"{path.name} / {title}: datasource by uid"
        targets = panel.get("targets") or []
        assert targets, f"{path.name} / {title}: no query"
        for target in targets:
            assert target.get("expr", "").strip(), f"{path.name} / {title}: empty query"
            assert target.get("datasource", EXPECTED_DATASOURCE) == EXPECTED_DATASOURCE, f"{path.name} / {title}"
        ref_ids = [t.get("refId") for t in targets]
        assert len(set(ref_ids)) == len(ref_ids), f"{path.name} / {title}: duplicate refIds"


def test_no_query_names_an_instance_or_host():
    offending = [f"{q}: {q.expr}" for q in QUERIES if HOST_LIKE.search(q.expr)]
    assert not offending, "hard-coded instance/host:\n" + "\n".join(offending)


def test_queries_use_only_metrics_that_are_exported():
    known = exported_metric_names()
    unknown = [
        f"{q}: {name}"
        for q in QUERIES
        for name in IDENTIFIER.findall(re.sub(r'"[^"]*"|\{[^}]*\}|\[[^\]]*\]', " ", q.expr))
        if name.startswith("streamstate_") and name not in known
    ]
    assert not unknown, "queries name metrics nobody exports:\n" + "\n".join(unknown)


def test_datasource_provisioning_declares_the_uid_the_panels_use():
    config = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yml").read_text())
    (source,) = config["datasources"]
    assert (source["type"], source["uid"]) == ("prometheus", DATASOURCE_UID)


def test_dashboard_provider_points_where_compose_mounts_the_json():
    config = yaml.safe_load((PROVISIONING / "dashboards" / "streamstate.yml").read_text())
    (provider,) = config["providers"]
    assert provider["type"] == "file"
    compose = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())
    mounts = compose["services"]["grafana"]["volumes"]
    assert f"./infra/grafana/dashboards:{provider['options']['path']}:ro" in mounts


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (infra/install-test-deps.sh)")
def test_promtool_parses_every_query(tmp_path):
    rules = {"groups": [{"name": "dashboards", "rules": [
        {"record": f"dashboard:query_{i}", "expr": q.expr} for i, q in enumerate(QUERIES)
    ]}]}
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rules))
    result = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def _fields_lost(written, parsed, where: str = "") -> list[str]:
    """Each field of ``written`` that is missing from ``parsed`` (what the schema's models kept)."""
    if isinstance(written, dict):
        if not isinstance(parsed, dict):
            return [f"{where or '/'}: not an object in Grafana's schema"]
        return [lost for key, value in written.items()
                for lost in ([f"{where}/{key}"] if key not in parsed else _fields_lost(value, parsed[key], f"{where}/{key}"))]
    if isinstance(written, list):
        if not isinstance(parsed, list) or len(parsed) != len(written):
            return [f"{where}: not a list of {len(written)} in Grafana's schema"]
        return [lost for i, (a, b) in enumerate(zip(written, parsed)) for lost in _fields_lost(a, b, f"{where}[{i}]")]
    return []


@pytest.mark.parametrize("path", sorted(DASHBOARDS), ids=lambda p: p.name)
def test_every_field_is_in_grafanas_published_dashboard_schema(path: Path):
    """Read with Grafana Labs' foundation SDK for the pinned Grafana release (its models are
    generated from Grafana's own schema: the dashboard, each panel type's options and field
    config, the Prometheus query): a field the schema does not know is dropped, so a misspelled
    or invented key, which Grafana would ignore silently, shows up as lost."""
    from grafana_foundation_sdk.cog import plugins
    from grafana_foundation_sdk.models.dashboard import Dashboard

    plugins.register_default_plugins()  # panel options and queries typed by panel type and datasource
    written = DASHBOARDS[path]
    parsed = json.loads(json.dumps(Dashboard.from_json(written).to_json(), default=lambda model: model.to_json()))
    assert _fields_lost(written, parsed) == [], f"{path.name}: fields Grafana's schema does not have"


def test_the_schema_checked_is_the_grafana_release_compose_runs():
    from importlib.metadata import version

    sdk = version("grafana-foundation-sdk").split("!")[-1]  # "<build>!<grafana minor>.0"
    grafana = next(line.split("=", 1)[1] for line in (REPO_ROOT / "infra" / "versions.env").read_text().splitlines()
                   if line.startswith("GRAFANA_VERSION="))
    assert sdk.split(".")[:2] == grafana.split(".")[:2], f"the schema is Grafana {sdk}'s, compose runs {grafana}: pin the SDK's build for it"
