"""Betting e-processes on counts, checked exactly, by seeded Monte Carlo and against references.

Exact checks: the e-process depends only on cumulative counts, so every
sequence can be enumerated for small n, and P(sup_t e_t >= 1/alpha) is exact
by dynamic programming over the counts for n in the hundreds. The references
below compute the wealth independently (products per sequence, closed-form
log factors, incremental updates) and are cross-checked against the library.
"""

import functools
import math

import numpy as np
import pytest
from scipy.special import betaincinv, logsumexp
from scipy.stats import binom, norm

from monitor.stats.betting import (
    BET_FRACTIONS,
    BET_WEIGHTS,
    flip_e_value,
    flip_e_value_below,
    flip_log_factors,
    flip_lower_bound,
    flip_upper_bound,
    rate_e_value,
    rate_e_value_below,
    rate_log_factors,
    rate_lower_bound,
    rate_upper_bound,
)
from monitor.stats.betting_histogram import (
    HISTOGRAM_EDGES,
    bucket_index,
    histogram_e_value,
    histogram_e_value_below,
    histogram_lower_bound,
    histogram_upper_bound,
)

ALPHA = 0.05
FRACTIONS = np.array(BET_FRACTIONS)
J = FRACTIONS.size

# (floor, p_plus, p_minus) at the null's boundary: p_plus - p_minus == floor, discordance p_plus + p_minus
BOUNDARY_FLIPS = [(0.0, 0.005, 0.005), (0.0, 0.2, 0.2), (0.0, 0.5, 0.5), (0.02, 0.115, 0.095), (0.1, 0.3, 0.2)]


def _log_factors(values, mean, low):
    """log(1 + lambda_j (v - mean)) for lambda_j = f_j / (mean - low): shape (J, len(values))."""
    lam = FRACTIONS / (mean - low)
    return np.log1p(np.outer(lam, np.asarray(values, dtype=float) - mean))


# --- exact: every sequence, small n ---


def _all_sequences(n):
    codes = (np.arange(3**n)[:, None] // 3 ** np.arange(n)) % 3
    return np.array([1, 0, -1], dtype=np.int8)[codes]  # (3^n, n) values of X


@functools.lru_cache(maxsize=1)
def _running_counts(n):
    """Running (b, c) along every one of the 3^n sequences, shared by the parametrized cases."""
    x = _all_sequences(n)
    return np.cumsum(x == 1, axis=1, dtype=np.int8), np.cumsum(x == -1, axis=1, dtype=np.int8)


@pytest.mark.parametrize(("floor", "p_plus", "p_minus"), [*BOUNDARY_FLIPS, (0.3, 0.3, 0.0)])
def test_every_sequence_of_twelve_pairs_keeps_expectation_one_and_ville(floor, p_plus, p_minus):
    n = 12
    table = np.zeros((n + 1, n + 1, n + 1))  # e at (t, b, c), from the library
    for t in range(n + 1):
        for b in range(t + 1):
            for c in range(t - b + 1):
                table[t, b, c] = flip_e_value(b, c, t, floor)
    cum_b, cum_c = _running_counts(n)
    probability = (
        p_plus ** cum_b[:, -1] * p_minus ** cum_c[:, -1] * (1 - p_plus - p_minus) ** (n - cum_b[:, -1] - cum_c[:, -1])
    )
    assert probability.sum() == pytest.approx(1.0, abs=1e-12)
    final = table[n, cum_b[:, -1], cum_c[:, -1]]
    assert abs(float(probability @ final) - 1.0) <= 1e-12  # a mixture of martingales at the boundary
    sup = table[np.arange(1, n + 1), cum_b, cum_c].max(axis=1)
    for level in (1.5, 2.0, 5.0, 1 / ALPHA):
        assert float(probability[sup >= level].sum()) <= 1 / level  # Ville, exactly
    if floor < 0.3:
        assert float(probability[sup >= 2.0].sum()) > 0.0  # the check is not vacuous


def test_e_value_is_the_sequential_wealth_of_every_sequence():
    n, floor = 8, 0.05
    x = _all_sequences(n)
    lam = FRACTIONS / (1 + floor)
    wealth = np.prod(1 + lam[None, None, :] * (x[:, :, None] - floor), axis=1).mean(axis=1)  # products, no logs
    for row in range(0, len(x), 7):
        b, c = int((x[row] == 1).sum()), int((x[row] == -1).sum())
        assert flip_e_value(b, c, n, floor) == pytest.approx(wealth[row], rel=1e-12)
        assert flip_e_value_below(b, c, n, floor) == pytest.approx(flip_e_value(c, b, n, -floor), rel=1e-12)


def test_strictly_inside_the_null_the_expectation_is_below_one():
    n, floor, p_plus, p_minus = 12, 0.05, 0.1, 0.1
    expectation = sum(
        math.factorial(n)
        / (math.factorial(b) * math.factorial(c) * math.factorial(n - b - c))
        * p_plus**b
        * p_minus**c
        * (1 - p_plus - p_minus) ** (n - b - c)
        * flip_e_value(b, c, n, floor)
        for b in range(n + 1)
        for c in range(n - b + 1)
    )
    assert expectation < 1.0


# --- exact: dynamic programming over the counts, n in the hundreds ---


def _step(grid, t, p_plus, p_minus):
    """Advance the distribution over (b, c) by one pair; only the block b, c <= t can hold mass."""
    old = grid[:t, :t].copy()
    grid[:t, :t] = old * (1 - p_plus - p_minus)
    grid[1 : t + 1, :t] += old * p_plus
    grid[:t, 1 : t + 1] += old * p_minus


def _least_b(u, v, w, t, level):
    """Per c, the least b with e_t(b, c) >= level (t - c + 1 if none), by a binary search over all c at once.

    e_t(b, c) = sum_j u_jb v_jc w_j with u, v the factor ratios to a concordant pair's and w_j its factor^t / J;
    it rises with b (a concordant pair turned candidate-worse).
    """
    c = np.arange(t + 1)
    low, high = np.zeros(t + 1, dtype=int), t - c + 1
    while (active := low < high).any():
        middle = (low + high) // 2
        e = (u[:, np.minimum(middle, t)] * v[:, c] * w[:, None]).sum(axis=0)
        crossing = e >= level
        high = np.where(active & crossing, middle, high)
        low = np.where(active & ~crossing, middle + 1, low)
    return low


def _flip_crossing_dp(floor, p_plus, p_minus, n, levels=(1 / ALPHA,)):
    """Exact P(sup_{t<=n} e_t >= level) per level, and E[e_n]: DP over (b, c), crossed paths absorbed."""
    up, zero, down = _log_factors([1.0, 0.0, -1.0], floor, -1.0).T
    ks = np.arange(n + 1)
    u, v = np.exp(np.outer(up - zero, ks)), np.exp(np.outer(down - zero, ks))  # (J, n + 1)
    grids = [np.zeros((n + 1, n + 1)) for _ in range(len(levels) + 1)]  # one per level, then the unstopped one
    for grid in grids:
        grid[0, 0] = 1.0
    crossed = [0.0] * len(levels)
    for t in range(1, n + 1):
        for grid in grids:
            _step(grid, t, p_plus, p_minus)
        w = np.exp(t * zero) / J
        for i, level in enumerate(levels):
            hit = ks[: t + 1, None] >= _least_b(u, v, w, t, level)[None, :]  # (b, c)
            block = grids[i][: t + 1, : t + 1]
            crossed[i] += float(block[hit].sum())
            block[hit] = 0.0
    e_final = np.einsum("jb,j,jc->bc", u, np.exp(n * zero) / J, v)
    return crossed, float((grids[-1] * e_final).sum())


def test_the_dp_reference_agrees_with_the_library():
    floor, t = 0.02, 60
    up, zero, down = _log_factors([1.0, 0.0, -1.0], floor, -1.0).T
    for b in range(t + 1):
        for c in range(t - b + 1):
            reference = np.exp(b * up + c * down + (t - b - c) * zero).mean()
            assert flip_e_value(b, c, t, floor) == pytest.approx(reference, rel=1e-10)


@pytest.mark.parametrize(("floor", "p_plus", "p_minus"), [*BOUNDARY_FLIPS, (0.02, 0.02, 0.0)])
def test_exact_probability_of_ever_alarming_at_the_floor_is_at_most_alpha(floor, p_plus, p_minus):
    levels = (2.0, 1 / ALPHA)  # Ville at two levels, looked at after every pair
    crossed, expectation = _flip_crossing_dp(floor, p_plus, p_minus, n=300, levels=levels)
    assert all(probability <= 1 / level for probability, level in zip(crossed, levels))
    assert abs(expectation - 1.0) <= 1e-9


def test_exact_dp_detects_an_effect_above_the_floor():
    (crossed,), _ = _flip_crossing_dp(0.02, 0.2, 0.05, n=300)  # net flip 0.15 against a 0.02 floor
    assert crossed >= 0.9


def _rate_first_alarm_counts(threshold, n, alpha=ALPHA):
    """For each t <= n the least x with rate_e_value(x, t) >= 1/alpha (t + 1 if none).

    e falls with t and rises with x, and one more event outweighs one more trial, so the least x
    grows by 0 or 1 per trial; the library is asked only at the candidates.
    """
    least = np.zeros(n + 1, dtype=int)
    least[0] = 1  # e_0 = 1 never alarms
    for t in range(1, n + 1):
        candidate = least[t - 1]
        if candidate > t or rate_e_value(candidate, t, threshold) < 1 / alpha:
            candidate += 1
            assert candidate > t or rate_e_value(candidate, t, threshold) >= 1 / alpha
        least[t] = candidate
    return least


def _rate_crossing_dp(least, p):
    """Exact P(the e-process ever crosses) for rate p, by DP over x with crossed paths absorbed."""
    alive = np.zeros(least.size)
    alive[0] = 1.0
    crossed = 0.0
    for t in range(1, least.size):
        new = alive * (1 - p)
        new[1:] += alive[:-1] * p
        crossed += float(new[least[t] :].sum())
        new[least[t] :] = 0.0
        alive = new
    return crossed


@pytest.mark.parametrize("threshold", [0.002, 0.01, 0.05, 0.3])
def test_rate_exact_validity_at_the_threshold(threshold):
    small_n, n = 100, 2000  # at small_n every term of E[e] is a representable double, even x = n
    pmf = binom.pmf(np.arange(small_n + 1), small_n, threshold)
    expectation = sum(float(pmf[k]) * rate_e_value(k, small_n, threshold) for k in range(small_n + 1))
    assert abs(expectation - 1.0) <= 1e-9
    assert _rate_crossing_dp(_rate_first_alarm_counts(threshold, n, alpha=0.5), threshold) <= 0.5
    least = _rate_first_alarm_counts(threshold, n)
    assert _rate_crossing_dp(least, threshold) <= ALPHA
    assert _rate_crossing_dp(least, 3 * threshold) >= (0.5 if threshold < 0.005 else 0.9)


def test_rate_reference_agrees_with_the_library():
    one, zero = _log_factors([1.0, 0.0], 0.01, 0.0).T
    for x in range(0, 501, 7):
        log_reference = float(logsumexp(x * one + (500 - x) * zero)) - math.log(J)
        expected = math.exp(log_reference) if log_reference < 709 else math.inf
        assert rate_e_value(x, 500, 0.01) == pytest.approx(expected, rel=1e-10)


def test_histogram_expectation_is_one_when_every_y_sits_on_a_lower_edge():
    support = np.array([-1.0, 0.0, 0.5])  # each the lower edge of its bucket, so rounding is exact
    probabilities = np.array([1 / 3, 1 / 6, 1 / 2])  # mean -1/12, tested at the boundary shift = -1/12
    shift = float(support @ probabilities)
    n, expectation = 10, 0.0
    for i in range(n + 1):
        for k in range(n - i + 1):
            counts = [0] * 256
            counts[bucket_index(-1.0)], counts[bucket_index(0.0)], counts[bucket_index(0.5)] = i, k, n - i - k
            weight = math.comb(n, i) * math.comb(n - i, k) * np.prod(probabilities ** np.array([i, k, n - i - k]))
            expectation += weight * histogram_e_value(counts, shift)
    assert abs(expectation - 1.0) <= 1e-12


# --- Monte Carlo, seeded: the e-process updated pair by pair, looked at after every pair ---


def _monte_carlo(draw, mean, low, runs, pairs, seed):
    """Fraction of runs with e_t >= 1/alpha at some t <= pairs; ``draw(rng, runs)`` gives one value per run."""
    rng = np.random.default_rng(seed)
    lam = FRACTIONS / (mean - low)
    log_wealth = np.zeros((runs, J))
    alarmed = np.zeros(runs, dtype=bool)
    totals = []
    for _ in range(pairs):
        x = draw(rng, runs)
        totals.append(x)
        log_wealth += np.log1p(np.outer(x - mean, lam))
        alarmed |= np.log(np.exp(log_wealth).mean(axis=1)) >= math.log(1 / ALPHA)
    return alarmed, np.array(totals).T, log_wealth


def _flip_draw(p_plus, p_minus):
    return lambda rng, runs: rng.choice([1.0, 0.0, -1.0], size=runs, p=[p_plus, 1 - p_plus - p_minus, p_minus])


def _bound(runs):
    return ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / runs)


@pytest.mark.parametrize(("discordance", "seed"), [(0.01, 1), (0.1, 2), (0.4, 3)])
def test_monte_carlo_a_a_never_alarms_more_than_alpha(discordance, seed):
    runs, pairs = 400, 2500
    alarmed, x, log_wealth = _monte_carlo(_flip_draw(discordance / 2, discordance / 2), 0.0, -1.0, runs, pairs, seed)
    assert alarmed.mean() <= _bound(runs)
    for run in range(0, runs, 40):  # the incremental reference is the library's e-value on the counts
        b, c = int((x[run] == 1).sum()), int((x[run] == -1).sum())
        assert flip_e_value(b, c, pairs, 0.0) == pytest.approx(np.exp(log_wealth[run]).mean(), rel=1e-8)


def test_monte_carlo_at_the_floor_and_power_above_it():
    runs, pairs, floor = 400, 2500, 0.02
    at_floor, _, _ = _monte_carlo(_flip_draw(0.115, 0.095), floor, -1.0, runs, pairs, seed=4)
    assert at_floor.mean() <= _bound(runs)
    ten_points, _, _ = _monte_carlo(_flip_draw(0.2, 0.1), floor, -1.0, 200, 1500, seed=5)
    assert ten_points.mean() >= 0.95
    # recovery, H0: E[X] >= 0.02 at the boundary, is the test above on -X
    recovered, x, log_wealth = _monte_carlo(_flip_draw(0.095, 0.115), -floor, -1.0, runs, pairs, seed=6)
    assert recovered.mean() <= _bound(runs)
    b, c = int((x[0] == -1).sum()), int((x[0] == 1).sum())
    assert flip_e_value_below(b, c, pairs, floor) == pytest.approx(np.exp(log_wealth[0]).mean(), rel=1e-8)


def test_monte_carlo_rate_at_threshold_and_at_three_times():
    at_threshold, _, _ = _monte_carlo(lambda rng, r: (rng.random(r) < 0.01) * 1.0, 0.01, 0.0, 400, 3000, seed=7)
    assert at_threshold.mean() <= _bound(400)
    tripled, _, _ = _monte_carlo(lambda rng, r: (rng.random(r) < 0.03) * 1.0, 0.01, 0.0, 200, 3000, seed=8)
    assert tripled.mean() >= 0.9


def test_monte_carlo_histogram_skewed_non_exchangeable_mean_zero():
    # a jump to the cap (p = 0.05) balanced by small losses, alternating with a symmetric arm; rounded down
    skewed = np.array([1.0, -1.0 / 19.0])
    rounded = np.array([HISTOGRAM_EDGES[bucket_index(float(y))] for y in skewed])
    lows = np.array([HISTOGRAM_EDGES[bucket_index(y)] for y in (-0.5, 0.5)])
    state = {"t": 0}

    def draw(rng, runs):
        state["t"] += 1
        if state["t"] % 2:
            return np.where(rng.random(runs) < 0.05, rounded[0], rounded[1])
        return np.where(rng.random(runs) < 0.5, lows[0], lows[1])

    alarmed, _, _ = _monte_carlo(draw, 0.0, -1.0, 400, 2500, seed=9)
    assert alarmed.mean() <= _bound(400)


# --- references ---


@pytest.mark.parametrize(("n", "b", "c"), [(100_000, 11_000, 9_000), (1_000_000, 52_000, 48_000), (10_000, 1500, 500)])
def test_flip_bounds_are_wider_than_the_fixed_n_normal_bound_by_a_log_factor(n, b, c):
    mean = (b - c) / n
    radius = norm.ppf(1 - ALPHA) * math.sqrt(((b + c) / n - mean**2) / n)
    lower, upper = flip_lower_bound(b, c, n, ALPHA), flip_upper_bound(b, c, n, ALPHA)
    assert 1.0 < (mean - lower) / radius < 3.0
    assert 1.0 < (upper - mean) / radius < 3.0


@pytest.mark.parametrize(("x", "n"), [(100, 10_000), (6000, 1_000_000), (50, 1000), (500, 1000), (20, 100_000)])
def test_rate_lower_bound_is_below_clopper_pearson_one_sided(x, n):
    exact_fixed_n = float(betaincinv(x, n - x + 1, ALPHA))
    lower = rate_lower_bound(x, n, ALPHA)
    assert 1.0 < (x / n - lower) / (x / n - exact_fixed_n) < 3.0
    upper_fixed_n = float(betaincinv(x + 1, n - x, 1 - ALPHA))
    assert 1.0 < (rate_upper_bound(x, n, ALPHA) - x / n) / (upper_fixed_n - x / n) < 3.5


def test_histogram_bounds_against_the_normal_bound_on_the_raw_sample():
    rng = np.random.default_rng(10)
    y = np.clip(rng.lognormal(-3.0, 1.0, 50_000) - rng.lognormal(-3.0, 1.0, 50_000), -1.0, 1.0)
    counts = np.bincount([bucket_index(float(v)) for v in y], minlength=256)
    radius = norm.ppf(1 - ALPHA) * y.std() / math.sqrt(y.size)
    lower, upper = histogram_lower_bound(counts, ALPHA), histogram_upper_bound(counts, ALPHA)
    assert lower < y.mean() - radius and upper > y.mean() + radius
    assert y.mean() - lower < 3.0 * radius + 2 / 256 and upper - y.mean() < 3.0 * radius + 2 / 256


# --- edges of the API ---


def test_empty_input_knows_nothing():
    assert flip_e_value(0, 0, 0, 0.02) == 1.0 and flip_e_value_below(0, 0, 0, 0.02) == 1.0
    assert (flip_lower_bound(0, 0, 0, ALPHA), flip_upper_bound(0, 0, 0, ALPHA)) == (-1.0, 1.0)
    assert (rate_lower_bound(0, 0, ALPHA), rate_upper_bound(0, 0, ALPHA)) == (0.0, 1.0)
    assert rate_e_value(0, 0, 0.01) == 1.0 and rate_e_value_below(0, 0, 0.01) == 1.0
    assert (histogram_lower_bound([0] * 256, ALPHA), histogram_upper_bound([0] * 256, ALPHA)) == (-1.0, 1.0)
    assert histogram_e_value([0] * 256) == 1.0 and histogram_e_value_below([0] * 256) == 1.0


def test_extreme_counts_stay_finite_or_infinite_not_nan():
    assert flip_e_value(10**9, 0, 10**9, 0.5) == math.inf
    assert rate_lower_bound(0, 10**9, ALPHA) == 0.0 and rate_upper_bound(10**9, 10**9, ALPHA) == 1.0
    assert 0.0 < rate_upper_bound(0, 10**9, ALPHA) < 1e-8


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: flip_e_value(3, 5, 6, 0.0), "b + c must be <= n, got b=3, c=5, n=6"),
        (lambda: flip_e_value(-1, 0, 6, 0.0), "b must be an integer >= 0, got -1"),
        (lambda: flip_e_value(1, 0, 6, 1.0), "floor must be a number in (-1, 1), got 1.0"),
        (lambda: flip_lower_bound(1, 0, 6, 0.0), "alpha must be a number in (0, 1), got 0.0"),
        (lambda: rate_e_value(7, 6, 0.1), "successes must be an integer in [0, n], got 7 with n=6"),
        (lambda: rate_e_value(1, 6, float("nan")), "threshold must be a number in (0, 1), got nan"),
        (lambda: flip_e_value(1, 0, 6, 0.0, bet_fractions=[0.5, 1.0]), "got 1.0 at index 1"),
        (lambda: histogram_e_value([1, -2, 3]), "got -2 at bucket 1"),
        (lambda: histogram_e_value(np.array([1.5, 2.0])), "counts must be an integer >= 0, got 1.5"),
        (lambda: bucket_index(1.5), "y must be a number in [-1, 1] (scaled and capped), got 1.5"),
    ],
)
def test_errors_name_the_value(call, message):
    with pytest.raises(ValueError) as info:
        call()
    assert message in str(info.value)


# --- per-bet log factors (the e-detector's increments) ---


def test_weights_are_uniform_and_sum_to_one():
    assert len(BET_WEIGHTS) == J and math.isclose(sum(BET_WEIGHTS), 1.0) and len(set(BET_WEIGHTS)) == 1


@pytest.mark.parametrize(("worse", "better", "n", "level"), [(30, 10, 200, 0.02), (10, 30, 200, 0.02), (0, 0, 50, 0.0),
                                                             (400, 350, 5000, 0.01), (7, 0, 7, 0.5)])
def test_flip_log_factors_mix_to_the_e_values_and_match_the_closed_form(worse, better, n, level):
    counts = np.array([worse, n - worse - better, better], dtype=float)
    above = flip_log_factors(worse, better, n, level, "greater")
    below = flip_log_factors(worse, better, n, level, "less")
    assert above.shape == below.shape == (J,)
    np.testing.assert_allclose(above, _log_factors([1, 0, -1], level, -1.0) @ counts, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(below, _log_factors([-1, 0, 1], -level, -1.0) @ counts, rtol=1e-12, atol=1e-12)
    assert np.dot(BET_WEIGHTS, np.exp(above)) == pytest.approx(flip_e_value(worse, better, n, level), rel=1e-12)
    assert np.dot(BET_WEIGHTS, np.exp(below)) == pytest.approx(flip_e_value_below(worse, better, n, level), rel=1e-12)


@pytest.mark.parametrize(("x", "n", "level"), [(1, 2000, 0.01), (40, 2000, 0.01), (0, 10, 0.5), (9, 10, 0.3)])
def test_rate_log_factors_mix_to_the_e_values(x, n, level):
    above, below = rate_log_factors(x, n, level, "greater"), rate_log_factors(x, n, level, "less")
    assert np.dot(BET_WEIGHTS, np.exp(above)) == pytest.approx(rate_e_value(x, n, level), rel=1e-12)
    assert np.dot(BET_WEIGHTS, np.exp(below)) == pytest.approx(rate_e_value_below(x, n, level), rel=1e-12)
    np.testing.assert_allclose(below, x * np.log1p(-FRACTIONS) + (n - x) * np.log1p(FRACTIONS * level / (1 - level)),
                               rtol=1e-12, atol=1e-12)


def test_log_factors_of_batches_add_up_to_the_whole():
    rng = np.random.default_rng(11)
    x = rng.choice([1, 0, -1], size=600, p=[0.12, 0.8, 0.08])
    cuts = np.sort(rng.choice(np.arange(1, 600), size=20, replace=False))
    for direction in ("greater", "less"):
        parts = sum(flip_log_factors(int((p == 1).sum()), int((p == -1).sum()), p.size, 0.02, direction)
                    for p in np.split(x, cuts))
        whole = flip_log_factors(int((x == 1).sum()), int((x == -1).sum()), x.size, 0.02, direction)
        np.testing.assert_allclose(parts, whole, rtol=1e-10)
        rates = sum(rate_log_factors(int((p == 1).sum()), p.size, 0.1, direction) for p in np.split(x, cuts))
        np.testing.assert_allclose(rates, rate_log_factors(int((x == 1).sum()), x.size, 0.1, direction), rtol=1e-10)


def test_log_factors_of_nothing_are_zero_and_errors_name_the_value():
    assert not flip_log_factors(0, 0, 0, 0.02, "less").any() and not rate_log_factors(0, 0, 0.5, "greater").any()
    with pytest.raises(ValueError, match=r"direction must be 'greater'.*got 'up'"):
        flip_log_factors(1, 0, 3, 0.0, "up")
    with pytest.raises(ValueError, match=r"level must be a number in \(0, 1\), got 1.5"):
        rate_log_factors(1, 3, 1.5, "less")
    with pytest.raises(ValueError, match="b \\+ c must be <= n"):
        flip_log_factors(3, 2, 4, 0.0, "less")
