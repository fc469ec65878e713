"""The dashboards' release-change annotations, comparison state and Pareto-over-time panels (issue 12 items 2, 4, 7)."""

from __future__ import annotations

import importlib.util

from alerts.comparison_state import STATES
from tests.support.paths import ROOT


def load_build():
    spec = importlib.util.spec_from_file_location("grafana_build_identity", ROOT / "grafana" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = load_build()
GENERATED = build.dashboards()


def test_the_state_timeline_codes_the_engines_states_in_order():
    assert tuple(name for name, _color in build.COMPARISON_STATES) == STATES
    releases = {p["title"]: p for p in GENERATED["releases.json"]["panels"]}
    panel = releases["Comparison state (whole comparison)"]
    assert panel["type"] == "state-timeline"
    (mapping,) = panel["fieldConfig"]["defaults"]["mappings"]
    assert {int(k): v["text"] for k, v in mapping["options"].items()} == dict(enumerate(STATES, 1))
    (target,) = panel["targets"]
    for i, name in enumerate(STATES, 1):
        assert f'state="{name}"}} == 1) * {i}' in target["expr"]


def test_release_changes_are_annotated_where_release_figures_are_drawn():
    for name in ("fleet-overview.json", "releases.json"):
        (annotation,) = GENERATED[name]["annotations"]["list"]
        assert annotation["name"] == "Release changes" and "fleetmon_release_info" in annotation["expr"]
        assert " unless " in annotation["expr"] and "offset 10m" in annotation["expr"]
        assert annotation["tagKeys"] == "release" and "{{prompt_hash}}" in annotation["textFormat"]


def test_the_pareto_over_time_compares_each_candidate_with_its_baseline():
    releases = {p["title"]: p for p in GENERATED["releases.json"]["panels"]}
    axes = releases["Candidate − baseline on the Pareto axes"]
    exprs = [t["expr"] for t in axes["targets"]]
    assert all('label_join(' in e and "group_left" in e for e in exprs)
    assert "release:fleetmon_success_ratio:1h" in exprs[0] and "fleetmon_cost_usd_total" in exprs[1]
    status = releases["Pareto status of the candidate"]
    (mapping,) = status["fieldConfig"]["defaults"]["mappings"]
    assert [mapping["options"][k]["text"] for k in ("1", "2", "3")] == ["dominates", "trade-off", "dominated"]
