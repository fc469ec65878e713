"""The collector's release identities: fleetmon_release_info and fleetmon_release_identity_changes_total."""

from __future__ import annotations

import logging

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitor.exporter.collector import build_registry
from monitor.fold import fold
from monitor.identity import MAX_IDENTITIES_PER_RELEASE
from monitor.schema import validate
from monitor.slices import CardinalityGuard, Slicer
from monitor.store.memory import MemoryStore
from tests.support.traces import NOW, PRICES


def trace(i: int, release: str, **hashes: str):
    return validate({"trace_id": f"t{i}", "ts": NOW - 600 + i, "model_id": "m1", "ok": True, "release": release,
                     **hashes})


def scrape(store: MemoryStore) -> dict[str, list]:
    registry, _ = build_registry(store, PRICES, now=lambda: NOW)
    samples: dict[str, list] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def test_info_shows_the_latest_tuple_and_changes_count_the_tuples_beyond_the_first():
    store = MemoryStore()
    slicer = Slicer(guard=CardinalityGuard(2))
    store.apply(fold([trace(0, "v1", prompt_hash="p1"), trace(1, "v2", prompt_hash="p1", scaffold_hash="s1")],
                     slicer, NOW))
    samples = scrape(store)
    assert {s.labels["release"]: s.labels["prompt_hash"] for s in samples["fleetmon_release_info"]} == \
        {"v1": "p1", "v2": "p1"}
    assert all(s.value == 1 for s in samples["fleetmon_release_info"])
    assert {s.labels["release"]: s.value for s in samples["fleetmon_release_identity_changes_total"]} == \
        {"v1": 0, "v2": 0}
    # v2 is redeployed with a new prompt under the same label; a third release is over the guard's cap
    store.apply(fold([trace(5, "v2", prompt_hash="p2", scaffold_hash="s1", config_hash="c9"),
                      trace(6, "v3", prompt_hash="p1")], slicer, NOW))
    samples = scrape(store)
    (v2,) = [s for s in samples["fleetmon_release_info"] if s.labels["release"] == "v2"]
    assert v2.labels == {"release": "v2", "model_id": "m1", "scaffold_hash": "s1", "prompt_hash": "p2",
                         "tool_schema_hash": "", "config_hash": "c9"}
    assert {s.labels["release"]: s.value for s in samples["fleetmon_release_identity_changes_total"]} == \
        {"v1": 0, "v2": 1}
    assert {s.labels["release"] for s in samples["fleetmon_release_info"]} == {"v1", "v2"}   # v3 folded: no series
    # an old trace of the first tuple arriving late neither changes the current tuple nor counts again
    store.apply(fold([trace(2, "v2", prompt_hash="p1", scaffold_hash="s1")], slicer, NOW))
    samples = scrape(store)
    (v2,) = [s for s in samples["fleetmon_release_info"] if s.labels["release"] == "v2"]
    assert v2.labels["prompt_hash"] == "p2"
    assert {s.labels["release"]: s.value for s in samples["fleetmon_release_identity_changes_total"]}["v2"] == 1


def test_a_label_past_the_tuple_cap_is_logged_once_and_keeps_counting(caplog):
    store = MemoryStore()
    for i in range(MAX_IDENTITIES_PER_RELEASE + 3):
        store.apply(fold([trace(i, "busy", prompt_hash=f"p{i}")], Slicer(), NOW))
    registry, _collector = build_registry(store, PRICES, now=lambda: NOW)
    with caplog.at_level(logging.WARNING, logger="fleetmon.exporter"):
        for _ in range(2):
            text = generate_latest(registry).decode()
    assert 'fleetmon_release_identity_changes_total{release="busy"} 34.0' in text
    warnings = [r for r in caplog.records if "more than 32 version tuples" in r.getMessage()]
    assert len(warnings) == 1 and "'busy'" in warnings[0].getMessage()
