"""Seeded generators of paired (shadow) outcome streams, and counts from per-pair outcomes.

Pure numpy; used by the tests and by ``bench/alerting.py``. The paired model:
each pair draws (baseline success, candidate success) from a 2×2 table with
marginals ``p_baseline``, ``p_candidate`` and Pearson (phi) correlation
``correlation`` between the two outcomes. Realistic shadow traffic has a large
positive correlation (the same request is easy or hard for both releases); at
p = 0.7 a correlation of 0.5 gives ≈ 21% discordant pairs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from monitor.pairing import PairedCounts


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


def correlation_for_discordance(p: float, discordance: float) -> float:
    """The pairing correlation that gives ``discordance`` (share of discordant pairs) when both arms have rate p.

    With equal marginals the discordant share is 2 p (1 - p) (1 - correlation).
    Raises ``ValueError`` naming the inputs when no correlation in [-1, 1] gives it.
    """
    spread = 2.0 * p * (1.0 - p)
    if not 0.0 < p < 1.0 or not 0.0 <= discordance <= 2.0 * spread:
        raise ValueError(f"discordance={discordance} is infeasible for p={p} (at most {2.0 * spread:.4g})")
    return 1.0 - discordance / spread


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


def paired_counts_from_pairs(
    baseline_success: Sequence[bool],
    candidate_success: Sequence[bool],
    *,
    baseline_harmful: Sequence[bool] | None = None,
    candidate_harmful: Sequence[bool] | None = None,
    baseline_cost_usd: Sequence[float] | None = None,
    candidate_cost_usd: Sequence[float] | None = None,
    baseline_latency_seconds: Sequence[float] | None = None,
    candidate_latency_seconds: Sequence[float] | None = None,
) -> PairedCounts:
    """The :class:`PairedCounts` of per-pair outcomes (index i of each sequence is pair i)."""
    n = len(baseline_success)
    if len(candidate_success) != n:
        raise ValueError(f"candidate_success has {len(candidate_success)} pairs, baseline_success {n}")
    bs = [bool(x) for x in baseline_success]
    cs = [bool(x) for x in candidate_success]
    bh = [bool(x) for x in (baseline_harmful or [False] * n)]
    ch = [bool(x) for x in (candidate_harmful or [False] * n)]

    def deltas(base: Sequence[float] | None, cand: Sequence[float] | None, name: str) -> tuple[int, float, float]:
        if base is None and cand is None:
            return 0, 0.0, 0.0
        if base is None or cand is None or len(base) != n or len(cand) != n:
            raise ValueError(f"{name}: give both arms with {n} values each")
        d = [float(y) - float(x) for x, y in zip(base, cand)]
        return n, math.fsum(d), math.fsum(v * v for v in d)

    cost = deltas(baseline_cost_usd, candidate_cost_usd, "cost_usd")
    lat = deltas(baseline_latency_seconds, candidate_latency_seconds, "latency_seconds")
    return PairedCounts(
        n_pairs=n,
        b=sum(x and not y for x, y in zip(bs, cs)),
        c=sum(y and not x for x, y in zip(bs, cs)),
        harm_b=sum(x and not y for x, y in zip(bh, ch)),
        harm_c=sum(y and not x for x, y in zip(bh, ch)),
        cost_n=cost[0], cost_delta_sum=cost[1], cost_delta_sumsq=cost[2],
        latency_n=lat[0], latency_delta_sum=lat[1], latency_delta_sumsq=lat[2],
        candidate_harmful=sum(ch), baseline_harmful=sum(bh),
    )


def capped_fields(quantity: str, base: np.ndarray, cand: np.ndarray, cap: float) -> dict[str, Any]:
    """The capped-sum fields of :class:`monitor.pairing.PairedCounts` for paired values ``base``/``cand``."""
    b, c = np.minimum(base, cap), np.minimum(cand, cap)
    return {f"capped_{quantity}_n": int(b.size), f"capped_{quantity}_cap": cap * b.size,
            f"capped_{quantity}_b": float(b.sum()), f"capped_{quantity}_c": float(c.sum()),
            f"capped_{quantity}_bb": float((b * b).sum()), f"capped_{quantity}_cc": float((c * c).sum()),
            f"capped_{quantity}_bc": float((b * c).sum()),
            f"{quantity}_over_cap": int(((base > cap) | (cand > cap)).sum())}
