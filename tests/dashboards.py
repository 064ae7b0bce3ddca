"""Reading the Grafana dashboards (infra/grafana/dashboards): their panels and PromQL queries."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamstate.settings import REPO_ROOT

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
