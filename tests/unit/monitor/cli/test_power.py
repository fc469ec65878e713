"""``fleetmon power``: the document, the text, where the floor and level come from, bad input (exit 2)."""

from __future__ import annotations

import json

import pytest

from alerts.planning import live_level, simulate_live_test
from alerts.policy import Policy
from monitor.cli.main import main
from monitor.stats.power import paired_cells, tasks_needed

FAST = ["--runs", "20"]


def run_json(capsys, *args):
    code = main(["power", *args, "--json"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out) if captured.out.strip() else None, captured.err


def test_the_document_holds_both_plans(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ./fleetmon.toml: the built-in defaults
    code, doc, _ = run_json(capsys, "--baseline-rate", "0.7", "--effect", "0.08", "--discordance", "0.2",
                            "--trials", "3", *FAST)
    assert code == 0
    assert doc["offline"]["tasks"] == tasks_needed(0.7, 0.08, 0.2)
    assert doc["offline"]["trials_per_agent"] == 3 * doc["offline"]["tasks"]
    assert doc["offline"]["power_at_tasks"] >= 0.8
    live = doc["live"]
    assert live["floor"] == 0.02 and live["floor_source"] == "built-in default alerts.success_floor"
    assert live["level"] == pytest.approx(Policy().alpha_share("success_regression"))
    expected = simulate_live_test(*paired_cells(0.7, 0.08, 0.2), 0.02, live["level"], runs=20)
    assert (live["median_pairs"], live["p80_pairs"]) == (expected.median_pairs, expected.p80_pairs)
    assert doc["cells"] == pytest.approx({"baseline_only": 0.14, "candidate_only": 0.06})
    assert doc["discordance_source"] == "given"


def test_floor_and_alpha_come_from_the_config(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fleetmon.toml").write_text("[alerts]\nalpha = 0.01\nsuccess_floor = 0.05\nharmful_threshold = 0.01\n")
    code, doc, _ = run_json(capsys, "--baseline-rate", "0.7", "--effect", "0.1", *FAST)
    assert code == 0
    policy = Policy(alpha=0.01, harmful_threshold=0.01)
    assert doc["live"]["floor"] == 0.05 and doc["live"]["floor_source"] == "fleetmon.toml [alerts] success_floor"
    assert doc["live"]["level"] == pytest.approx(live_level(policy))
    assert doc["offline"]["alpha"] == 0.05  # the offline test's level is --alpha's default, not the engine's
    code, doc, _ = run_json(capsys, "--baseline-rate", "0.7", "--effect", "0.1", "--floor", "0.03",
                            "--alpha", "0.1", "--slices", "4", *FAST)
    assert doc["live"]["floor"] == 0.03 and doc["live"]["floor_source"] == "--floor"
    assert doc["live"]["level"] == pytest.approx(live_level(Policy(alpha=0.1, harmful_threshold=0.01), 4))
    assert doc["offline"]["alpha"] == 0.1


def test_an_effect_at_the_floor_is_never_a_target(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, doc, _ = run_json(capsys, "--baseline-rate", "0.6", "--effect", "0.02")
    assert code == 0 and doc["live"]["median_pairs"] is None
    assert "not above the floor 0.02" in doc["live"]["note"]
    assert doc["discordance_source"] == "independent"


def test_text_output(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["power", "--baseline-rate", "0.7", "--effect", "0.1", "--discordance", "0.25", *FAST]) == 0
    out = capsys.readouterr().out
    assert f"tasks needed: {tasks_needed(0.7, 0.1, 0.25):,}" in out
    assert "pairs until it pages: median" in out and "floor 0.02 (built-in default" in out


@pytest.mark.parametrize(("args", "message"), [
    (["--baseline-rate", "1.5", "--effect", "0.1"], "--baseline-rate must be in (0, 1), got 1.5"),
    (["--baseline-rate", "0.5", "--effect", "0.6"], "--effect must be a drop in (0, --baseline-rate], got 0.6"),
    (["--baseline-rate", "0.5", "--effect", "0.1", "--discordance", "0.05"], "discordance=0.05 is infeasible"),
    (["--baseline-rate", "0.5", "--effect", "0.1", "--power", "1"], "--power must be in (0, 1), got 1.0"),
    (["--baseline-rate", "0.5", "--effect", "0.1", "--runs", "0"], "--runs must be an integer >= 1, got '0'"),
    (["--baseline-rate", "0.5", "--effect", "0.1", "--config", "/nonexistent.toml"], "cannot read config file"),
])
def test_bad_input_exits_2_naming_the_value(capsys, args, message):
    assert main(["power", *args]) == 2
    assert message in capsys.readouterr().err


def test_beyond_max_tasks_the_offline_answer_is_null(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, doc, _ = run_json(capsys, "--baseline-rate", "0.7", "--effect", "0.05", "--max-tasks", "100", *FAST)
    assert code == 0 and doc["offline"]["tasks"] is None and doc["offline"]["trials_per_agent"] is None
    assert main(["power", "--baseline-rate", "0.7", "--effect", "0.05", "--max-tasks", "100", *FAST]) == 0
    assert "tasks needed: more than --max-tasks" in capsys.readouterr().out
