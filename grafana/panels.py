"""Panel and variable builders for grafana/build.py: plain dicts in Grafana's dashboard JSON model.

Every panel and query reads the Prometheus datasource picked by the ``datasource``
variable (default uid ``DATASOURCE_UID``); slice variables are multi-value with
``.*`` as "All", so ``SLICE_SELECTOR`` matches with ``=~``. Panel ids are given
by :func:`dashboard` in panel order, so output is deterministic.
"""

from __future__ import annotations

from typing import Any

DATASOURCE_UID = "fleetmon-prometheus"
DS = {"type": "prometheus", "uid": "${datasource}"}
SLICE_DIMENSIONS = ("release", "arm", "task_type", "tenant", "locale")
SLICE_SELECTOR = ", ".join(f'{d}=~"${d}"' for d in SLICE_DIMENSIONS)


def target(expr: str, legend: str = "", ref: str = "A", *, instant: bool = False,
           table: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": ref}
    if instant:
        out["instant"] = True
        out["range"] = False
    if table:
        out["format"] = "table"
    return out


def _targets(exprs: list[tuple[str, str]]) -> list[dict[str, Any]]:
    return [target(expr, legend, chr(ord("A") + i)) for i, (expr, legend) in enumerate(exprs)]


def timeseries(title: str, exprs: list[tuple[str, str]], grid: tuple[int, int, int, int], unit: str,
               description: str, *, minimum: float | None = None, maximum: float | None = None,
               bounds_regex: str | None = None) -> dict[str, Any]:
    """A time-series panel; series whose name matches ``bounds_regex`` are drawn as dashed bounds."""
    defaults: dict[str, Any] = {"unit": unit, "custom": {"lineWidth": 2, "fillOpacity": 0, "showPoints": "never"}}
    if minimum is not None:
        defaults["min"] = minimum
    if maximum is not None:
        defaults["max"] = maximum
    overrides = []
    if bounds_regex:
        overrides.append({
            "matcher": {"id": "byRegexp", "options": bounds_regex},
            "properties": [
                {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [6, 4]}},
                {"id": "custom.lineWidth", "value": 1},
                {"id": "custom.fillOpacity", "value": 8},
            ],
        })
    return {
        "type": "timeseries", "title": title, "description": description, "datasource": DS,
        "gridPos": grid_pos(grid), "targets": _targets(exprs),
        "fieldConfig": {"defaults": defaults, "overrides": overrides},
        "options": {"legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull"]},
                    "tooltip": {"mode": "multi", "sort": "desc"}},
    }


def stat(title: str, expr: str, grid: tuple[int, int, int, int], unit: str, description: str,
         thresholds: list[tuple[float | None, str]] | None = None) -> dict[str, Any]:
    steps = [{"value": v, "color": c} for v, c in (thresholds or [(None, "green")])]
    return {
        "type": "stat", "title": title, "description": description, "datasource": DS,
        "gridPos": grid_pos(grid), "targets": [target(expr, "", "A", instant=True)],
        "fieldConfig": {"defaults": {"unit": unit, "thresholds": {"mode": "absolute", "steps": steps}},
                        "overrides": []},
        "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                    "colorMode": "value", "graphMode": "area", "textMode": "auto"},
    }


def table(title: str, exprs: list[tuple[str, str]], grid: tuple[int, int, int, int], description: str,
          rename: dict[str, str]) -> dict[str, Any]:
    """Instant queries joined on their labels into one table (one row per label set)."""
    targets = [target(expr, legend, chr(ord("A") + i), instant=True, table=True)
               for i, (expr, legend) in enumerate(exprs)]
    return {
        "type": "table", "title": title, "description": description, "datasource": DS,
        "gridPos": grid_pos(grid), "targets": targets,
        "transformations": [
            {"id": "merge", "options": {}},
            {"id": "organize", "options": {"excludeByName": {"Time": True, "job": True, "instance": True},
                                           "renameByName": rename}},
        ],
        "fieldConfig": {"defaults": {}, "overrides": []},
        "options": {"showHeader": True},
    }


def row(title: str, y: int) -> dict[str, Any]:
    return {"type": "row", "title": title, "collapsed": False, "gridPos": grid_pos((0, y, 24, 1)), "panels": []}


def grid_pos(grid: tuple[int, int, int, int]) -> dict[str, int]:
    x, y, w, h = grid
    return {"x": x, "y": y, "w": w, "h": h}


def datasource_variable() -> dict[str, Any]:
    return {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
            "current": {"text": DATASOURCE_UID, "value": DATASOURCE_UID}, "hide": 0, "refresh": 1,
            "regex": "", "options": []}


def label_variable(name: str, metric: str = "fleetmon_traces_total") -> dict[str, Any]:
    query = f"label_values({metric}, {name})"
    return {"name": name, "label": name, "type": "query", "datasource": DS,
            "query": {"query": query, "refId": f"var-{name}"}, "definition": query,
            "multi": True, "includeAll": True, "allValue": ".*",
            "current": {"text": ["All"], "value": ["$__all"]}, "refresh": 2, "sort": 1, "hide": 0,
            "regex": "", "options": []}


def window_variable() -> dict[str, Any]:
    options = [{"text": w, "value": w, "selected": w == "1h"} for w in ("5m", "1h")]
    return {"name": "window", "label": "window", "type": "custom", "query": "5m,1h", "multi": False,
            "includeAll": False, "current": {"text": "1h", "value": "1h"}, "options": options, "hide": 0}


def dashboard(uid: str, title: str, description: str, panels: list[dict[str, Any]],
              variables: list[dict[str, Any]], tags: list[str]) -> dict[str, Any]:
    for i, panel in enumerate(panels, 1):
        panel["id"] = i
    return {
        "uid": uid, "title": title, "description": description, "tags": ["fleetmon", *tags],
        "timezone": "utc", "editable": True, "graphTooltip": 1, "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"}, "schemaVersion": 39, "version": 1,
        "templating": {"list": [datasource_variable(), *variables]},
        "annotations": {"list": []}, "links": [
            {"type": "dashboards", "tags": ["fleetmon"], "title": "fleetmon", "asDropdown": True}],
        "panels": panels,
    }
