"""``fleetmon compare`` with many agents, graded scores and output formats, end to end on files."""

import importlib.util
import json
import os
from pathlib import Path

import pytest

from monitor.cli.main import main
from tests.support.compare_data import trial_records, write_jsonl
from tests.support.paths import ROOT

SHARED = Path(os.environ.get("FLEETMON_SHARED_DATA", ROOT.parent / "shared" / "data"))


def run_json(capsys, *args):
    code = main(["compare", *args, "--json", "--resamples", "300"])
    captured = capsys.readouterr()
    return code, (json.loads(captured.out) if captured.out.strip() else None), captured.err


@pytest.fixture
def files(tmp_path):
    return [write_jsonl(tmp_path / f"{name}.jsonl", trial_records(name, skill=skill, seed=seed))
            for name, skill, seed in (("base", 0.5, 1), ("fast", 0.55, 2), ("big", 0.8, 3), ("tiny", 0.3, 4))]


def test_many_agents_every_key(files, capsys):
    code, r, _ = run_json(capsys, *files, "--slice-by", "category")
    assert code == 0
    assert r["baseline"] == "base" and r["agent_order"] == ["base", "fast", "big", "tiny"]
    assert "candidate" not in r and "mcnemar" not in r  # the two-agent keys only with two agents
    assert set(r["comparisons"]) == {"fast", "big", "tiny"}
    for block in r["comparisons"].values():
        assert set(block["p_adjusted"]) == {"mcnemar", "success"}
        assert block["p_adjusted"]["success"] >= block["bootstrap"]["success_diff"]["p"]
    assert set(r["frontier"]) <= set(r["agent_order"]) and r["frontier"]
    assert all(0.0 <= p <= 1.0 for p in r["frontier_probability"].values())
    assert set(r["slice_comparisons"]["category"]) == {"fast", "big", "tiny"}
    assert r["adjust"] == "bh" and r["confidence"] == 0.95


def test_agent_selection_baseline_and_adjust(files, capsys):
    code, r, _ = run_json(capsys, *files, "--agent", "big", "--agent", "tiny", "--agent", "base",
                          "--baseline", "base", "--adjust", "holm")
    assert code == 0 and r["agent_order"] == ["base", "big", "tiny"] and r["adjust"] == "holm"
    raw = sorted(b["mcnemar"]["p_exact"] for b in r["comparisons"].values())
    adjusted = sorted(b["p_adjusted"]["mcnemar"] for b in r["comparisons"].values())
    assert adjusted[0] == pytest.approx(min(1.0, 2 * raw[0]))  # Holm: smallest p times m
    code, r, _ = run_json(capsys, *files, "--adjust", "none")
    assert all(b["p_adjusted"]["mcnemar"] == b["mcnemar"]["p_exact"] for b in r["comparisons"].values())


def test_two_agents_by_agent_flags_keep_the_two_agent_keys(files, capsys):
    code, r, _ = run_json(capsys, *files, "--agent", "base", "--agent", "big")
    assert code == 0 and r["candidate"] == "big" and r["mcnemar"] == r["comparisons"]["big"]["mcnemar"]


def test_selection_errors_name_the_agent(files, capsys):
    code, _, err = run_json(capsys, *files, "--agent", "nobody")
    assert code == 2 and "--agent 'nobody' is not in the inputs; agents found: base, fast, big, tiny" in err
    code, _, err = run_json(capsys, *files, "--baseline", "nope")
    assert code == 2 and "--baseline 'nope'" in err
    code, _, err = run_json(capsys, files[0], "--agent", "base")
    assert code == 2 and "at least two agents" in err
    code, _, err = run_json(capsys, files[0], files[0], files[1])
    assert code == 2 and "given twice" in err
    code, _, err = run_json(capsys, *files[:3], "--baseline-agent", "base")
    assert code == 2 and "--baseline-agent / --candidate-agent go with exactly two inputs" in err
    assert main(["compare", *files, "--adjust", "bonferroni"]) == 2
    assert main(["compare", *files, "--success-threshold", "1.5"]) == 2


def test_graded_scores_and_threshold(tmp_path, capsys):
    a = write_jsonl(tmp_path / "a.jsonl", trial_records("a", score=True, seed=1, skill=0.5))
    b = write_jsonl(tmp_path / "b.jsonl", trial_records("b", score=True, seed=2, skill=0.7))
    code, strict, _ = run_json(capsys, a, b)
    code2, loose, _ = run_json(capsys, a, b, "--success-threshold", "0.5")
    assert code == code2 == 0
    assert loose["agents"]["a"]["success"]["rate"] > strict["agents"]["a"]["success"]["rate"]
    assert strict["agents"]["a"]["score"]["mean"] == loose["agents"]["a"]["score"]["mean"]
    assert strict["success_threshold"] == 1.0 and loose["agents"]["a"]["score"]["threshold"] == 0.5
    assert "score_diff" in strict["comparisons"]["b"]["bootstrap"]


def test_text_report_sections(files, capsys):
    assert main(["compare", *files, "--slice-by", "category", "--resamples", "300"]) == 0
    out = capsys.readouterr().out
    for needle in ("4 agents, baseline base", "P(frontier)", "McNemar p adj", "reliability", "pass^4 CI", "ICC",
                   "cost-success frontier", "by category (macro success)"):
        assert needle in out, needle


def test_format_json_is_the_json_alias(files, capsys):
    assert main(["compare", *files[:2], "--format", "json", "--resamples", "200"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(["compare", *files[:2], "--json", "--resamples", "200"]) == 0
    assert json.loads(capsys.readouterr().out) == first


@pytest.mark.skipif(importlib.util.find_spec("monitor.offline.render") is None,
                    reason="the markdown/html renderer (monitor.offline.render) is not in this tree yet")
@pytest.mark.parametrize("fmt", ["markdown", "html"])
def test_markdown_and_html_render_the_same_report(files, capsys, fmt):
    assert main(["compare", *files[:2], "--format", fmt, "--resamples", "200"]) == 0
    assert capsys.readouterr().out.strip()


@pytest.mark.skipif(not (SHARED / "tau_trials.csv").exists(), reason="shared data folder not beside the repo")
def test_real_tau_bench_rewards_through_score_and_ok(capsys):
    """Real tau-bench trials: rewards read as a score, and as ok (1.0 / 0.0) now that numeric ok parses."""
    path = str(SHARED / "tau_trials.csv")
    common = ["--task-key", "domain,task", "--agent", "gpt-4.1", "--agent",
              "ft:gpt-4.1-2025-04-14:sierra:tau2-full-sft:BzrYdMNm", "--slice-by", "domain", "--ks", "1"]
    code, scored, err = run_json(capsys, path, "--map", "agent_model=agent,task_id=task,reward=score,agent_cost=fees",
                                 *common)
    assert code == 0, err
    code, as_ok, err = run_json(capsys, path, "--map", "agent_model=agent,task_id=task,reward=ok,agent_cost=fees",
                                *common)
    assert code == 0, err
    for name in ("gpt-4.1", "ft:gpt-4.1-2025-04-14:sierra:tau2-full-sft:BzrYdMNm"):
        score = scored["agents"][name]["score"]
        assert score["success_rate"] == as_ok["agents"][name]["success"]["rate"]
        assert score["success_rate"] <= score["mean"] + 1e-12 and score["gap"]["point"] >= -1e-12
        assert as_ok["agents"][name]["score"] is None
    assert set(scored["slices"]["domain"]) == {"airline", "retail", "telecom"}
