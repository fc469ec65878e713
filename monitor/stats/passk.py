"""pass@k and pass^k: how often an agent solves a task given k attempts.

For one task with n recorded trials of which c succeeded:

* pass@k  = 1 - C(n - c, k) / C(n, k)   — at least one of k attempts succeeds
  (the unbiased estimator of Chen et al. 2021, "Evaluating Large Language
  Models Trained on Code"), drawing k of the n trials without replacement.
* pass^k  = C(c, k) / C(n, k)           — all k attempts succeed (the
  reliability figure of tau-bench, Yao et al. 2024).

Both are exact finite-sample quantities of the recorded trials (no
asymptotics); both need n >= k. They are computed as products of at most
min(k, ...) ratios in [0, 1], never as huge binomial coefficients, so they are
stable for any n (relative error a few ulps per factor).

Over a task set the figure is the macro mean over tasks (each task weighs the
same, whatever its n); an empty task set gives nan.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from monitor.stats.intervals import _require_int

__all__ = ["mean_pass_at_k", "mean_pass_hat_k", "pass_at_k", "pass_at_k_per_task", "pass_hat_k",
           "pass_hat_k_per_task"]

# Bound on the (tasks x k) work matrix of the vectorised means: ~32 MB of float64.
_MAX_MATRIX_ENTRIES = 4_000_000


def _validate(n: object, c: object, k: object, context: str = "") -> tuple[int, int, int]:
    """Check 1 <= k <= n and 0 <= c <= n (all integers); return them as ints."""
    suffix = f" ({context})" if context else ""
    k_int = _require_int("k", k, minimum=1, context=context)
    n_int = _require_int("n", n, minimum=0, context=context)
    c_int = _require_int("c", c, minimum=0, context=context)
    if c_int > n_int:
        raise ValueError(f"c must be an integer in [0, n], got {c_int} with n={n_int}{suffix}")
    if n_int < k_int:
        raise ValueError(f"n must be >= k, got n={n_int} with k={k_int}{suffix}")
    return n_int, c_int, k_int


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one task: 1 - C(n - c, k) / C(n, k).

    Exact (up to float rounding) probability that at least one of k trials
    drawn without replacement from the n recorded ones succeeded. Returns 1.0
    when n - c < k (every k-subset holds a success) and 0.0 when c == 0.
    Raises ValueError unless k >= 1, n >= k and 0 <= c <= n (integers).
    """
    n, c, k = _validate(n, c, k)
    failures = n - c
    if failures < k:
        return 1.0
    # C(n-c, k)/C(n, k) has two product forms; use the shorter one.
    if k <= c:
        # prod_{j=0}^{k-1} (n - c - j) / (n - j)
        all_fail = math.prod((failures - j) / (n - j) for j in range(k))
    else:
        # prod_{i=n-c+1}^{n} (1 - k / i)
        all_fail = math.prod(1.0 - k / i for i in range(failures + 1, n + 1))
    return 1.0 - all_fail


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k for one task: C(c, k) / C(n, k), the chance all k trials succeed.

    Exact (up to float rounding) for k trials drawn without replacement from
    the n recorded ones. Returns 0.0 when c < k and 1.0 when c == n.
    Raises ValueError unless k >= 1, n >= k and 0 <= c <= n (integers).
    """
    n, c, k = _validate(n, c, k)
    if c < k:
        return 0.0
    failures = n - c
    if k <= failures:
        # prod_{j=0}^{k-1} (c - j) / (n - j)
        return math.prod((c - j) / (n - j) for j in range(k))
    # prod_{j=0}^{n-c-1} (n - k - j) / (n - j)
    return math.prod((n - k - j) / (n - j) for j in range(failures))


def _per_task_arrays(
    per_task: Sequence[tuple[int, int]], k: object
) -> tuple[np.ndarray, np.ndarray, int]:
    """Validate every (n_i, c_i) pair, naming the task index on failure."""
    k_int = _require_int("k", k, minimum=1)
    if isinstance(per_task, list) and per_task and all(type(item) is tuple for item in per_task):
        # Fast path for plain int pairs (the report's own calls): checked at once, same result.
        pairs = np.array(per_task, dtype=object)
        if pairs.ndim == 2 and pairs.shape[1] == 2 and all(type(v) is int for v in pairs.ravel()):
            counts = pairs.astype(np.int64)
            n_all, c_all = counts[:, 0], counts[:, 1]
            if bool(np.all((n_all >= k_int) & (c_all >= 0) & (c_all <= n_all))):
                return n_all.astype(np.float64), c_all.astype(np.float64), k_int
    ns = np.empty(len(per_task), dtype=np.float64)
    cs = np.empty(len(per_task), dtype=np.float64)
    for index, item in enumerate(per_task):
        try:
            n_i, c_i = item
        except (TypeError, ValueError):
            raise ValueError(
                f"per_task[{index}] must be a pair (n, c), got {item!r}"
            ) from None
        n_i, c_i, _ = _validate(n_i, c_i, k_int, context=f"task {index}")
        ns[index] = n_i
        cs[index] = c_i
    return ns, cs, k_int


def _mean_of_products(numerators: np.ndarray, denominators: np.ndarray, k: int) -> float:
    """Mean over tasks of prod_{j<k} max(num_i - j, 0) / (den_i - j).

    Vectorised over tasks, in row chunks so the (tasks x k) matrix stays bounded.
    Requires den_i >= k for every task (checked by the caller).
    """
    offsets = np.arange(k, dtype=np.float64)
    rows_per_chunk = max(1, _MAX_MATRIX_ENTRIES // k)
    total = 0.0
    for start in range(0, numerators.size, rows_per_chunk):
        num = numerators[start : start + rows_per_chunk, None] - offsets
        den = denominators[start : start + rows_per_chunk, None] - offsets
        total += float(np.sum(np.prod(np.maximum(num, 0.0) / den, axis=1)))
    return total / numerators.size


def mean_pass_at_k(per_task: Sequence[tuple[int, int]], k: int) -> float:
    """Macro mean over tasks of pass@k, from (n_i, c_i) = (trials, successes).

    Each task counts once whatever its n_i. Returns nan for an empty sequence.
    Raises ValueError naming the task index when a pair is invalid, e.g.
    n_i < k ("n must be >= k, got n=2 with k=5 (task 3)").
    """
    ns, cs, k = _per_task_arrays(per_task, k)
    if ns.size == 0:
        return math.nan
    return 1.0 - _mean_of_products(ns - cs, ns, k)


def mean_pass_hat_k(per_task: Sequence[tuple[int, int]], k: int) -> float:
    """Macro mean over tasks of pass^k, from (n_i, c_i) = (trials, successes).

    Each task counts once whatever its n_i. Returns nan for an empty sequence.
    Raises ValueError naming the task index when a pair is invalid.
    """
    ns, cs, k = _per_task_arrays(per_task, k)
    if ns.size == 0:
        return math.nan
    return _mean_of_products(cs, ns, k)


def _products(numerators: np.ndarray, denominators: np.ndarray, k: int) -> np.ndarray:
    """Per task prod_{j<k} max(num_i - j, 0) / (den_i - j), in row chunks (den_i >= k)."""
    offsets = np.arange(k, dtype=np.float64)
    rows_per_chunk = max(1, _MAX_MATRIX_ENTRIES // k)
    out = np.empty(numerators.size, dtype=np.float64)
    for start in range(0, numerators.size, rows_per_chunk):
        num = numerators[start : start + rows_per_chunk, None] - offsets
        den = denominators[start : start + rows_per_chunk, None] - offsets
        out[start : start + rows_per_chunk] = np.prod(np.maximum(num, 0.0) / den, axis=1)
    return out


def _count_arrays(trials: object, successes: object, k: object) -> tuple[np.ndarray, np.ndarray, int]:
    k_int = _require_int("k", k, minimum=1)
    ns = np.asarray(trials, dtype=np.float64).ravel()
    cs = np.asarray(successes, dtype=np.float64).ravel()
    if ns.size != cs.size:
        raise ValueError(f"trials and successes must have equal lengths, got {ns.size} and {cs.size}")
    bad = ~((ns >= k_int) & (cs >= 0) & (cs <= ns) & (ns == np.floor(ns)) & (cs == np.floor(cs)))
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(f"task {i}: need integers k <= n and 0 <= c <= n, got n={ns[i]:g}, c={cs[i]:g}, k={k_int}")
    return ns, cs, k_int


def pass_at_k_per_task(trials: object, successes: object, k: int) -> np.ndarray:
    """pass@k of every task at once (array in, array out); same values as :func:`pass_at_k`.

    ``trials`` and ``successes`` are per-task counts (n_i, c_i). Vectorised for
    the bootstrap over tasks; raises ValueError naming the first task whose
    counts are not integers with k <= n_i and 0 <= c_i <= n_i.
    """
    ns, cs, k_int = _count_arrays(trials, successes, k)
    return 1.0 - _products(ns - cs, ns, k_int)


def pass_hat_k_per_task(trials: object, successes: object, k: int) -> np.ndarray:
    """pass^k of every task at once; same values as :func:`pass_hat_k` (see :func:`pass_at_k_per_task`)."""
    ns, cs, k_int = _count_arrays(trials, successes, k)
    return _products(cs, ns, k_int)
