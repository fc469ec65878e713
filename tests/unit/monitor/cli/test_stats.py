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
    assert [(s["slice"], s["traces"]) for s in doc["slices"]] == [("tenant=t0", 3), ("tenant=t1", 3)]
    assert doc["slices"][0]["dimensions"] == {"tenant": "t0"}
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
