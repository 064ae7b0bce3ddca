"""Reading the Grafana dashboards (infra/grafana/dashboards): their panels and PromQL queries, and
evaluating them through a running Prometheus's HTTP API."""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamstate_pipeline.settings import REPO_ROOT

DASHBOARDS_DIR = REPO_ROOT / "infra" / "grafana" / "dashboards"
DATASOURCE_UID = "prometheus"


@dataclass(frozen=True)
class PanelQuery:
    """One PromQL expression of one dashboard panel."""

    dashboard: str
    panel: str
    ref_id: str
    expr: str

    def __str__(self) -> str:
        return f"{self.dashboard} / {self.panel} [{self.ref_id}]"


def load_dashboards(directory: Path = DASHBOARDS_DIR) -> dict[Path, dict[str, Any]]:
    """Every dashboard JSON of ``directory``, by path; raises ValueError naming a bad file."""
    dashboards = {}
    for path in sorted(Path(directory).glob("*.json")):
        try:
            dashboards[path] = json.loads(path.read_text())
        except ValueError as exc:
            raise ValueError(f"{path}: not valid JSON: {exc}") from None
    return dashboards


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """The dashboard's panels, those nested in collapsed rows included."""
    found = []
    for panel in dashboard.get("panels", []):
        found.append(panel)
        found.extend(panel.get("panels", []))
    return [p for p in found if p.get("type") != "row"]


def panel_queries(dashboard: dict[str, Any]) -> list[PanelQuery]:
    """Every PromQL expression of the dashboard, with the titles that locate it."""
    return [
        PanelQuery(dashboard.get("title", "?"), panel.get("title", "?"), target.get("refId", "?"), target["expr"])
        for panel in panels(dashboard)
        for target in panel.get("targets", [])
        if target.get("expr")
    ]


class Prometheus:
    """A running Prometheus, queried through its HTTP API on 127.0.0.1."""

    def __init__(self, port: int):
        self.base = f"http://127.0.0.1:{port}"

    def query(self, expr: str) -> list[dict]:
        url = f"{self.base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
        if body.get("status") != "success":
            raise AssertionError(f"Prometheus refused {expr!r}: {body.get('error')}")
        return body["data"]["result"] if body["data"]["resultType"] == "vector" else []

    def has_data(self, expr: str) -> bool:
        """At least one series with a finite value (NaN is no data: 0/0 or an empty histogram)."""
        return any(math.isfinite(float(sample["value"][1])) for sample in self.query(expr))

    def targets_up(self) -> set[str]:
        try:
            return {s["metric"]["job"] for s in self.query("up == 1")}
        except (urllib.error.URLError, ConnectionError, OSError):
            return set()

    def empty_queries(self, queries: list[PanelQuery]) -> list[PanelQuery]:
        """The queries that return no data now."""
        return [q for q in queries if not self.has_data(q.expr)]


def every_panel_query() -> list[PanelQuery]:
    """Every PromQL expression of every provisioned dashboard."""
    return [q for dashboard in load_dashboards().values() for q in panel_queries(dashboard)]
