"""alerts.identity: every comparison page says what changed between the two releases' version tuples."""

from __future__ import annotations

from alerts.engine import AlertEngine
from alerts.evidence import Comparison
from alerts.identity import EVIDENCE_KEYS, annotate
from alerts.policy import Finding
from monitor.delta import BatchDelta
from monitor.fold import fold
from monitor.identity import encode
from monitor.pairing import PairedCounts, pair_key
from monitor.schema import validate
from monitor.slices import WHOLE_FLEET, Slicer, comparison_slices, slice_id
from monitor.store.memory import MemoryStore
from tests.support.validity import RecordingNotifier

T0 = 1_700_000_040.0


def finding(baseline: str = "v1", candidate: str = "v2") -> Finding:
    return Finding("success_regression", Comparison(baseline, candidate, "shadow"), WHOLE_FLEET, "critical", True,
                   True, True, 40.0, 0.1, 0.05, 1.0, 0.02, 0.05, 500, 80, 30, {"test": "betting"})


def test_annotate_names_the_components_that_differ_and_keeps_the_decision():
    stored = {"v1": {encode(("m1", "s1", "p1", "t1", "c1")): 10.0},
              "v2": {encode(("m1", "s1", "p1", "t1", "c1")): 5.0, encode(("m1", "s1", "p2", "t1", "c1")): 9.0}}
    (out,) = annotate([finding()], stored)
    assert out.detail["changed"] == ["prompt_hash"]
    assert out.detail["candidate_identity"]["prompt_hash"] == "p2"      # the latest tuple of the label
    assert out.detail["baseline_identity"] == {"model_id": "m1", "scaffold_hash": "s1", "prompt_hash": "p1",
                                               "tool_schema_hash": "t1", "config_hash": "c1"}
    assert out.detail["identity_changes"] == {"baseline": 0, "candidate": 1}
    assert out.detail["test"] == "betting" and (out.fires, out.e_value) == (True, 40.0)
    (unknown,) = annotate([finding(candidate="v9")], stored)
    assert unknown.detail["candidate_identity"] is None and unknown.detail["changed"] == []
    assert set(EVIDENCE_KEYS) <= set(unknown.detail)


def test_a_page_from_the_engine_carries_both_identities_and_what_changed():
    store, notifier = MemoryStore(), RecordingNotifier()
    traces = [validate({"trace_id": f"{release}-{i}", "ts": T0 - 30, "model_id": "m1", "ok": True,
                        "release": release, "prompt_hash": prompt, "config_hash": config})
              for i, (release, prompt, config) in enumerate([("v1", "p1", "c1"), ("v2", "p2", "c2")])]
    store.apply(fold(traces, Slicer(), T0))
    engine = AlertEngine(store, notifier)
    for minute in range(5):
        delta = BatchDelta()
        for key in comparison_slices((("task_type", "refund"),)):
            delta.add_paired_evidence(pair_key("v1", "v2", slice_id(key)),
                                      PairedCounts(n_pairs=300, b=90, c=15).hash_fields())
        store.apply(delta)
        engine.tick(T0 + 60.0 * (minute + 1))
    firing = [e for e in notifier.events if e.status == "firing" and e.evidence["kind"] == "success_regression"]
    assert len(firing) == 1
    evidence = firing[0].evidence
    assert evidence["changed"] == ["prompt_hash", "config_hash"]
    assert ("Changed between the releases: prompt_hash, config_hash (confounded: 2 components differ)"
            in firing[0].annotations["description"])
    assert evidence["baseline_identity"]["prompt_hash"] == "p1"
    assert evidence["candidate_identity"]["config_hash"] == "c2"
    # what Alertmanager gets re-posted carries it too
    assert all(a["evidence"]["changed"] == ["prompt_hash", "config_hash"] for a in engine.firing())
