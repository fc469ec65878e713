"""The exporter's scipy-free rate intervals against monitor.stats (scipy's betaincinv) on random counts."""

from __future__ import annotations

import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

from monitor.exporter.rates import SMALL_N, clopper_pearson, rate_figures, wilson
from monitor.stats.intervals import clopper_pearson_interval, estimate_rate, wilson_interval

REL = 1e-12


def close(got: float, want: float) -> bool:
    return got == want or abs(got - want) <= REL * abs(want)


def test_every_small_count_equals_scipy():
    for confidence in (0.95, 0.8, 0.99):
        for n in range(1, SMALL_N + 2):
            for k in range(n + 1):
                got, want = clopper_pearson(k, n, confidence), clopper_pearson_interval(k, n, confidence)
                assert all(map(close, got, want)), (k, n, confidence, got, want)


@pytest.mark.parametrize("seed", range(3))
def test_random_counts_equal_estimate_rate(seed):
    rng = random.Random(seed)
    for _ in range(400):
        n = rng.choice((rng.randint(1, 40), rng.randint(30, 10**4), 10 ** rng.randint(1, 9)))
        k = rng.choice((0, n, rng.randint(0, n)))
        confidence = rng.choice((0.95, rng.uniform(0.5, 0.999)))
        e = estimate_rate(k, n, confidence)
        got = rate_figures(k, n, confidence)
        assert got[0] == e.rate and close(got[1], e.low) and close(got[2], e.high), (k, n, confidence, got, e)
        assert got[1] <= got[0] <= got[2]


def test_the_edges_are_exact_and_empty_is_nan():
    rate, low, high = rate_figures(0, 0)
    assert math.isnan(rate) and (low, high) == (0.0, 1.0)
    assert rate_figures(0, 7)[1] == 0.0 and rate_figures(7, 7)[2] == 1.0
    assert 0.0 < rate_figures(0, 10**12)[2] < 1e-11  # closed form keeps its precision when tiny


def test_bad_counts_and_confidence_are_refused():
    with pytest.raises(ValueError, match=r"successes must be an integer in \[0, n\], got 5 with n=3"):
        rate_figures(5, 3)
    with pytest.raises(ValueError, match=r"confidence must be a number in \(0, 1\), got 1.5"):
        rate_figures(1, 3, 1.5)


def test_a_scrape_with_exact_intervals_loads_no_scipy():
    """The exporter process stays without scipy (+15 MB resident) through scrapes that need exact intervals,
    and without numpy (+12 MB: monitor.stats imports its numpy modules on first use only)."""
    code = """
import sys
from monitor.exporter.collector import build_registry
from monitor.exporter.exposition import render
from monitor.fold import fold
from monitor.slices import Slicer
from monitor.store.memory import MemoryStore
from tests.support.traces import NOW, PRICES, make_traces
traces = make_traces(200, seed=4, spread_seconds=200)  # windows under 30 traces: exact intervals
store = MemoryStore()
store.apply(fold(traces, Slicer(), NOW), "fleetmon.traces:0", 0, len(traces) - 1)
body = render(build_registry(store, PRICES, now=lambda: NOW)[0])[0]
assert b"fleetmon_success_ratio_lower{" in body, body[:300]
print(sorted(m for m in ("scipy", "numpy", "alerts") if m in sys.modules))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[4])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


@pytest.mark.parametrize("seed", range(3))
def test_the_wilson_bounds_are_monitor_stats_own_to_the_bit(seed):
    rng = random.Random(seed)
    for _ in range(2000):
        n = rng.choice((rng.randint(1, 100), rng.randint(30, 10**5), 10 ** rng.randint(1, 12)))
        k = rng.choice((0, n, rng.randint(0, n), min(n, rng.randint(0, 5))))
        confidence = rng.choice((0.95, 0.9, 0.99, rng.uniform(0.01, 0.999)))
        assert wilson(k, n, confidence) == wilson_interval(k, n, confidence), (k, n, confidence)
    with pytest.raises(ValueError, match=r"confidence must be a number in \(0, 1\), got 1.5"):
        wilson(3, 40, 1.5)
