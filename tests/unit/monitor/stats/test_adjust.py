"""adjust_p_values: statsmodels' multipletests on the present p-values, None kept out of the family."""

import gc
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from statsmodels.stats.multitest import multipletests

from monitor.stats.multiple import adjust_p_values


def test_against_statsmodels_with_missing_tests(monkeypatch):
    # statsmodels' Holm ends with gc.collect() on every call (statsmodels/stats/multitest.py): 70 ms
    # each in a process holding the whole suite's objects, 30 s for this loop. Its result does not
    # depend on it, so the collection is skipped here.
    monkeypatch.setattr(gc, "collect", lambda generation=2: 0)
    rng = np.random.default_rng(11)
    for _ in range(200):
        m = int(rng.integers(1, 30))
        p = list(np.where(rng.uniform(size=m) < 0.5, rng.beta(0.3, 5, size=m), rng.uniform(size=m)))
        holes = rng.uniform(size=m) < 0.2
        given_p = [None if h else float(x) for x, h in zip(p, holes)]
        present = [float(x) for x, h in zip(p, holes) if not h]
        for method, sm in (("bh", "fdr_bh"), ("holm", "holm")):
            got = adjust_p_values(given_p, method)
            expected = iter(multipletests(present, method=sm)[1]) if present else iter(())
            for value, hole in zip(got, holes):
                if hole:
                    assert value is None
                else:
                    assert value == pytest.approx(next(expected), rel=1e-12, abs=1e-300)
        assert adjust_p_values(given_p, "none") == given_p


def test_nan_counts_as_missing_and_errors_name_the_value():
    assert adjust_p_values([float("nan"), 0.01, 0.04], "bh") == [None, 0.02, 0.04]
    assert adjust_p_values([], "holm") == []
    with pytest.raises(ValueError, match="adjust must be one of bh, holm, none, got 'bonf'"):
        adjust_p_values([0.1], "bonf")
    with pytest.raises(ValueError, match=r"in \[0, 1\], got 1.5"):
        adjust_p_values([0.1, 1.5], "bh")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=40))
def test_invariants(p):
    bh, holm = adjust_p_values(p, "bh"), adjust_p_values(p, "holm")
    for raw, b, h in zip(p, bh, holm):
        assert raw <= b + 1e-12 and b <= h + 1e-12 and h <= 1.0  # raw <= BH <= Holm <= 1
    order = np.argsort(p, kind="stable")
    for adjusted in (bh, holm):  # the adjustment keeps the order of the raw p-values
        ranked = [adjusted[i] for i in order]
        assert all(a <= b + 1e-12 for a, b in itertools.pairwise(ranked))
