"""The exporter's series budget: the busiest slices are kept whole, the rest fold into __other__, sums stay exact."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitor.aggregate import Aggregate
from monitor.exporter.budget import OTHER, apply_budget, other_id
from monitor.exporter.collector import build_registry
from monitor.fold import fold
from monitor.slices import CardinalityGuard, Slicer, parse_slice_id, slice_id, slice_key
from monitor.store.memory import MemoryStore
from tests.support.traces import NOW, PRICES, make_traces

_IDS = [slice_id(slice_key({"release": f"r{r}", "arm": a, "task_type": f"t{t}", "tenant": f"n{n}"}))
        for r in range(3) for a in ("baseline", "canary") for t in range(4) for n in range(5)]


def _by_release_arm(aggs: dict[str, Aggregate], field: str) -> Counter[tuple[str, str]]:
    out: Counter[tuple[str, str]] = Counter()
    for sid, agg in aggs.items():
        dims = dict(parse_slice_id(sid))
        out[(dims["release"], dims["arm"])] += int(agg.get(field))
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 500), min_size=len(_IDS), max_size=len(_IDS)), st.integers(1, 4000),
       st.sets(st.sampled_from(_IDS)))
def test_fold_keeps_the_budget_and_every_release_and_arm_sum(traces: list[int], budget: int,
                                                            active: set[str]) -> None:
    totals = {sid: Aggregate({"traces": n, "successes": n // 2}) for sid, n in zip(_IDS, traces)}
    window = {sid: Aggregate({"traces": 1}) for sid in active}
    got = apply_budget(totals, [window], budget, series_per_slice=30, series_per_window=10)
    rows = {other_id(sid) for sid in _IDS}
    used = sum(30 + 10 * (sid in got.windows[0]) for sid in got.totals)
    assert used <= max(budget, len(rows) * 40) or got.folded_slices == 0
    if got.folded_slices == 0:
        assert got.totals == totals
    for field in ("traces", "successes"):
        assert _by_release_arm(got.totals, field) == _by_release_arm(totals, field)
    kept = [sid for sid in got.totals if OTHER not in sid]
    dropped = [sid for sid in _IDS if sid not in got.totals]
    if kept and dropped:  # the kept slices are the busiest (ties broken by id)
        assert min(totals[s].traces for s in kept) >= min(totals[s].traces for s in dropped)


def test_a_scrape_over_the_budget_serves_at_most_the_budget_and_reports_the_fold() -> None:
    traces = make_traces(3000, seed=4, tenants=tuple(f"n{i}" for i in range(40)))
    store = MemoryStore()
    store.apply(fold(traces, Slicer(guard=CardinalityGuard(max_values=1000)), NOW), "fleetmon.traces:0", 0,
                len(traces) - 1)
    n_slices = len(store.active_slices())

    def scrape(max_series: int) -> dict[str, list]:
        registry, _ = build_registry(store, PRICES, now=lambda: NOW, max_series=max_series)
        samples: dict[str, list] = {}
        for family in text_string_to_metric_families(generate_latest(registry).decode()):
            for sample in family.samples:
                samples.setdefault(sample.name, []).append(sample)
        return samples

    def slice_series(samples: dict[str, list]) -> int:
        return sum(1 for v in samples.values() for s in v if "arm" in s.labels and "release" in s.labels)

    full = scrape(1_000_000)
    budget = slice_series(full) // 2
    small = scrape(budget)
    assert full["fleetmon_exporter_folded_slices"][0].value == 0
    folded = small["fleetmon_exporter_folded_slices"][0].value
    assert 0 < folded < n_slices and small["fleetmon_exporter_max_series"][0].value == budget
    assert slice_series(small) <= budget
    assert sum(s.value for s in small["fleetmon_traces_total"]) == sum(s.value for s in full["fleetmon_traces_total"])
    assert any(s.labels.get("task_type") == OTHER for s in small["fleetmon_traces_total"])
