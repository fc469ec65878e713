"""docs/runbook.md has a section for every alert fleetmon can send, and every runbook link resolves to one.

Anchors follow GitHub's heading rule (lower case, punctuation dropped, spaces to hyphens, ``-1``, ``-2``
for repeats); the engine links ``<alerts.runbook_base_url>#<alertname in lower case>``, the rules
``docs/runbook.md#<anchor>`` relative to the repository root.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts.decide import Finding
from alerts.evidence import Comparison
from alerts.lifecycle import ALERT_NAMES, DEFAULT_RUNBOOK_BASE, AlertState, LifecycleConfig, evaluate
from alerts.wiring import engine_config
from monitor.config import load
from monitor.slices import WHOLE_FLEET
from tests.support.paths import ROOT

RUNBOOK = ROOT / "docs" / "runbook.md"
RULE_FILES = sorted((ROOT / "alerts" / "rules").glob("*.yml"))
RULE_TEST_FILES = sorted((ROOT / "alerts" / "rules" / "tests").glob("*.yml"))


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub generates for the headings of ``markdown`` (fenced code is not a heading)."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    fenced = False
    for line in markdown.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        match = None if fenced else re.match(r"^#{1,6}\s+(.+?)\s*#*\s*$", line)
        if match:
            slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def rules() -> list[dict[str, Any]]:
    """Every alerting rule of the rule files Prometheus loads."""
    out: list[dict[str, Any]] = []
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            out.extend(rule for rule in group["rules"] if "alert" in rule)
    return out


ANCHORS = github_anchors(RUNBOOK.read_text())


def test_the_anchor_rule_is_githubs() -> None:
    assert github_anchors("## FleetmonSuccessRegression\n") == {"fleetmonsuccessregression"}
    assert github_anchors("# A `b`, c!\n## A b c\n```\n# not a heading\n```\n") == {"a-b-c", "a-b-c-1"}


def test_every_rule_file_has_alerts() -> None:
    assert RULE_FILES and len(rules()) >= 8


@pytest.mark.parametrize("alertname", sorted(ALERT_NAMES.values()))
def test_every_engine_alert_has_a_section(alertname: str) -> None:
    assert alertname.lower() in ANCHORS, f"docs/runbook.md has no heading '## {alertname}'"


@pytest.mark.parametrize("rule", rules(), ids=lambda rule: str(rule["alert"]))
def test_every_rule_has_a_section_and_its_runbook_url_resolves(rule: dict[str, Any]) -> None:
    alert = rule["alert"]
    assert alert.lower() in ANCHORS, f"docs/runbook.md has no heading '## {alert}'"
    url = rule.get("annotations", {}).get("runbook_url", "")
    path, _, anchor = url.partition("#")
    assert (ROOT / path).resolve() == RUNBOOK.resolve(), f"{alert}: runbook_url {url!r} is not docs/runbook.md"
    assert anchor == alert.lower(), f"{alert}: runbook_url {url!r} must end in #{alert.lower()}"


def test_promtool_expectations_use_the_same_links() -> None:
    expected = set(re.findall(r'runbook_url:\s*"([^"]*)"', "\n".join(p.read_text() for p in RULE_TEST_FILES)))
    links = {rule["annotations"]["runbook_url"] for rule in rules()}
    assert expected and expected <= links, f"rule tests expect links the rules do not have: {expected - links}"


def _safety_finding() -> Finding:
    """A firing shadow harmful-action regression (safety kinds fire without a hold)."""
    return Finding("safety_regression", Comparison("v1", "v2", "shadow"), WHOLE_FLEET, "critical", True, True,
                   True, 1e6, 0.05, 0.03, 1.0, 0.0, 0.01, 1000, 5, 55,
                   {"test": "betting", "counters_kind": "flip", "counters": {"n": 1000, "worse": 55, "better": 5}})


def _runbook_url(config: LifecycleConfig) -> str:
    _, events = evaluate(AlertState(), [_safety_finding()], 0.0, config)
    assert [e.status for e in events] == ["firing"]
    return events[0].annotations["runbook_url"]


def test_default_links_are_the_relative_runbook() -> None:
    assert DEFAULT_RUNBOOK_BASE == "docs/runbook.md" == load(None, env={}).alerts.runbook_base_url
    assert _runbook_url(LifecycleConfig()) == "docs/runbook.md#fleetmonsafetyregression"
    assert "fleetmonsafetyregression" in ANCHORS


def test_the_lifecycle_links_the_configured_base(tmp_path: Path) -> None:
    path = tmp_path / "fleetmon.toml"
    path.write_text('[alerts]\nrunbook_base_url = "https://git.example.com/fm/blob/main/docs/runbook.md"\n')
    lifecycle = engine_config(load(path, env={})).lifecycle
    assert _runbook_url(lifecycle) == "https://git.example.com/fm/blob/main/docs/runbook.md#fleetmonsafetyregression"


def test_notifiers_runbook_base_is_a_deprecated_alias() -> None:
    old = {"FLEETMON_NOTIFIERS_RUNBOOK_BASE": "https://old.example.com/runbook.md"}
    assert engine_config(load(None, env=old)).lifecycle.runbook_base == "https://old.example.com/runbook.md"
    both = {**old, "FLEETMON_ALERTS_RUNBOOK_BASE_URL": "https://new.example.com/runbook.md"}
    assert engine_config(load(None, env=both)).lifecycle.runbook_base == "https://new.example.com/runbook.md"


@pytest.mark.parametrize("value", ["", "docs/runbook.md#x"])
def test_a_base_that_cannot_build_links_is_rejected(value: str) -> None:
    with pytest.raises(ValueError, match=r"alerts\.runbook_base_url"):
        load(None, env={"FLEETMON_ALERTS_RUNBOOK_BASE_URL": value})
