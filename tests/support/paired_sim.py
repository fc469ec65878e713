"""Seeded generators of paired (shadow) and stratified (canary) outcome streams.

Pure numpy; used by the tests and by ``bench/alerting.py``. The paired model:
each pair draws (baseline success, candidate success) from a 2×2 table with
marginals ``p_baseline``, ``p_candidate`` and Pearson (phi) correlation
``correlation`` between the two outcomes. Realistic shadow traffic has a large
positive correlation (the same request is easy or hard for both releases); at
p = 0.7 a correlation of 0.5 gives ≈ 21% discordant pairs.
"""

from __future__ import annotations

import math

import numpy as np

from alerts.evidence import ArmCounts, CanaryStrata


def paired_cell_probs(p_baseline: float, p_candidate: float, correlation: float) -> tuple[float, float, float, float]:
    """Cell probabilities ``(p11, p10, p01, p00)``: both succeed, baseline only, candidate only, neither.

    ``p10`` is the probability of a McNemar ``b`` pair, ``p01`` of a ``c`` pair.
    Raises ``ValueError`` naming the inputs when the correlation is infeasible
    for those marginals.
    """
    for name, p in (("p_baseline", p_baseline), ("p_candidate", p_candidate)):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"{name} must be in [0, 1], got {p}")
    p11 = p_baseline * p_candidate + correlation * math.sqrt(
        p_baseline * (1 - p_baseline) * p_candidate * (1 - p_candidate))
    cells = (p11, p_baseline - p11, p_candidate - p11, 1.0 - p_baseline - p_candidate + p11)
    if min(cells) < -1e-12:
        raise ValueError(f"correlation={correlation} is infeasible for p_baseline={p_baseline}, "
                         f"p_candidate={p_candidate} (cells {cells})")
    clipped = [max(0.0, x) for x in cells]
    total = sum(clipped)
    return tuple(x / total for x in clipped)  # type: ignore[return-value]


def paired_outcomes(n_pairs: int, p_baseline: float, p_candidate: float, correlation: float,
                    seed: int | np.random.Generator = 0) -> tuple[np.ndarray, np.ndarray]:
    """Per-pair boolean outcomes ``(baseline_success, candidate_success)``, each of length ``n_pairs``."""
    rng = np.random.default_rng(seed)
    cells = paired_cell_probs(p_baseline, p_candidate, correlation)
    idx = rng.choice(4, size=n_pairs, p=cells)
    return np.isin(idx, (0, 1)), np.isin(idx, (0, 2))


def discordant_counts(n_runs: int, n_steps: int, pairs_per_step: int, p_baseline: float,
                      p_candidate: float, correlation: float,
                      seed: int | np.random.Generator = 0) -> tuple[np.ndarray, np.ndarray]:
    """Per-step discordant counts ``(b, c)``, each an int array of shape ``(n_runs, n_steps)``.

    A step is one monitoring interval (e.g. a minute) carrying ``pairs_per_step``
    pairs; cumulate along axis 1 to get what the store holds at each check.
    """
    rng = np.random.default_rng(seed)
    cells = paired_cell_probs(p_baseline, p_candidate, correlation)
    draws = rng.multinomial(pairs_per_step, cells, size=(n_runs, n_steps))
    return draws[..., 1], draws[..., 2]


def canary_strata(n_baseline: dict[str, int], n_canary: dict[str, int],
                  p_baseline: dict[str, float], p_canary: dict[str, float],
                  harmful_rate: float = 0.0, seed: int | np.random.Generator = 0) -> CanaryStrata:
    """Independent binomial draws per stratum and arm (disjoint canary traffic)."""
    rng = np.random.default_rng(seed)
    out = {}
    for s in sorted(set(n_baseline) | set(n_canary)):
        arms = []
        for n_map, p_map in ((n_baseline, p_baseline), (n_canary, p_canary)):
            n = int(n_map.get(s, 0))
            arms.append(ArmCounts(n=n, successes=int(rng.binomial(n, p_map.get(s, 0.0))),
                                  harmful=int(rng.binomial(n, harmful_rate))))
        out[s] = (arms[0], arms[1])
    return CanaryStrata(out)
