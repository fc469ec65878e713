import pytest

from monitor.delta import BatchDelta
from monitor.fold import fold
from monitor.pairing import Half, PairedCounts, Pairer, pair_key, parse_pair_key
from monitor.pricing import PriceMap
from monitor.schema import validate
from monitor.slices import Slicer
from monitor.store.memory import MemoryStore
from tests.support.paired_sim import paired_counts_from_pairs

PRICES = PriceMap.load()
NOW = 1_750_000_000.0


def half(i, arm, release, ok, **kw):
    record = {"trace_id": f"{arm}-{i}", "ts": NOW - 100 + i, "model_id": release, "release": release,
              "arm": arm, "pair_id": f"p{i}", "ok": ok, "task_type": "refund" if i % 2 else "faq",
              "tokens_in": 1000, "latency_ms": 1000 + 10 * i}
    record.update(kw)
    return validate(record)


def test_pairs_join_in_any_order_into_paired_counts():
    base_ok = [True, True, False, False, True, True]
    cand_ok = [True, False, True, False, False, True]
    traces = []
    for i, (b, c) in enumerate(zip(base_ok, cand_ok)):
        pair = [half(i, "baseline", "v1", b), half(i, "shadow", "v2", c, tokens_in=2000)]
        traces += pair if i % 2 else pair[::-1]
    pairer = Pairer(PRICES)
    delta = pairer.join(traces, Slicer(), NOW, fold(traces, Slicer(), NOW))
    assert pairer.pending == {} and delta.counters["pairs"] == 6
    stored = {parse_pair_key(key)[2]: f for key, f in delta.paired_evidence.items()}
    expected = paired_counts_from_pairs(base_ok, cand_ok)
    whole = stored[""]
    assert (whole["n_pairs"], whole.get("b", 0), whole.get("c", 0)) == (expected.n_pairs, expected.b, expected.c)
    assert whole["cost_delta_sum"] == pytest.approx(6 * 1000 * 3 / 1e6)
    assert stored["task_type=refund"]["n_pairs"] == 3 and stored["task_type=faq"]["n_pairs"] == 3
    assert PairedCounts.from_dict(whole).n_pairs == 6


def test_half_waits_across_batches_and_store_round_trip():
    pairer = Pairer(PRICES)
    store = MemoryStore()
    batch = [half(1, "baseline", "v1", True)]
    first = pairer.join(batch, Slicer(), NOW, fold(batch, Slicer(), NOW))
    store.apply(first, "t:0", 0, 0)
    assert list(store.pending("t:0")) == ["p1"]
    # A restarted worker restores the waiting half from the store.
    restarted = Pairer(PRICES)
    restarted.load(store.pending("t:0"))
    batch = [half(1, "shadow", "v2", False)]
    second = restarted.join(batch, Slicer(), NOW, fold(batch, Slicer(), NOW))
    store.apply(second, "t:0", 1, 1)
    assert store.pending("t:0") == {}
    (_baseline, _candidate, _sid, fields), *_ = [(*parse_pair_key(key), f)
                                                 for key, f in store.paired_evidence().items()]
    assert fields["b"] == 1 and fields["n_pairs"] == 1


def test_expiry_and_duplicate_halves_are_counted():
    pairer = Pairer(PRICES, ttl_seconds=60)
    batch = [half(1, "baseline", "v1", True), half(1, "baseline", "v1", True)]
    delta = pairer.join(batch, Slicer(), NOW, fold(batch, Slicer(), NOW))
    assert delta.counters["pairs_duplicate_half"] == 1 and delta.counters.get("pairs_expired", 0) == 1
    assert "p1" in delta.pending_del and "p1" not in delta.pending_set


def test_canary_and_unpaired_traces_are_not_paired():
    pairer = Pairer(PRICES)
    traces = [half(1, "canary", "v2", True), validate({"trace_id": "x", "ts": NOW, "model_id": "m", "ok": True})]
    delta = pairer.join(traces, Slicer(), NOW, fold(traces, Slicer(), NOW))
    assert pairer.pending == {} and not delta.paired_evidence


def test_keys_round_trip_with_awkward_release_names():
    key = pair_key("ft:gpt-4.1:a", "v2/b c", "tenant=x%7Cy")
    assert parse_pair_key(key) == ("ft:gpt-4.1:a", "v2/b c", "tenant=x%7Cy")
    h = Half("baseline", "v1", True, False, 0.1, None, NOW, ("",), False, False)
    assert Half.from_json(h.to_json()) == h


def test_batch_delta_merge_keeps_pending_consistent():
    a, b = BatchDelta(), BatchDelta()
    a.pending_set["p"] = "x"
    b.pending_del.add("p")
    assert a.merge(b).pending_set == {} and a.pending_del == {"p"}


def test_over_refusal_cells_fold_merge_and_old_state_loads():
    # (baseline benign, baseline refused, candidate benign, candidate refused) per pair
    rows = [(True, True, True, False), (True, False, True, True), (True, False, True, True),
            (True, True, True, True), (False, True, False, False), (True, False, True, False)]
    traces = []
    for i, (bb, br, cb, cr) in enumerate(rows):
        traces += [half(i, "baseline", "v1", True, benign=bb, refused=br),
                   half(i, "shadow", "v2", True, benign=cb, refused=cr)]
    pairer = Pairer(PRICES)
    delta = pairer.join(traces, Slicer(), NOW, fold(traces, Slicer(), NOW))
    whole = PairedCounts.from_dict(next(f for key, f in delta.paired_evidence.items() if parse_pair_key(key)[2] == ""))
    assert (whole.benign_pairs, whole.refusal_b, whole.refusal_c) == (5, 1, 2)
    assert whole.candidate_over_refusals == 3 and whole.candidate_benign == 5
    one = PairedCounts(n_pairs=2, benign_pairs=2, refusal_c=1)
    assert whole.merge(one).refusal_c == 3 and whole.merge(one).benign_pairs == 7
    assert PairedCounts.from_dict({"n_pairs": "4", "b": "1"}) == PairedCounts(n_pairs=4, b=1)  # fields added later
    assert "refusal_b" not in PairedCounts(n_pairs=1).hash_fields()  # zero counts are not written
    with pytest.raises(ValueError, match="refusal_b"):
        PairedCounts(n_pairs=3, benign_pairs=1, refusal_b=1, refusal_c=1)
