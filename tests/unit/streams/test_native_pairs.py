"""Shadow pairs on the native path against the Python path, record for record.

The native fold hands the pairer the fields of each half it read
(:data:`streams.native.NativeHalf`); :func:`streams.batch.pair_batch` must
then make exactly what it makes of the same records read by Python: the
same pair counts (``pairs``, ``pairs_duplicate_half``, ``pairs_expired``),
the same waiting halves with the same stored text, the same evidence
(every :class:`monitor.pairing.PairedCounts` field, the capped sums
included, compared bit for bit) — across several batches, with the waiting
halves persisted and reloaded between them (a restart), and with each batch
read by either path, so a worker of the previous version (pairs on the
Python path) and this one interoperate. The native path joins natively
(:func:`streams.native.join_part`) or hands Python the halves' rows (the
previous session's way, ``native rows``); both are checked against Python.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import fields
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streams.batch
from monitor.delta import BatchDelta
from monitor.pairing import Caps, Half, PairedCounts, Pairer, read_paired_evidence, record_pair
from monitor.pricing import Price, PriceMap
from monitor.slices import CardinalityGuard, Slicer
from monitor.windows import Resolution
from streams.batch import decode_batch, fold_batch, pair_batch
from streams.native import NativeFolder, PairEvidence, join_part, pair_evidence_fields
from tests.support.batches import Rec

NOW = 1_800_000_000.0
DIMENSIONS = ("release", "arm", "task_type", "tenant", "model_id", "team")   # "team" is a tag
RESOLUTIONS = (Resolution("1m", 60, 3600), Resolution("1h", 3600, 86400))
TTL_SECONDS = 900.0
CAPS = Caps(cost_usd=0.004, latency_seconds=2.0)    # small, so that values fall on both sides
PRICES = PriceMap([Price("m1", 0.0, 3.0, 15.0, 0.3), Price("m1", NOW - 1800, 2.5, 12.0, 0.25),
                   Price("*", 0.0, 1.1, 4.4, 0.11)])
FLAT_PRICES = PriceMap([Price("m1", 0.0, 3.0, 15.0, 0.3), Price("*", 0.0, 1.1, 4.4, 0.11)])   # no change in time



PATHS = {"python": None, "native": NativeFolder(DIMENSIONS, RESOLUTIONS, max_record_bytes=4096),
         "native rows": NativeFolder(DIMENSIONS, RESOLUTIONS, max_record_bytes=4096, native_join=False),
         "old native": NativeFolder(DIMENSIONS, RESOLUTIONS, max_record_bytes=4096, pair_id_slow=True)}


def bits(value: object) -> object:
    """A value with floats replaced by their bit pattern (so 0.0 and -0.0, or two NaNs, are told apart)."""
    return struct.pack("<d", value) if isinstance(value, float) else value


def run(batches: list[list[list[bytes | None]]], paths: list[str], pending: dict[int, dict[str, str]],
        prices: PriceMap = PRICES, joins: list[bool] | None = None):
    """Decode, fold and pair ``batches`` (each a list of partitions' values), batch i read by ``paths[i]``.

    Each batch starts from pairers loaded from the waiting halves' text the previous one left (as a
    restarted worker would); returns per batch the delta and the waiting-halves changes, and the end state.
    ``joins`` collects what each native join attempt returned (True: joined natively).
    """
    stored = {f"t:{p}": dict(halves) for p, halves in pending.items()}
    slicer = Slicer(DIMENSIONS, CardinalityGuard(3))     # a small cap: the guarded key must match too
    results = []
    offset = 0
    for parts, path in zip(batches, paths, strict=True):
        spec = []
        for p, values in enumerate(parts):
            spec.append(("t", p, [Rec(offset + i, v) for i, v in enumerate(values)]))
            offset += len(values)
        batch = decode_batch(spec, NOW, max_record_bytes=4096, native=PATHS[path])
        delta = fold_batch(batch, slicer, NOW, RESOLUTIONS)
        pairers = {}
        for part in batch.parts:
            pairers[part.source] = pairer = Pairer(prices, TTL_SECONDS, CAPS)
            pairer.load(stored.get(part.source, {}))

        def joined(*args):
            done = join_part(*args)
            if joins is not None:
                joins.append(done is not None)
            return done

        with mock.patch.object(streams.batch, "join_part", joined):
            changes = pair_batch(batch, pairers, slicer.key, NOW, delta, slicer.key_for)
        for source, (started, stopped) in changes.items():
            halves = stored.setdefault(source, {})
            for pair_id in stopped:
                halves.pop(pair_id, None)
            halves.update(started)
            assert {pid: half.to_json() for pid, half in pairers[source].pending.items()} == halves
        results.append((delta, changes, batch))
    return results, stored


def evidence(delta: BatchDelta) -> dict[str, dict[str, object]]:
    return {key: {name: bits(value) for name, value in fields.items()} for key, fields in delta.paired_evidence.items()}


def assert_same(batches, paths_a, paths_b, pending=None, prices=PRICES, joins=None) -> None:
    pending = pending or {}
    (results_a, stored_a) = run(batches, paths_a, pending, prices)
    (results_b, stored_b) = run(batches, paths_b, pending, prices, joins)
    for (delta_a, changes_a, _), (delta_b, changes_b, _) in zip(results_a, results_b, strict=True):
        assert delta_a.counters == delta_b.counters
        assert changes_a == changes_b                      # the waiting halves' text, started and stopped
        assert evidence(delta_a) == evidence(delta_b)      # every hash field, bit for bit
        for a, b in zip(read_paired_evidence(delta_a.paired_evidence), read_paired_evidence(delta_b.paired_evidence),
                        strict=True):
            assert a == b
            for quantity in ("cost", "latency"):           # the capped sums the engine reads
                assert [bits(x) for x in a.counts.capped(quantity)] == [bits(x) for x in b.counts.capped(quantity)]
    assert stored_a == stored_b


# -- records: pairs on the edges ---------------------------------------------------------------------------
ALIAS = "gen_ai.usage.input_tokens"    # renamed in Python: sends a valid paired trace down the Python path
floats = st.one_of(st.floats(0, 5, allow_nan=False), st.sampled_from([0, 1, 2, -0.0, 0.0, 1e-300, 0.1, 1e6, 1e6 + 1]))
latency_ms = st.one_of(st.none(), st.floats(0, 10_000), st.sampled_from([0, 1, 2000, 2000.0001, 604_800_000,
                                                                      604_800_001, -1, "5"]))
paired = st.fixed_dictionaries(
    {"trace_id": st.sampled_from(["a", "b"]), "ts": st.floats(NOW - 2 * TTL_SECONDS, NOW),
     "model_id": st.sampled_from(["m1", "m2", "m1"]),
     "pair_id": st.sampled_from(["p1", "p2", "p3", "", "é|=%:x", "p1"]),
     "arm": st.sampled_from(["baseline", "shadow", "canary", "baseline", "shadow"])},
    optional={"outcome": st.sampled_from(["success", "failure", "oops"]), "ok": st.sampled_from([True, False, 1, 2]),
              "release": st.sampled_from(["r1", "r2", "", None, "r3", "r4"]),
              "tenant": st.sampled_from(["t1", "t2", "t3", "t4", ""]), "task_type": st.sampled_from(["code", "chat"]),
              "team": st.sampled_from(["red", "blue", 7]), "tags": st.just({"team": "green"}),
              "tokens_in": st.integers(0, 10**6), "tokens_out": st.sampled_from([0, 7, 1000, 10**12, 10**12 + 1]),
              "tokens_cached_in": st.integers(0, 300), "fees_usd": floats, "latency_ms": latency_ms,
              "harmful_action": st.booleans(), "refused": st.booleans(), "benign": st.sampled_from([True, False, None]),
              "user_signal": st.sampled_from(["up", "down"]), "recontact_24h": st.booleans()})


@st.composite
def encoded(draw) -> bytes | None:
    record = draw(paired)
    if draw(st.integers(0, 5)) == 0 and "tokens_in" in record:
        record[ALIAS] = record.pop("tokens_in")
    kind = draw(st.sampled_from(["json"] * 12 + ["bad", "none", "duplicate"]))
    text = json.dumps(record)
    if kind == "bad":
        return text[:-1].encode()
    if kind == "none":
        return None
    if kind == "duplicate":   # a duplicate key: Python rejects it with the reason
        text = text[:-1] + ', "pair_id": "p2"}'
    return text.encode()


@st.composite
def waiting(draw) -> dict[int, dict[str, str]]:
    """Halves left waiting by an earlier batch, as their stored text (some past the TTL, some of the same arm)."""
    out: dict[int, dict[str, str]] = {}
    for p in range(draw(st.integers(0, 2))):
        out[p] = {}
        for pair_id in draw(st.lists(st.sampled_from(["p1", "p2", "p3", "old"]), max_size=3, unique=True)):
            arm = draw(st.sampled_from(["baseline", "shadow"]))
            ts = draw(st.floats(NOW - 3 * TTL_SECONDS, NOW))
            latency = draw(st.one_of(st.none(), st.floats(0, 5)))
            out[p][pair_id] = json.dumps([arm, draw(st.sampled_from(["r1", "r9"])), draw(st.booleans()),
                                          draw(st.booleans()), draw(st.floats(0, 0.01)), latency, ts,
                                          ["", "tenant=t1"], draw(st.booleans()), False], separators=(",", ":"))
    return out


batches = st.lists(st.lists(st.lists(encoded(), max_size=14), min_size=1, max_size=3), min_size=1, max_size=3)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches, waiting())
def test_native_halves_pair_exactly_as_python_traces(parts, pending):
    assert_same(parts, ["python"] * len(parts), ["native"] * len(parts), pending)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches, waiting(), st.data())
def test_workers_of_either_version_continue_each_others_halves(parts, pending, data):
    """Each batch read by the previous version (pairs on the Python path) or by this one, after a restart."""
    mixed = [data.draw(st.sampled_from(["python", "native", "native rows", "old native"])) for _ in parts]
    assert_same(parts, ["python"] * len(parts), mixed, pending)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches, waiting())
def test_the_native_join_decides_every_part_it_takes(parts, pending):
    """With one price per model over time, no part falls back to Python (only parts with a paired
    trace read by Python are not offered to the native join), and the result is Python's."""
    joins: list[bool] = []
    assert_same(parts, ["python"] * len(parts), ["native"] * len(parts), pending, FLAT_PRICES, joins)
    assert all(joins)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["p1", "p2", "p3", "p4"]), st.sampled_from(["baseline", "shadow"]),
                          st.sampled_from(["r1", "r2", "r/é:1"]), st.floats(NOW - 2 * TTL_SECONDS, NOW)),
                max_size=40),
       st.integers(1, 4), st.integers(1, 3))
def test_pair_streams_split_over_batches_and_partitions(stream, n_batches, n_parts):
    """A random stream of halves dealt round-robin to partitions and cut into batches, restarts between."""
    values = [half(pid, arm, ts, release=release) for pid, arm, release, ts in stream]
    cut = [values[i::n_batches] for i in range(n_batches)]
    batches = [[chunk[p::n_parts] for p in range(n_parts)] for chunk in cut]
    for prices in (PRICES, FLAT_PRICES):
        assert_same(batches, ["python"] * n_batches, ["native"] * n_batches, prices=prices)


# -- hand-picked -------------------------------------------------------------------------------------------
BASE = {"trace_id": "t", "model_id": "m1", "outcome": "success", "tokens_in": 900, "tokens_cached_in": 100,
        "tokens_out": 300, "latency_ms": 1500.0, "release": "r1", "tenant": "t1"}


def half(pair_id: str, arm: str, ts: float, **changes) -> bytes:
    return json.dumps({**BASE, "pair_id": pair_id, "arm": arm, "ts": ts, **changes}).encode()


def test_paired_traces_stay_on_the_native_path():
    values = [half("p1", "baseline", NOW - 30), half("p1", "shadow", NOW - 29, release="r2", latency_ms=2500.5),
              half("p2", "shadow", NOW - 20)]
    (results, stored) = run([[values]], ["native"], {})
    delta, _, batch = results[0]
    assert batch.parts[0].native_count == 3 and not batch.parts[0].traces
    assert [h[1] for h in batch.parts[0].native_halves()] == ["p1", "p1", "p2"]
    assert delta.counters["pairs"] == 1
    assert list(stored["t:0"]) == ["p2"]
    ((key, fields),) = [(k, f) for k, f in delta.paired_evidence.items() if k.endswith(":")]
    assert key == "pair:r1:r2:"
    counts = PairedCounts.from_dict(fields)
    assert counts.n_pairs == 1 and math.isclose(counts.latency_delta_sum, 1.0005)
    assert counts.latency_over_cap == 1 and counts.capped_latency_b == 1.5 and counts.capped_latency_c == 2.0
    assert_same([[values]], ["python"], ["native"])


def test_halves_read_by_both_paths_join_in_position_order():
    """A twin read by Python (an OTel alias) between native halves of the same pair id."""
    values = [half("p1", "baseline", NOW - 30), half("p1", "shadow", NOW - 29, **{ALIAS: 5}),
              half("p1", "shadow", NOW - 28), half("p1", "shadow", NOW - 27), half("p1", "baseline", NOW - 26)]
    (results, _) = run([[values]], ["native"], {})
    delta, _, batch = results[0]
    assert batch.parts[0].native_count == 4 and len(batch.parts[0].traces) == 1
    assert delta.counters == {"traces": 5, "pairs": 2, "pairs_duplicate_half": 1}
    assert_same([[values]], ["python"], ["native"])


def test_a_half_waiting_past_the_ttl_expires_on_both_paths():
    values = [half("p1", "baseline", NOW - 2 * TTL_SECONDS), half("p9", "baseline", NOW - 10)]
    (results, stored) = run([[values], [[half("p1", "shadow", NOW - 5)]]], ["native", "native"], {})
    assert results[0][0].counters.get("pairs_expired") == 1
    assert "pairs" not in results[1][0].counters and set(stored["t:0"]) == {"p1", "p9"}
    assert_same([[values], [[half("p1", "shadow", NOW - 5)]]], ["python", "python"], ["native", "old native"])
    assert_same([[values], [[half("p1", "shadow", NOW - 5)]]], ["python", "python"], ["native rows", "native"])


def test_a_price_change_within_the_batch_sends_the_part_to_python():
    """m1's price changes at NOW - 1800: halves on both sides of it are priced one by one in Python."""
    values = [half("p1", "baseline", NOW - 1900), half("p1", "shadow", NOW - 10), half("p2", "baseline", NOW - 5)]
    joins: list[bool] = []
    assert_same([[values]], ["python"], ["native"], joins=joins)
    assert joins == [False]
    joins.clear()
    assert_same([[values[1:]]], ["python"], ["native"], joins=joins)
    assert joins == [True]


def test_the_native_join_completes_halves_the_pairer_held():
    """A half waiting from an earlier batch (stored text) completes, and duplicates, in the native join."""
    stored = {0: {"p1": Half("baseline", "r1", True, False, 0.002, 1.5, NOW - 60, ("", "tenant=t1"), True,
                             False).to_json()}}
    values = [half("p1", "baseline", NOW - 30), half("p1", "shadow", NOW - 20, outcome="failure"),
              half("p1", "baseline", NOW - 10)]
    joins: list[bool] = []
    (results, end) = run([[values]], ["native"], stored, FLAT_PRICES, joins)
    assert joins == [True]
    delta, _, _ = results[0]
    assert delta.counters["pairs"] == 1 and delta.counters["pairs_duplicate_half"] == 1
    assert set(end["t:0"]) == {"p1"} and json.loads(end["t:0"]["p1"])[6] == NOW - 10
    ((key, fields),) = [(k, f) for k, f in delta.paired_evidence.items() if k.endswith(":")]
    assert key == "pair:r1:r1:" and fields["b"] == 1
    assert_same([[values]], ["python"], ["native"], stored, FLAT_PRICES)


def test_the_native_join_refuses_a_delta_that_is_not_fresh():
    batch = decode_batch([("t", 0, [Rec(0, half("p1", "baseline", NOW - 30))])], NOW, native=PATHS["native"])
    delta = BatchDelta()
    delta.stop_waiting("p0")
    with pytest.raises(ValueError, match="fresh delta"):
        join_part(batch.parts[0].joined, 0, Pairer(PRICES, TTL_SECONDS, CAPS), mock.Mock(), delta)


def test_native_halves_need_the_raw_key():
    (results, _) = run([[[half("p1", "baseline", NOW - 30)]]], ["native"], {})
    batch = results[0][2]
    with pytest.raises(ValueError, match="needs key_for"):
        pair_batch(batch, {"t:0": Pairer(PRICES, TTL_SECONDS, CAPS)}, Slicer(DIMENSIONS).key, NOW, BatchDelta())


# -- the native evidence sums against record_pair ------------------------------------------------------------
edge_floats = st.one_of(st.floats(0, 1e6, allow_nan=False), st.sampled_from([0.0, -0.0, 5e-324, 1e-300, 0.004, 2.0,
                                                                             2.0000000000000004, 1e300]))
sides = st.tuples(st.booleans(), st.booleans(), edge_floats, st.one_of(st.none(), edge_floats),
                  st.booleans(), st.booleans())


def a_half(arm: str, release: str, side, slices) -> Half:
    success, harmful, cost, latency, benign, over = side
    return Half(arm, release, success, harmful, cost, latency, NOW, slices, benign, over and benign)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(sides, sides, st.sampled_from([("", "tenant=t1"), ("",), ("", "tenant=t2", "team=x")]),
                          st.sampled_from(["r1", "r2"])), min_size=1, max_size=40),
       st.sampled_from([CAPS, Caps(), Caps(1e-300, 1e300)]))
def test_native_sums_equal_record_pair_bit_for_bit(pairs, caps):
    python, native = BatchDelta(), BatchDelta()
    sums = PairEvidence(caps)
    for base_side, cand_side, slices, release in pairs:
        base, cand = a_half("baseline", release, base_side, slices), a_half("shadow", "r9", cand_side, slices)
        try:
            record_pair(base, cand, python, caps)
        except ValueError as exc:   # a square past the float range: both refuse the pair, with one reason
            with pytest.raises(ValueError) as native_exc:
                sums.record(base, cand, native, caps)
            assert str(native_exc.value) == str(exc)
            continue
        sums.record(base, cand, native, caps)
    sums.flush(native)
    assert python.counters == native.counters
    assert evidence(python) == evidence(native)
    assert {k: {n: type(v) for n, v in f.items()} for k, f in python.paired_evidence.items()} == \
        {k: {n: type(v) for n, v in f.items()} for k, f in native.paired_evidence.items()}   # ints stay ints


def test_the_native_sums_know_exactly_the_paired_counts_fields():
    assert pair_evidence_fields() == {f.name for f in fields(PairedCounts)}


def test_native_sums_refuse_what_would_change_the_order_or_the_caps():
    sums = PairEvidence(CAPS)
    side = (True, False, 0.001, 1.0, False, False)
    with pytest.raises(ValueError, match="capped at"):
        sums.record(a_half("baseline", "r1", side, ("",)), a_half("shadow", "r2", side, ("",)), BatchDelta(), Caps())
    delta = BatchDelta()
    delta.add_paired_evidence("pair:r1:r2:", {"n_pairs": 1})
    with pytest.raises(ValueError, match="without paired evidence"):
        sums.flush(delta)


@settings(max_examples=200, deadline=None)
@given(sides, st.sampled_from(["baseline", "shadow"]), st.text(max_size=6), st.lists(st.text(max_size=4), max_size=3),
       st.floats(0, 1e12))
def test_a_waiting_halfs_stored_text_is_unchanged(side, arm, release, slices, ts):
    """The text a worker of the previous version wrote (json.dumps, compact separators) and reads back."""
    success, harmful, cost, latency, benign, over = side
    h = Half(arm, release, success, harmful, cost, latency, ts, tuple(slices), benign, over)
    text = json.dumps([arm, release, success, harmful, cost, latency, ts, list(slices), benign, over],
                      separators=(",", ":"))
    assert h.to_json() == text and Half.from_json(text) == h


@pytest.mark.parametrize("path", ["python", "native", "native rows"])
def test_only_the_halves_the_store_holds_are_deleted(path):
    """A pair id that starts and stops waiting within a batch (paired, or expired) is no change to the
    store; one the store held (an earlier batch's half) is deleted; the rest wait, with their text."""
    stored = {0: {"p0": Half("baseline", "r1", True, False, 0.002, 1.5, NOW - 60, ("",), True, False).to_json(),
                  "p8": Half("shadow", "r1", True, False, 0.002, 1.5, NOW - 3 * TTL_SECONDS, ("",), True,
                             False).to_json()}}
    values = [half("p1", "baseline", NOW - 30), half("p1", "shadow", NOW - 20),        # paired within the batch
              half("p2", "baseline", NOW - 2 * TTL_SECONDS),                           # started, then expired
              half("p0", "shadow", NOW - 10),                                          # completes a stored half
              half("p3", "baseline", NOW - 5)]                                         # waits
    (results, end) = run([[values]], [path], stored, FLAT_PRICES)
    delta, changes, _ = results[0]
    assert delta.counters["pairs"] == 2 and delta.counters["pairs_expired"] == 2
    started, stopped = changes["t:0"]
    assert stopped == {"p0", "p8"} and list(started) == ["p3"]
    assert set(end["t:0"]) == {"p3"}
