"""The Prometheus rule files pass `promtool check rules` and their unit tests
(`promtool test rules`). promtool comes with the Debian package `prometheus`,
which scripts/services.sh installs; the services fixture makes sure of it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RULES = sorted((ROOT / "alerts" / "rules").glob("*.yml"))
RULE_TESTS = sorted((ROOT / "alerts" / "rules" / "tests").glob("*.yml"))


@pytest.fixture(scope="module")
def promtool(fleetmon_services: None) -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found on PATH: it ships with the Debian package `prometheus`; "
                    "run `bash scripts/services.sh start prometheus` (as root) or `apt-get install prometheus`",
                    pytrace=False)
    return path


def _run(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)


def test_rule_files_exist():
    assert RULES, "no rule files in alerts/rules/"
    assert RULE_TESTS, "no promtool tests in alerts/rules/tests/"


def test_promtool_check_rules(promtool: str):
    proc = _run([promtool, "check", "rules", *map(str, RULES)])
    assert proc.returncode == 0, f"promtool check rules failed:\n{proc.stdout}{proc.stderr}"
    assert "SUCCESS" in proc.stdout


def test_promtool_test_rules(promtool: str):
    proc = _run([promtool, "test", "rules", *map(str, RULE_TESTS)])
    assert proc.returncode == 0, f"promtool test rules failed:\n{proc.stdout}{proc.stderr}"
    assert proc.stdout.count("SUCCESS") == len(RULE_TESTS), proc.stdout


def test_every_alert_has_a_firing_and_a_quiet_case_and_a_runbook_section():
    rules = "\n".join(p.read_text() for p in RULES)
    tests = "\n".join(p.read_text() for p in RULE_TESTS)
    runbook = (ROOT / "docs" / "runbook.md").read_text()
    alerts = [line.split(":", 1)[1].strip() for line in rules.splitlines() if line.strip().startswith("- alert:")]
    assert alerts
    for alert in alerts:
        cases = tests.split(f"alertname: {alert}\n")[1:]
        assert any("exp_alerts: []" in case.split("alertname:")[0][:40] for case in cases), \
            f"{alert}: no case where it must not fire"
        assert any("exp_labels" in case.split("alertname:")[0] for case in cases), f"{alert}: no firing case"
        anchor = alert.lower()
        assert f"runbook.md#{anchor}" in rules, f"{alert}: runbook_url must point at #{anchor}"
        assert f"\n## {alert}\n" in runbook, f"docs/runbook.md has no section '## {alert}'"
