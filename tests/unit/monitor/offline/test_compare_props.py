"""Invariants of the many-agent report on random small task sets (hypothesis)."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.offline.compare import compare_many
from monitor.offline.trials import Trial, group_trials
from monitor.pricing import PriceMap

PRICES = PriceMap.load()


@st.composite
def agent_logs(draw):
    n_agents = draw(st.integers(2, 4))
    n_tasks = draw(st.integers(3, 12))
    trials = draw(st.integers(1, 5))
    equal_trials = draw(st.booleans())
    agents = []
    for a in range(n_agents):
        rows, scores = [], []
        for t in range(n_tasks):
            for k in range(trials if equal_trials else draw(st.integers(1, trials))):
                score = draw(st.sampled_from([0.0, 0.25, 0.5, 1.0]))
                rows.append(Trial(f"a{a}/t{t}/{k}", f"t{t}", f"a{a}", None, score >= 1.0,
                                  draw(st.integers(0, 5000)), 0, draw(st.integers(0, 500)), 0.0,
                                  float(draw(st.integers(1, 60))), 1, {"kind": f"k{t % 2}"}))
                scores.append(score)
        agents.append(group_trials(f"a{a}", rows, PRICES, scores))
    return agents, equal_trials


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(agent_logs())
def test_report_invariants(case):
    agents, equal_trials = case
    report = compare_many(agents, ks=(1, 2), slice_by=["kind"], n_resamples=200, seed=1)
    probability = report["frontier_probability"]
    assert all(0.0 <= p <= 1.0 for p in probability.values())
    assert sum(probability.values()) >= 1.0 - 1e-12  # every resample has someone on the frontier
    for block in report["agents"].values():
        if equal_trials:
            assert abs(block["success_micro"]["rate"] - block["success"]["rate"]) < 1e-12
        assert block["score"]["gap"]["point"] >= -1e-12  # success = score >= 1.0, so the score is never below it
        rel = block["reliability"]
        assert 0.0 <= rel["consistency"]["point"] <= 1.0
        at, hat = rel["pass_at_k"], rel["pass_hat_k"]
        if at["2"] is not None and at["2"]["n_tasks"] == at["1"]["n_tasks"]:
            assert hat["2"]["point"] <= hat["1"]["point"] + 1e-12 <= at["2"]["point"] + 2e-12
        deff = rel["variance"]["design_effect"]
        assert deff is None or 1.0 - 1e-12 <= deff <= rel["variance"]["mean_trials_per_task"] + 1e-9
    for name, block in report["comparisons"].items():
        assert block["p_adjusted"]["mcnemar"] >= block["mcnemar"]["p_exact"] - 1e-12
        assert len(report["task_outcomes"]["flipped"][name]) == block["mcnemar"]["n_discordant"]
        for row in report["slice_comparisons"]["kind"][name].values():
            assert row["p_adjusted"] is None or row["p_adjusted"] >= row["diff"]["p"] - 1e-12
