"""``fleetmon compare`` end to end on files: the acceptance vector, the gate, bad input."""

import json
import os
from pathlib import Path

import pytest

from monitor.cli.main import main
from tests.support.paths import ROOT

A = str(ROOT / "examples/compare_demo/A.jsonl")
B = str(ROOT / "examples/compare_demo/B.jsonl")
SHARED = Path(os.environ.get("FLEETMON_SHARED_DATA", ROOT.parent / "shared" / "data"))


def run_json(capsys, *args):
    code = main(["compare", *args, "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else None


def test_acceptance_vector(capsys):
    code, r = run_json(capsys, A, B, "--slice-by", "category")
    assert code == 0
    a, b = r["agents"]["A"], r["agents"]["B"]
    assert round(a["success"]["rate"], 3) == 0.600 and round(b["success"]["rate"], 3) == 0.900
    assert [round(x, 3) for x in a["any_pass"]["ci"]] == [0.566, 1.000]
    assert [round(x, 3) for x in b["any_pass"]["ci"]] == [0.566, 1.000]
    assert (a["cost_per_solved_usd"] == pytest.approx(0.20875)
            and b["cost_per_solved_usd"] == pytest.approx(0.18583, abs=5e-5))
    assert round(a["latency_s"]["p95"], 1) == 44.0 and round(b["latency_s"]["p95"], 1) == 38.2
    assert round(a["pass_hat_k"]["2"], 3) == 0.400 and round(a["pass_hat_k"]["4"], 3) == 0.200
    assert round(a["pass_at_k"]["2"], 3) == 0.800
    assert round(b["pass_hat_k"]["2"], 3) == 0.800 and round(b["pass_hat_k"]["4"], 3) == 0.600
    m = r["mcnemar"]
    assert (m["b"], m["c"], m["n_discordant"]) == (0, 2, 2)
    assert m["p_exact"] == pytest.approx(0.5) and round(m["chi2"], 2) == 0.50 and m["net_flip"] == pytest.approx(0.4)
    assert round(r["bootstrap"]["cost_diff"]["point"], 4) == 0.0420
    assert r["pareto"].startswith("B Pareto-dominates A")
    assert r["slices"]["category"]["exchange"]["A"]["rate"] == pytest.approx(0.25)
    assert r["slices"]["category"]["exchange"]["B"]["rate"] == pytest.approx(0.75)
    for key in ("n_tasks", "n_trials", "cost_per_trial_usd", "steps_solved_mean", "tokens_solved_mean"):
        assert key in a
    for key in ("point", "ci", "p"):
        assert key in r["bootstrap"]["success_diff"]


def test_text_report_shows_the_acceptance_digits(capsys):
    assert main(["compare", A, B, "--slice-by", "category"]) == 0
    out = capsys.readouterr().out
    for needle in ("$0.2088", "$0.1858", "44.0", "38.2", "b=0", "c=2", "exact p=0.5", "chi2=0.50",
                   "+$0.0420", "B Pareto-dominates A", "exchange"):
        assert needle in out, needle


def test_gate_passes_and_fails_with_exit_codes(tmp_path, capsys):
    gate = tmp_path / "gate.toml"
    gate.write_text("max_success_drop = 0.02\nmax_cost_per_solved_increase = 0.10\n"
                    "max_p95_latency_increase = 0.25\nblock_safety_regression = true\n")
    code, r = run_json(capsys, A, B, "--gate", str(gate))
    assert code == 0 and r["gate"]["passed"] and r["gate"]["reasons"] == []
    # Swapped: B is the baseline and A the candidate: success drops by 0.3 (significant).
    code, r = run_json(capsys, B, A, "--gate", str(gate))
    assert code == 1 and not r["gate"]["passed"]
    assert any(reason.startswith("max_success_drop") for reason in r["gate"]["reasons"])


def test_bad_gate_key_is_named(tmp_path, capsys):
    gate = tmp_path / "gate.toml"
    gate.write_text("max_sucess_drop = 0.02\n")
    assert main(["compare", A, B, "--gate", str(gate)]) == 2
    assert "unknown keys ['max_sucess_drop']" in capsys.readouterr().err


def test_bad_input_names_file_line_and_field(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"agent": "X", "task": "t1", "ok": true, "tin": -3}\n{"agent": "X", "task": "t2"}\nnot json\n')
    assert main(["compare", str(bad), B]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl line 1: tokens_in must be an integer >= 0, got -3" in err or "line 3: not valid JSON" in err


def test_every_problem_of_a_file_is_listed(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"agent": "X", "task": "t1", "ok": true, "tin": -3}\n{"agent": "X", "task": "t2"}\n')
    assert main(["compare", str(bad), B]) == 2
    err = capsys.readouterr().err
    assert "line 1: tokens_in must be an integer >= 0, got -3" in err
    assert "line 2: an outcome is required" in err


def test_missing_file_and_unknown_format(tmp_path, capsys):
    assert main(["compare", str(tmp_path / "nope.jsonl"), B]) == 2
    assert "cannot read" in capsys.readouterr().err
    odd = tmp_path / "x.parquet"
    odd.write_text("")
    assert main(["compare", str(odd), B]) == 2
    assert "unknown file type" in capsys.readouterr().err


def test_csv_input_and_agent_name_from_file(tmp_path, capsys):
    rows = ["task,trial,ok,tin,tout,lat"] + [f"t{i},0,{i % 2},1000,100,{i + 1}" for i in range(10)]
    (tmp_path / "old.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "new.csv").write_text("\n".join(rows[:1] + [r.replace(",0,1000", ",1,1000") for r in rows[1:]]) + "\n")
    code, r = run_json(capsys, str(tmp_path / "old.csv"), str(tmp_path / "new.csv"), "--ks", "1")
    assert code == 0 and set(r["agents"]) == {"old", "new"}
    assert r["agents"]["new"]["success"]["rate"] == 1.0 and r["mcnemar"]["c"] == 5


@pytest.mark.skipif(not (SHARED / "swebench_bash_only.csv").exists(), reason="shared data folder not beside the repo")
def test_real_swebench_pairing_on_instance_id(capsys):
    path = str(SHARED / "swebench_bash_only.csv")
    code, r = run_json(capsys, path, path,
                       "--map", "model=agent,instance_id=task,resolved=ok,cost_usd=fees,api_calls=steps",
                       "--baseline-agent", "GPT-5 mini (2025-08-07) (medium reasoning)",
                       "--candidate-agent", "GPT-5 (2025-08-07) (medium reasoning)", "--ks", "1", "--slice-by", "repo",
                       "--resamples", "2000")
    assert code == 0
    assert r["n_common_tasks"] == 500
    m = r["mcnemar"]
    assert m["b"] + m["c"] == m["n_discordant"] and m["n"] == 500
    assert r["agents"]["GPT-5 (2025-08-07) (medium reasoning)"]["success"]["rate"] == pytest.approx(0.65, abs=0.001)
    assert "django__django" in r["slices"]["repo"]


@pytest.mark.skipif(not (SHARED / "swebench_bash_only.csv").exists(), reason="shared data folder not beside the repo")
def test_file_with_several_agents_needs_a_choice(capsys):
    path = str(SHARED / "swebench_bash_only.csv")
    assert main(["compare", path, path, "--map", "model=agent,instance_id=task,resolved=ok"]) == 2
    assert "pick one with --baseline-agent" in capsys.readouterr().err
