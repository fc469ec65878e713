"""The exporter's fast paths give exactly what the plain definitions give (no services needed)."""

from __future__ import annotations

import math
import random

import orjson
import pytest

from monitor.aggregate import FLOAT_FIELDS, Aggregate, health
from monitor.exporter.families import HEALTH_GAUGES, QUANTILES
from monitor.exporter.figures import window_figures
from monitor.fold import fold
from monitor.slices import Slicer
from monitor.store.memory import MemoryStore
from monitor.store.redis.reads import SpanReader
from monitor.store.redis.wire import decode_hash, parse_flat
from tests.support.traces import NOW, PRICES, make_traces


def redis_strings(agg: Aggregate) -> dict[str, str]:
    """The hash as Redis holds it: HINCRBY integers, HINCRBYFLOAT floats, as strings."""
    return {k: repr(float(v)) if k in FLOAT_FIELDS else str(int(v)) for k, v in agg.to_dict().items()}


def encoded(fields: dict[str, str], rng: random.Random) -> bytes:
    """What the read scripts send (see exporter_wire._ENCODE), fields in a hash's arbitrary order."""
    items = list(fields.items())
    rng.shuffle(items)
    plain = [x for k, v in items if not (k.startswith("latency:") and k != "latency:z") for x in (k, v)]
    buckets = [x for k, v in items if k.startswith("latency:") and k != "latency:z" for x in (k[8:], v)]
    return orjson.dumps(plain) + b"\n" + " ".join(buckets).encode()


def aggregates(seed: int) -> list[Aggregate]:
    rng = random.Random(seed)
    traces = make_traces(400, seed=seed)
    out = [Aggregate(), Aggregate.of(traces[:1])]
    for _ in range(12):
        out.append(Aggregate.of(rng.sample(traces, rng.randint(1, 400))))
    out.append(Aggregate.of(t for t in traces if not t.success))  # no success: no cost per solved
    out.append(Aggregate.of(t for t in traces if t.latency_seconds is None))  # no latencies
    out.append(Aggregate.of(t for t in traces if not t.benign))  # no benign request: no over-refusal ratio
    return out


@pytest.mark.parametrize("seed", range(4))
def test_decoding_a_hash_is_from_dict(seed):
    rng = random.Random(seed)
    for agg in aggregates(seed):
        fields = redis_strings(agg)
        want = Aggregate.from_dict(fields)
        for got in (parse_flat([x for kv in fields.items() for x in kv]), decode_hash(encoded(fields, rng))):
            assert got.counts == want.counts and got.latency == want.latency and got.latency.count == want.latency.count
        # the buckets come in index order, which keeps the sketch's sorts cheap
        assert list(decode_hash(encoded(fields, rng)).latency.buckets) == sorted(want.latency.buckets)
    assert decode_hash(b"{}\n").counts == {} and decode_hash(b"{}\n").latency.count == 0  # cjson's empty array
    with pytest.raises(ValueError, match="counts >= 0"):
        decode_hash(b'["traces","1"]\n7 -2')


@pytest.mark.parametrize("seed", range(4))
def test_window_figures_are_the_health_vector(seed):
    for agg in aggregates(seed):
        if agg.traces == 0:
            continue
        h = health(agg, PRICES, NOW)
        lat, safety = h["latency_seconds"], h["safety"]
        want = [h["success"]["rate"], h["success"]["low"], h["success"]["high"], h["cost_per_solved_usd"],
                *(lat[key] for key, _q in QUANTILES), safety["harmful_action_rate"],
                safety["over_refusal_rate"] if safety["benign"] else None,
                safety["side_effect_rate"], *safety["side_effect_ci"], safety["side_effects_per_trace"],
                safety["prompt_injection_rate"], *safety["prompt_injection_ci"],
                h["steps"]["mean"], h["steps"]["solved_mean"]]
        want = [v if v is None or math.isfinite(v) else None for v in want]  # not finite: left out
        got = window_figures(agg, PRICES, NOW)
        assert len(got) == len(HEALTH_GAUGES)
        bounds = [i for i, spec in enumerate(HEALTH_GAUGES) if spec.name.endswith(("_lower", "_upper"))]
        assert len(bounds) == 6
        # exactly, but for the rate intervals: scipy-free in the exporter (monitor/exporter/rates.py)
        assert [v for i, v in enumerate(got) if i not in bounds] == [v for i, v in enumerate(want) if i not in bounds]
        assert [got[i] for i in bounds] == pytest.approx([want[i] for i in bounds], rel=1e-12, abs=0)


def test_without_a_redis_client_the_plain_store_methods_are_read():
    store = MemoryStore()
    store.apply(fold(make_traces(200, seed=3), Slicer(), NOW))
    reader = SpanReader(store)
    assert not reader.incremental
    ids = sorted(store.active_slices())
    totals, (five, hour) = reader.read([(NOW - 300, NOW + 60), (NOW - 3600, NOW + 60)], ids, ids)
    assert totals == store.totals(ids)
    assert hour == store.window_aggregates("1m", NOW - 3600, NOW + 60, ids)
    assert five == store.window_aggregates("1m", NOW - 300, NOW + 60, ids)
    with pytest.raises(ValueError, match="do not end together"):
        reader.read([(NOW - 300, NOW + 60), (NOW - 3600, NOW - 600)], ids, ids)


def test_groups_bound_the_slices_and_the_windows_a_group_expects_to_fetch(monkeypatch):
    """A slice without a cache entry expects every start of the range, one with an entry a single
    window; a group closes before it would pass GROUP_WINDOWS or GROUP_SLICES, and keeps the order."""
    import monitor.store.redis.reads as reads

    monkeypatch.setattr(reads, "GROUP_SLICES", 4)
    monkeypatch.setattr(reads, "GROUP_WINDOWS", 130)
    reader = SpanReader(MemoryStore())
    ids = [f"s{i}" for i in range(12)]
    reader._spans = {sid: object() for sid in ids[5:]}  # s5 … s11 cached
    groups = reader._groups(ids, 61)
    assert groups == [["s0", "s1"], ["s2", "s3"], ["s4", "s5", "s6", "s7"], ["s8", "s9", "s10", "s11"]]
    assert reader._groups([], 61) == []
    assert reader._groups(["s0"], 500) == [["s0"]]  # one slice past the bound still gets its group
