"""The exporter's series budget: the busiest slices are kept whole, the rest fold into __other__, sums stay exact."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitor.aggregate import Aggregate
from monitor.exporter.budget import FLEET_OTHER, OTHER, apply_budget
from monitor.exporter.collector import build_registry
from monitor.fold import fold
from monitor.groupings import grouping_name
from monitor.slices import CardinalityGuard, Slicer, parse_slice_id, slice_id, slice_key
from monitor.store.memory import MemoryStore
from tests.support.traces import NOW, PRICES, make_traces

_CELLS = [(f"r{r}", a, f"t{t}", f"n{n}") for r in range(3) for a in ("baseline", "canary") for t in range(4)
          for n in range(5)]
_GROUPINGS = (("release", "arm"), ("release", "arm", "task_type"), ("release", "arm", "tenant"),
              ("release", "arm", "task_type", "tenant"))


def _rows(counts: list[int]) -> dict[str, Aggregate]:
    """Rows of four groupings, as the fold writes them: each cell's traces once in every grouping."""
    out: dict[str, Aggregate] = {}
    for (release, arm, task, tenant), n in zip(_CELLS, counts):
        values = {"release": release, "arm": arm, "task_type": task, "tenant": tenant}
        for dims in _GROUPINGS:
            sid = slice_id(slice_key({d: values[d] for d in dims}))
            out.setdefault(sid, Aggregate()).merge(Aggregate({"traces": n, "successes": n // 2}))
    return out


def _by_grouping_release_arm(aggs: dict[str, Aggregate], field: str) -> Counter[tuple[str, str, str]]:
    out: Counter[tuple[str, str, str]] = Counter()
    for sid, agg in aggs.items():
        key = parse_slice_id(sid)
        dims = dict(key)
        out[(grouping_name(key), dims["release"], dims["arm"])] += int(agg.get(field))
    return out


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(0, 500), min_size=len(_CELLS), max_size=len(_CELLS)), st.integers(40, 9000),
       st.data())
def test_the_budget_holds_and_every_served_grouping_sums_to_the_fleet(counts, budget, data) -> None:
    totals = _rows(counts)
    active = data.draw(st.sets(st.sampled_from(sorted(totals))))
    window = {sid: Aggregate({"traces": 1}) for sid in active}
    got = apply_budget(totals, [window], budget, series_per_slice=30, series_per_window=10)
    used = sum(30 + 10 * (sid in got.windows[0]) for sid in got.totals)
    assert used <= budget or got.folded_slices == 0
    if got.folded_slices == 0 and not got.dropped_groupings:
        assert got.totals == totals
    served = {grouping_name(parse_slice_id(sid)) for sid in got.totals}
    assert not served & set(got.dropped_groupings)
    assert served | set(got.dropped_groupings) == {grouping_name(parse_slice_id(s)) for s in totals}
    fleet = sum(a.traces for sid, a in totals.items() if grouping_name(parse_slice_id(sid)) == "")
    for name in served:  # each served grouping still holds every trace once
        assert sum(a.traces for sid, a in got.totals.items() if grouping_name(parse_slice_id(sid)) == name) == fleet
    for field in ("traces", "successes"):
        want, have = _by_grouping_release_arm(totals, field), _by_grouping_release_arm(got.totals, field)
        if FLEET_OTHER not in got.totals:  # the fleet's rows fit: sums by release and arm exact per grouping
            assert {k: v for k, v in want.items() if k[0] in served} == have
    fresh = _rows(counts)
    assert totals == fresh  # the reader's aggregates are never merged into


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
    def by_grouping(samples: dict[str, list]) -> Counter[str]:
        out: Counter[str] = Counter()
        for s in samples["fleetmon_traces_total"]:
            out[s.labels.get("grouping", "")] += s.value
        return out

    served, everything = by_grouping(small), by_grouping(full)
    assert served[""] == everything[""] == len(traces)  # release × arm: each trace once
    assert all(served[name] == len(traces) for name in served)  # every grouping served holds every trace
    assert any(s.labels.get("task_type") == OTHER or s.labels.get("tenant") == OTHER
               for s in small["fleetmon_traces_total"])
