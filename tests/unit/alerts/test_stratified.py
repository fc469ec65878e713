"""alerts.stratified: the canary's stratified difference ignores a traffic-mix shift and finds a real drop."""

from __future__ import annotations

import pytest

from alerts import stratified
from alerts.evidence import ArmCounts, CanaryStrata


def _strata(rows: dict[str, tuple[int, int, int, int]]) -> CanaryStrata:
    return CanaryStrata({k: (ArmCounts(nb, xb, 0), ArmCounts(nc, xc, 0)) for k, (nb, xb, nc, xc) in rows.items()})


def test_stratified_difference_ignores_a_traffic_mix_shift() -> None:
    # Same per-stratum rates, very different mixes: pooled rates differ by 32 points, stratified by 0.
    strata = _strata({"easy": (1000, 900, 900, 810), "hard": (9000, 4500, 100, 50)})
    est = stratified.stratified_difference(strata)
    assert est["delta"] == pytest.approx(0.0, abs=1e-12)
    assert stratified.stratified_canary_e_value(strata) < 1.0
    lo, hi = stratified.stratified_canary_cs(strata)
    assert lo < 0 < hi
    # a real drop in the canary's main stratum is found
    worse = _strata({"easy": (1000, 900, 2000, 1600), "hard": (9000, 4500, 100, 50)})
    assert stratified.stratified_difference(worse)["delta"] == pytest.approx(2000 / 2100 * -0.1)
    assert stratified.stratified_canary_e_value(worse) > 20
    # strata missing an arm are skipped, weights renormalised
    skipped = _strata({"easy": (1000, 900, 900, 810), "new": (0, 0, 50, 10)})
    assert stratified.stratified_difference(skipped)["skipped"] == ["new"]
    assert stratified.stratified_canary_cs(CanaryStrata({})) == (-1.0, 1.0)
