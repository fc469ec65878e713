"""``fleetmon run``'s pipeline over slice groupings: the config's groupings and budgets reach its slicer, and
its release health reads one grouping (each trace once), never the sum of several."""

from __future__ import annotations

import pytest

from monitor.config import load
from monitor.groupings import FOLDED_COUNTER_PREFIX
from monitor.run.pipeline import Pipeline
from monitor.store.memory import MemoryStore
from tests.support.validity import RecordingNotifier

NOW = 1_800_000_000.0


def _pipeline(tmp_path, text: str = "") -> Pipeline:
    path = tmp_path / "f.toml"
    path.write_text(text)
    return Pipeline(load(path, env={}), MemoryStore(), RecordingNotifier())


def _records(n: int) -> list[tuple[str, dict]]:
    return [(f"line {i}", {"trace_id": f"t{i}", "ts": NOW - 60, "model_id": "m", "release": f"r{i % 2}",
                           "task_type": f"k{i % 3}", "tenant": f"n{i % 5}", "ok": i % 4 != 0}) for i in range(n)]


def test_release_health_counts_each_trace_once(tmp_path):
    pipeline = _pipeline(tmp_path)
    pipeline.feed(_records(60), NOW)
    by_release = pipeline.release_health(NOW)
    assert [(group, h["traces"]) for group, h in by_release] == [
        ({"release": "r0", "arm": "baseline"}, 30), ({"release": "r1", "arm": "baseline"}, 30)]
    by_tenant = pipeline.release_health(NOW, group_by=("release", "tenant"))
    assert sum(h["traces"] for _, h in by_tenant) == 60 and len(by_tenant) == 10
    with pytest.raises(ValueError, match=r"group_by \['tenant', 'locale'\] is not within any slice grouping"):
        pipeline.release_health(NOW, group_by=("tenant", "locale"))


def test_the_configs_groupings_and_budgets_reach_the_pipeline(tmp_path):
    pipeline = _pipeline(tmp_path, '[slices]\ngroupings = [["tenant", "locale"]]\n'
                                   '[slices.grouping_budgets]\ntenant = 3\n')
    pipeline.feed(_records(60), NOW)
    counters = pipeline.store.counters()
    # 10 (release, tenant) combinations, 3 admitted: the traces of the other 7 are folded
    assert counters[FOLDED_COUNTER_PREFIX + "tenant"] == 60 - 3 * 6
    assert FOLDED_COUNTER_PREFIX + "tenant,locale" not in counters  # 10 combinations, budget 1,000
    assert len(pipeline.release_health(NOW, group_by=("tenant", "locale"))) == 5
