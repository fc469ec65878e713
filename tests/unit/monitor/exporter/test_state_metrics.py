"""``fleetmon_state_generation`` and ``fleetmon_state_restores_total`` come from the store's generation."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from monitor.delta import BatchDelta
from monitor.exporter.collector import build_registry
from monitor.store.base import Expected
from monitor.store.memory import MemoryStore
from tests.support.traces import NOW, PRICES


def values(store: MemoryStore) -> dict[str, float]:
    registry, _collector = build_registry(store, PRICES, now=lambda: NOW)
    wanted = {"fleetmon_state_generation", "fleetmon_state_restores_total"}
    return {sample.name: sample.value for family in text_string_to_metric_families(generate_latest(registry).decode())
            for sample in family.samples if sample.name in wanted}


def test_the_generation_is_the_first_applys_and_changes_when_the_state_is_lost():
    store = MemoryStore()
    assert values(store) == {"fleetmon_state_generation": 0, "fleetmon_state_restores_total": 0}
    store.apply_verified(BatchDelta(), [("t:0", 0, 9)], None, Expected(), "1796000000123")
    assert values(store) == {"fleetmon_state_generation": 1796000000123, "fleetmon_state_restores_total": 0}
    store.apply_verified(BatchDelta(), [("t:0", 10, 19)], None, Expected(), "1796000000999")  # has one: kept
    assert values(store)["fleetmon_state_generation"] == 1796000000123

    store.lose_state()
    store.count_restore()  # the worker that noticed, before its next apply writes the new generation
    store.apply_verified(BatchDelta(), [("t:0", 0, 19)], None, Expected(), "1796000005000")
    assert values(store) == {"fleetmon_state_generation": 1796000005000, "fleetmon_state_restores_total": 1}
