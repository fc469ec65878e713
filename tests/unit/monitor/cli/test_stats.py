"""``fleetmon stats`` document and text, over the in-memory store."""

from monitor.cli.stats import collect_stats, render_stats
from monitor.fold import fold
from monitor.schema import validate
from monitor.slices import Slicer
from monitor.store.memory import MemoryStore

NOW = 1_800_000_000.0


def store_with(ages_seconds):
    traces = [validate({"trace_id": f"t{i}", "ts": NOW - age, "model_id": "m", "tenant": f"t{i % 2}",
                        "ok": i % 3 == 0, "tokens_in": 100, "tokens_out": 10})
              for i, age in enumerate(ages_seconds)]
    store = MemoryStore()
    delta = fold(traces, Slicer(dimensions=("tenant",)), NOW)
    delta.count("dlq", 2)
    store.apply(delta, "t:0", 0, len(traces) + 1)
    return store


def test_all_time_totals_and_slices():
    doc = collect_stats(store_with([30, 90, 4000, 4000, 100_000, 200_000]), now=NOW)
    assert doc["totals"] == {"traces": 6, "successes": 2, "tokens_in": 600, "tokens_out": 60,
                             "tokens_cached_in": 0, "fees_usd": 0.0}
    # one row per grouping: the base (no release or arm here: the whole fleet, id "") and tenant
    assert [(s["grouping"], s["slice"], s["traces"]) for s in doc["slices"]] == [
        ("", "", 6), ("tenant", "tenant=t0", 3), ("tenant", "tenant=t1", 3)]
    assert doc["slices"][1]["dimensions"] == {"tenant": "t0"}
    assert (doc["dlq"], doc["late"], doc["window"]) == (2, 1, None)  # 200,000 s is past the 48 h of 1m windows
    assert doc["applied_offsets"] == {"t:0": 7}


def test_since_merges_the_minute_windows_of_the_range():
    doc = collect_stats(store_with([30, 90, 4000, 4000, 100_000]), now=NOW, since_seconds=3600)
    assert doc["totals"]["traces"] == 2
    assert doc["window"]["resolution"] == "1m" and doc["window"]["complete"] is True
    text = render_stats(doc)
    assert "last 3600 s (1m windows)" in text and "traces 2" in text and "dead-lettered 2" in text


def test_since_beyond_retention_says_so():
    doc = collect_stats(store_with([30]), now=NOW, since_seconds=7 * 86400)
    assert doc["window"]["complete"] is False
    assert "only 172800 s are retained" in render_stats(doc)


def test_totals_are_the_fleet_once_and_rows_name_their_grouping_and_budget_folds():
    from monitor.groupings import grouping_set

    dims = ("release", "arm", "tenant")
    traces = [validate({"trace_id": f"t{i}", "ts": NOW - 30, "model_id": "m", "release": "r1",
                        "tenant": f"n{i % 4}", "ok": i % 2 == 0, "tokens_in": 10}) for i in range(12)]
    store = MemoryStore()
    store.apply(fold(traces, Slicer(dims, groupings=grouping_set(dims, budget=2)), NOW))
    doc = collect_stats(store, now=NOW)
    assert doc["totals"]["traces"] == 12 and doc["totals"]["tokens_in"] == 120   # not 24: two groupings
    assert [(s["grouping"], s["slice"], s["traces"]) for s in doc["slices"]] == [
        ("", "release=r1|arm=baseline", 12),
        ("tenant", "release=r1|arm=baseline|tenant=__other__", 6),   # n2, n3: past the budget of 2
        ("tenant", "release=r1|arm=baseline|tenant=n0", 3), ("tenant", "release=r1|arm=baseline|tenant=n1", 3)]
    assert doc["grouping_folded"] == {"tenant": 6}
    text = render_stats(doc)
    assert "past a grouping's budget, folded into __other__: tenant 6" in text
    assert text.splitlines()[5].split()[:2] == ["grouping", "slice"]
