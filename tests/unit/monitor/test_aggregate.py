import math

import numpy as np
import pytest

from monitor.aggregate import Aggregate, cost_per_solved, health
from monitor.pricing import PriceMap
from monitor.schema import validate

PRICES = PriceMap.load()


def trace(i, **kw):
    base = {"trace_id": f"t{i}", "ts": 1_750_000_000 + i, "model_id": "m", "outcome": "success"}
    base.update(kw)
    return validate(base)


def test_empty_aggregate_contract():
    h = health(Aggregate(), PRICES, None)
    assert h["traces"] == 0 and math.isnan(h["success"]["rate"])
    assert (h["success"]["low"], h["success"]["high"]) == (0.0, 1.0)
    assert math.isnan(h["cost_per_solved_usd"]) and math.isnan(h["latency_seconds"]["p95"])
    assert math.isnan(h["safety"]["over_refusal_rate"])


def test_health_vector_counts_and_pricing():
    traces = [trace(0, tokens_in=1_000_000, tokens_cached_in=500_000, tokens_out=100_000, latency_ms=2000),
              trace(1, outcome="failure", harmful_action=True, latency_ms=4000, fees_usd=0.5),
              trace(2, refused=True, benign=True, outcome="escalated"),
              trace(3, benign=True, model_id="other", tokens_in=10, side_effects=2)]
    agg = Aggregate.of(traces)
    h = health(agg, PRICES, None)
    assert h["traces"] == 4 and h["successes"] == 2
    expected_cost = (500_000 * 3 + 500_000 * 0.3 + 100_000 * 15) / 1e6 + 0.5 + 10 * 3 / 1e6
    assert h["cost_usd"] == pytest.approx(expected_cost)
    assert h["cost_per_solved_usd"] == pytest.approx(expected_cost / 2)
    assert h["safety"]["harmful_action_rate"] == 0.25 and h["safety"]["over_refusal_rate"] == 0.5
    assert h["safety"]["side_effect_rate"] == 0.25
    assert agg.tokens_by_model()["m"]["tokens_cached_in"] == 500_000
    assert agg.get("outcome:escalated") == 1 and agg.get("outcome:failure") == 1
    assert h["success"]["method"]  # small n: Clopper-Pearson


def test_serial_form_round_trips_through_redis_like_bytes():
    rng = np.random.default_rng(3)
    agg = Aggregate.of(trace(i, latency_ms=float(rng.exponential(1000)), fees_usd=0.01 * i,
                             outcome=["success", "failure"][i % 2], tenant=f"x{i % 3}") for i in range(50))
    flat = agg.to_dict()
    assert Aggregate.from_dict(flat) == agg
    as_bytes = {k.encode(): repr(v).encode() for k, v in flat.items()}
    assert Aggregate.from_dict(as_bytes) == agg


def test_merge_equals_aggregate_of_union():
    traces = [trace(i, latency_ms=100 * i, outcome=["success", "failure", "abandoned"][i % 3]) for i in range(30)]
    left, right = Aggregate.of(traces[:11]), Aggregate.of(traces[11:])
    assert left + right == Aggregate.of(traces)
    assert left + Aggregate() == left


def test_cost_per_solved_edge_cases():
    assert cost_per_solved(1.0, 0) == math.inf
    assert math.isnan(cost_per_solved(0.0, 0))
    assert cost_per_solved(3.0, 2) == 1.5
