"""McNemar against statsmodels and scipy.stats.binomtest."""

import math
from typing import Any, cast  # cast(Any, ...): a wrong type on purpose, to test the runtime check

import numpy as np
import pytest
from scipy.stats import binomtest
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar

from monitor.stats import McNemarResult, mcnemar, mcnemar_from_outcomes


def _random_tables(seed: int, size: int = 200) -> list[tuple[int, int]]:
    rng = np.random.default_rng(seed)
    tables = [(0, 1), (1, 0), (0, 2), (3, 3), (10, 0), (0, 40), (500, 530)]
    for _ in range(size):
        scale = int(rng.choice([5, 30, 300, 3000]))
        tables.append((int(rng.integers(0, scale)), int(rng.integers(0, scale))))
    return [t for t in tables if sum(t) > 0]


def test_acceptance_numbers():
    result = mcnemar(0, 2, 5)
    assert result.p_exact == 0.5
    assert result.chi2 == pytest.approx(0.50)
    assert (result.b, result.c, result.n, result.n_discordant) == (0, 2, 5, 2)
    assert result.net_flip == pytest.approx(0.4)


def test_exact_matches_statsmodels_and_binomtest():
    for b, c in _random_tables(1):
        # Concordant pairs do not change the test; the table needs them only for n.
        table = [[7, b], [c, 11]]
        result = mcnemar(b, c, b + c + 18)
        reference = sm_mcnemar(table, exact=True)
        assert result.p_exact == pytest.approx(reference.pvalue, rel=1e-10, abs=1e-300), (b, c)
        binomial = binomtest(b, b + c, 0.5, alternative="two-sided").pvalue
        assert result.p_exact == pytest.approx(binomial, rel=1e-10, abs=1e-300), (b, c)


def test_chi2_matches_statsmodels_with_correction():
    for b, c in _random_tables(2):
        reference = sm_mcnemar([[7, b], [c, 11]], exact=False, correction=True)
        result = mcnemar(b, c, b + c + 18)
        if b == c:
            # statsmodels does not floor |b - c| - 1 at 0; ours does (documented).
            assert (result.chi2, result.p_chi2) == (0.0, 1.0)
            continue
        assert result.chi2 == pytest.approx(reference.statistic, rel=1e-12), (b, c)
        assert result.p_chi2 == pytest.approx(reference.pvalue, rel=1e-9, abs=1e-300), (b, c)


def test_no_discordant_pairs():
    result = mcnemar(0, 0, 12)
    assert (result.p_exact, result.chi2, result.p_chi2, result.net_flip) == (1.0, 0.0, 1.0, 0.0)


def test_empty_input():
    result = mcnemar(0, 0, 0)
    assert (result.p_exact, result.chi2, result.p_chi2) == (1.0, 0.0, 1.0)
    assert math.isnan(result.net_flip)
    empty = mcnemar_from_outcomes([], [])
    assert empty.n == 0 and empty.p_exact == 1.0 and math.isnan(empty.net_flip)


def test_from_outcomes_counts_discordant_pairs():
    baseline = [True, True, False, False, True, False, True]
    candidate = [True, False, True, True, True, False, False]
    result = mcnemar_from_outcomes(baseline, candidate)
    assert isinstance(result, McNemarResult)
    assert result == mcnemar(2, 2, 7)
    assert mcnemar_from_outcomes(np.array([1, 0, 1]), np.array([0, 0, 1])) == mcnemar(1, 0, 3)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: mcnemar(3, 4, 6), "n must be an integer >= b + c, got n=6 with b=3, c=4"),
        (lambda: mcnemar(-1, 4, 6), "b must be an integer >= 0, got -1"),
        (lambda: mcnemar(1, cast(Any, 2.5), 6), "c must be an integer >= 0, got 2.5"),
        (lambda: mcnemar_from_outcomes([True], [True, False]), "equal lengths (one entry per pair), got 1 and 2"),
        (lambda: mcnemar_from_outcomes(cast(Any, [True, 2]), [True, False]),
         "baseline must contain only booleans (or 0/1), got 2 at index 1"),
        (lambda: mcnemar_from_outcomes([True], cast(Any, ["yes"])),
         "candidate must contain only booleans (or 0/1), got 'yes' at index 0"),
    ],
)
def test_errors_name_the_argument_and_value(call, message):
    with pytest.raises(ValueError) as info:
        call()
    assert message in str(info.value)
