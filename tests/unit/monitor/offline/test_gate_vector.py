"""The gate keys issue 14 adds: harmful and over-refusal increases, pass^k on the interval, p95 by bootstrap."""

import json

import pytest

from monitor.cli.main import main
from monitor.offline.gate import Gate, GateError
from tests.support.compare_data import trial_records, write_jsonl


def gate_file(tmp_path, text):
    path = tmp_path / "gate.toml"
    path.write_text(text)
    return str(path)


def run(capsys, *args):
    code = main(["compare", *args, "--json", "--resamples", "500"])
    out = capsys.readouterr()
    return code, json.loads(out.out) if out.out.strip() else None, out.err


def checks(report, name):
    return [c for c in report["gate"]["checks"] if c["check"] == name]


@pytest.fixture
def pair(tmp_path):
    base = write_jsonl(tmp_path / "base.jsonl", trial_records("base", tasks=60, seed=1, harmful_rate=0.02,
                                                              refusal_rate=0.05))
    worse = write_jsonl(tmp_path / "worse.jsonl", trial_records("worse", tasks=60, seed=2, latency_scale=2.0,
                                                                harmful_rate=0.3, refusal_rate=0.4))
    same = write_jsonl(tmp_path / "same.jsonl", trial_records("same", tasks=60, seed=3, harmful_rate=0.02,
                                                              refusal_rate=0.05))
    return base, worse, same


def test_harmful_over_refusal_and_latency_fail_when_significantly_worse(tmp_path, capsys, pair):
    base, worse, same = pair
    gate = gate_file(tmp_path, "max_harmful_increase = 0.05\nmax_over_refusal_increase = 0.05\n"
                               "max_p95_latency_increase = 0.2\n")
    code, r, err = run(capsys, base, worse, "--gate", gate)
    assert code == 1
    failed = {c["check"] for c in r["gate"]["checks"] if c["failed"]}
    assert failed == {"max_harmful_increase", "max_over_refusal_increase", "max_p95_latency_increase"}
    assert "paired bootstrap over tasks, significant" in checks(r, "max_p95_latency_increase")[0]["detail"]
    assert "gate: max_harmful_increase: harmful-action rate" in err
    code, r, _ = run(capsys, base, same, "--gate", gate)
    assert code == 0 and r["gate"]["passed"]


def test_a_large_but_noisy_latency_increase_does_not_fail(tmp_path, capsys):
    """One slow trial on one of three tasks: p95 rises 50%, but a third of the resamples lack that task."""
    latencies = {"b": [[10, 50], [12, 11], [9, 13]], "c": [[10, 80], [12, 11], [9, 13]]}
    paths = []
    for name, per_task in latencies.items():
        rows = [{"agent": name, "task": f"t{t}", "trial": k, "ok": True, "lat": lat}
                for t, values in enumerate(per_task) for k, lat in enumerate(values)]
        paths.append(write_jsonl(tmp_path / f"{name}.jsonl", rows))
    code, r, _ = run(capsys, *paths, "--gate", gate_file(tmp_path, "max_p95_latency_increase = 0.01\n"))
    check = checks(r, "max_p95_latency_increase")[0]
    latency = r["comparisons"]["c"]["bootstrap"]["p95_latency_diff"]
    assert latency["ratio"] > 1.4 and latency["ratio_ci"][0] == 1.0
    assert code == 0 and not check["failed"] and "not significant" in check["detail"]


def test_min_pass_hat_k_is_judged_on_the_interval(tmp_path, capsys, pair):
    base, worse, _ = pair
    code, r, _ = run(capsys, base, worse, "--gate", gate_file(tmp_path, "min_pass_hat_k = {k = 4, value = 0.99}\n"),
                     "--ks", "1")
    entry = r["agents"]["worse"]["reliability"]["pass_hat_k"]["4"]  # the gate's k was added to --ks
    assert code == 1 and entry["ci"][1] < 0.99 and checks(r, "min_pass_hat_k")[0]["failed"]
    # a requirement inside the interval passes: the data cannot show the candidate falls short
    level = (entry["ci"][0] + entry["ci"][1]) / 2
    gate = gate_file(tmp_path, f"min_pass_hat_k = {{k = 4, value = {level}}}\n")
    code, r, _ = run(capsys, base, worse, "--gate", gate)
    assert code == 0 and not checks(r, "min_pass_hat_k")[0]["failed"]
    short = write_jsonl(tmp_path / "short.jsonl", trial_records("short", trials=2, seed=5))
    code, r, _ = run(capsys, base, short, "--gate", gate)
    assert code == 1 and "fewer than 4 trials" in checks(r, "min_pass_hat_k")[0]["detail"]


def test_every_candidate_is_gated_with_its_name(tmp_path, capsys, pair):
    base, worse, same = pair
    code, r, _ = run(capsys, base, worse, same, "--gate", gate_file(tmp_path, "max_harmful_increase = 0.05\n"))
    assert code == 1
    assert [c["candidate"] for c in r["gate"]["checks"]] == ["worse", "same"]
    assert r["gate"]["reasons"][0].startswith("worse: max_harmful_increase:")


@pytest.mark.parametrize(("text", "message"), [
    ("max_harmful_increase = -1", "max_harmful_increase must be a number >= 0 (absolute), got -1"),
    ("max_over_refusal_increase = 'x'", "max_over_refusal_increase must be a number >= 0 (absolute), got 'x'"),
    ("min_pass_hat_k = 4", "min_pass_hat_k must be a table {k = <integer >= 1>, value = <number in [0, 1]>}"),
    ("min_pass_hat_k = {k = 0, value = 0.5}", "min_pass_hat_k.k must be an integer >= 1, got 0"),
    ("min_pass_hat_k = {k = 2, value = 1.5}", "min_pass_hat_k.value must be a number in [0, 1], got 1.5"),
    ("min_pass_hat_k = {k = 2}", "min_pass_hat_k must be a table"),
])
def test_bad_gate_values_are_named(tmp_path, capsys, pair, text, message):
    with pytest.raises(GateError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")
                       .replace("]", r"\]").replace("{", r"\{").replace("}", r"\}")):
        Gate.load(gate_file(tmp_path, text + "\n"))
    assert main(["compare", pair[0], pair[1], "--gate", gate_file(tmp_path, text + "\n")]) == 2
    assert message.split(" got")[0] in capsys.readouterr().err
