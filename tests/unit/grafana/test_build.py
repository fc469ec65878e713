"""Dashboards as code: the committed JSON is exactly what grafana/build.py produces,
and every panel query is a well-formed, non-empty PromQL expression over
defined variables. (tests/integration/test_prometheus.py runs every one of
them against the real Prometheus.)"""

from __future__ import annotations

import importlib.util
import json
import re

import pytest

from tests.support.paths import ROOT

DASHBOARD_DIR = ROOT / "grafana" / "dashboards"


def load_build():
    spec = importlib.util.spec_from_file_location("grafana_build", ROOT / "grafana" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = load_build()
GENERATED = build.dashboards()


def panel_targets(model):
    for panel in model["panels"]:
        for target in panel.get("targets", []):
            yield panel, target


def test_every_committed_dashboard_equals_the_generator_output():
    committed = sorted(p.name for p in DASHBOARD_DIR.glob("*.json"))
    assert committed == sorted(GENERATED), "run: python grafana/build.py"
    for name, model in GENERATED.items():
        assert (DASHBOARD_DIR / name).read_text() == build.render(model), f"{name} drifted: run python grafana/build.py"


def test_build_check_mode_agrees():
    assert build.main(["--check"]) == 0


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_panel_queries_are_non_empty_and_balanced(name):
    model = GENERATED[name]
    variables = {v["name"] for v in model["templating"]["list"]}
    n = 0
    for panel, target in panel_targets(model):
        expr = target["expr"]
        n += 1
        assert expr.strip(), f"{panel['title']}: empty expr"
        stack = []
        pairs = {")": "(", "]": "[", "}": "{"}
        text = re.sub(r'"[^"]*"', '""', expr)  # brackets inside label values do not count
        assert text.count('"') % 2 == 0, f"{panel['title']}: unbalanced quotes in {expr}"
        for char in text:
            if char in "([{":
                stack.append(char)
            elif char in ")]}":
                assert stack and stack.pop() == pairs[char], f"{panel['title']}: unbalanced {char} in {expr}"
        assert not stack, f"{panel['title']}: unclosed {stack} in {expr}"
        assert re.search(r"fleetmon_|:fleetmon_", expr), f"{panel['title']}: reads no fleetmon metric: {expr}"
        for used in re.findall(r"\$(\w+)", expr):
            assert used in variables, f"{panel['title']}: ${used} is not a dashboard variable"
        # multi-value variables expand to regexes: only =~ can match them
        assert not re.search(r'[^=!]=\s*"\$', expr), f"{panel['title']}: use =~ with variables: {expr}"
    assert n > 0


def test_dashboards_have_unique_uids_ids_and_required_content():
    uids = [m["uid"] for m in GENERATED.values()]
    assert len(set(uids)) == len(uids)
    for model in GENERATED.values():
        ids = [p["id"] for p in model["panels"]]
        assert len(set(ids)) == len(ids)
        json.dumps(model)  # serialisable
    drill = GENERATED["slice-drilldown.json"]
    names = {v["name"] for v in drill["templating"]["list"]}
    assert {"release", "arm", "task_type", "tenant", "locale"} <= names
    for v in drill["templating"]["list"]:
        if v["name"] in ("release", "arm", "task_type", "tenant", "locale"):
            assert v["query"].startswith("label_values(")
    safety = GENERATED["safety.json"]
    by_title = {p["title"]: p for p in safety["panels"]}
    harmful, refusal = by_title["Harmful-action ratio by release"], by_title["Over-refusal ratio by release"]
    assert harmful["gridPos"]["y"] == refusal["gridPos"]["y"]  # side by side
    for scope in ("release", "slice"):  # the whole safety vector in one row, per release and per slice
        four = [by_title[f"{name} ratio by {scope}"] for name in ("Harmful-action", "Over-refusal", "Side-effect",
                                                                  "Prompt-injection")]
        assert len({p["gridPos"]["y"] for p in four}) == 1 and sum(p["gridPos"]["w"] for p in four) == 24
    safety_exprs = " ".join(t["expr"] for _, t in panel_targets(safety))
    for metric in ("fleetmon_side_effect_ratio_lower", "fleetmon_prompt_injection_ratio_upper",
                   "fleetmon_prompt_injections_total", "fleetmon_side_effect_traces_total"):
        assert metric in safety_exprs
    releases = GENERATED["releases.json"]
    exprs = " ".join(t["expr"] for _, t in panel_targets(releases))
    for metric in ("fleetmon_comparison_effect", "fleetmon_comparison_effect_lower",
                   "fleetmon_comparison_effect_upper", "fleetmon_comparison_e_value", "fleetmon_comparison_pairs",
                   "fleetmon_comparison_discordant", "fleetmon_comparison_firing"):
        assert metric + "{" in exprs or metric + ")" in exprs
    assert any(p["type"] == "xychart" for p in releases["panels"])


def test_the_dashboards_are_built_with_grafana_foundation_sdk():
    source = (ROOT / "grafana" / "panels.py").read_text()
    assert "from grafana_foundation_sdk.builders import" in source
    for model in GENERATED.values():  # panels and rows laid out without overlap on the 24-column grid
        cells = set()
        for panel in model["panels"]:
            g = panel["gridPos"]
            assert g["x"] + g["w"] <= 24, panel["title"]
            area = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
            assert not cells & area, f"{model['title']}: {panel['title']} overlaps another panel"
            cells |= area


def test_provisioning_files_point_at_the_dashboards():
    datasources = (ROOT / "grafana/provisioning/datasources/fleetmon.yml").read_text()
    providers = (ROOT / "grafana/provisioning/dashboards/fleetmon.yml").read_text()
    assert "apiVersion: 1" in datasources and f"uid: {build.DATASOURCE_UID}" in datasources
    assert "apiVersion: 1" in providers and "providers:" in providers and re.search(r"options:\s+path:", providers)
