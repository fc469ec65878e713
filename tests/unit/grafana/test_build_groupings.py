"""Dashboards and slice groupings: each trace is in one row of every grouping, so every panel that sums
slice counters reads one grouping — release × arm (``grouping=""``) or the one the ``grouping`` variable picks."""

from __future__ import annotations

import importlib.util
import re
import sys

from monitor.groupings import grouping_set
from monitor.slices import DEFAULT_DIMENSIONS
from tests.support.paths import ROOT

#: Families with one series per slice row (the exporter's slice labels, hence a grouping label).
_SLICE_FAMILY = re.compile(r"(?<![:\w])(fleetmon_(?!comparison_|grouping_folded|folded_label|pairs_|dlq_|late_|"
                           r"exporter_|store_up|scrape_|active_slices|consumer_lag|applied_offset|release_)"
                           r"\w+)\s*(\{[^}]*\})?")


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"grafana_{name}", ROOT / "grafana" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(ROOT / "grafana"))
    spec.loader.exec_module(module)
    return module


build, panels = _load("build"), _load("panels")


def test_the_dashboards_list_the_default_groupings():
    assert panels.GROUPINGS == grouping_set(DEFAULT_DIMENSIONS).names()


def test_every_slice_family_read_by_a_panel_selects_one_grouping():
    seen = 0
    for name, model in build.dashboards().items():
        for panel in model["panels"]:
            for target in panel.get("targets", []):
                for metric, selector in _SLICE_FAMILY.findall(target["expr"]):
                    seen += 1
                    assert 'grouping=""' in selector or 'grouping=~"$grouping"' in selector, (
                        f"{name} / {panel['title']}: {metric} sums or shows rows of every grouping: "
                        f"{target['expr']}")
    assert seen > 20


def test_the_grouping_variable_defaults_to_release_by_arm_and_matches_only_the_absent_label():
    for model in build.dashboards().values():
        for var in model["templating"]["list"]:
            if var["name"] == "grouping":
                assert var["multi"] is False and var["includeAll"] is False  # raw value, not regex-escaped
                assert var["current"]["value"] == panels.BASE_GROUPING_VALUE
                assert re.fullmatch(panels.BASE_GROUPING_VALUE, "") and not re.fullmatch(
                    panels.BASE_GROUPING_VALUE, "tenant")
                values = [o["value"] for o in var["options"]]
                assert values == [g or panels.BASE_GROUPING_VALUE for g in panels.GROUPINGS]
                # commas inside a grouping name are escaped in the custom variable's query
                assert var["query"].count("\\,") == sum(g.count(",") for g in panels.GROUPINGS)
