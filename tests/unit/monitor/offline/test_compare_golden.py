"""The two-agent report keeps every key and value it had before the many-agent work (issue 14).

The fixtures in tests/support/compare_golden/ were written by the command before the change; every key
path they hold must still be there with the same value (floats to 1e-12 relative). New keys may be
added. One value changes on purpose: the p95-latency gate check's text, now backed by a bootstrap test.
"""

import json
import os
from pathlib import Path

import pytest

from monitor.cli.main import main
from tests.support.paths import ROOT

GOLDEN = ROOT / "tests/support/compare_golden"
DEMO = ROOT / "examples/compare_demo"
SHARED = Path(os.environ.get("FLEETMON_SHARED_DATA", ROOT.parent / "shared" / "data"))
CHANGED_ON_PURPOSE = {"max_p95_latency_increase"}


def differences(old, new, path=""):
    if isinstance(old, dict):
        if not isinstance(new, dict):
            return [f"{path}: was an object, now {new!r}"]
        out = []
        for key, value in old.items():
            if key not in new:
                out.append(f"{path}/{key}: missing")
            elif not (key == "detail" and old.get("check") in CHANGED_ON_PURPOSE):
                out += differences(value, new[key], f"{path}/{key}")
        return out
    if isinstance(old, list):
        if not isinstance(new, list) or len(old) != len(new):
            return [f"{path}: was {old!r}, now {new!r}"]
        return [d for i, (a, b) in enumerate(zip(old, new)) for d in differences(a, b, f"{path}[{i}]")]
    if isinstance(old, float) and isinstance(new, float):
        return [] if abs(old - new) <= 1e-12 * max(1.0, abs(old)) else [f"{path}: was {old!r}, now {new!r}"]
    return [] if old == new else [f"{path}: was {old!r}, now {new!r}"]


def run(capsys, *args):
    code = main(["compare", *args, "--json"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out)


def test_the_differ_can_fail():
    old = {"a": {"b": [1.0, 2]}, "c": "x"}
    assert differences(old, {"a": {"b": [1.0, 2], "extra": 1}, "c": "x", "new": 2}) == []
    assert differences(old, {"a": {"b": [1.0 + 1e-9, 2]}, "c": "x"}) == ["/a/b[0]: was 1.0, now 1.000000001"]
    assert differences(old, {"a": {}, "c": "y"}) == ["/a/b: missing", "/c: was 'x', now 'y'"]


def test_demo_report_unchanged(capsys):
    code, report = run(capsys, str(DEMO / "A.jsonl"), str(DEMO / "B.jsonl"), "--slice-by", "category")
    assert code == 0
    assert differences(json.loads((GOLDEN / "demo_AB.json").read_text()), report) == []


def test_demo_report_with_gate_and_two_slices_unchanged(tmp_path, capsys):
    gate = tmp_path / "gate.toml"
    gate.write_text("max_success_drop = 0.02\nmax_cost_per_solved_increase = 0.10\n"
                    "max_p95_latency_increase = 0.25\nblock_safety_regression = true\n")
    code, report = run(capsys, str(DEMO / "B.jsonl"), str(DEMO / "A.jsonl"), "--slice-by", "category",
                       "--slice-by", "difficulty", "--gate", str(gate), "--resamples", "2000")
    assert code == 1
    assert differences(json.loads((GOLDEN / "demo_BA_gate.json").read_text()), report) == []


@pytest.mark.skipif(not (SHARED / "swebench_bash_only.csv").exists(), reason="shared data folder not beside the repo")
def test_real_swebench_pair_unchanged(capsys):
    path = str(SHARED / "swebench_bash_only.csv")
    mapping = "model=agent,instance_id=task,resolved=ok,cost_usd=fees,api_calls=steps"
    code, report = run(capsys, path, path, "--map", mapping,
                       "--baseline-agent", "GPT-5 mini (2025-08-07) (medium reasoning)",
                       "--candidate-agent", "GPT-5 (2025-08-07) (medium reasoning)", "--ks", "1",
                       "--slice-by", "repo", "--resamples", "2000")
    assert code == 0
    assert differences(json.loads((GOLDEN / "swe_gpt5_mini_vs_gpt5.json").read_text()), report) == []
