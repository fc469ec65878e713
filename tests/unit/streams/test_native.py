"""The native fast path against the Python path, record for record.

The native fold (``fleetmon_native``, :mod:`streams.native`) may only ever
differ from Python by being faster: for any batch, decoding with it must give
the same rejections (with Python's reasons) and the same delta — every
window, total, counter, sketch bucket and latest event time, float sums
included bit for bit, since both place the same groups in the same order
(:func:`monitor.fold.place_groups`: its sums depend on the ordered groups
alone). Random records come (``tests/support/native_records.py``)
from hypothesis, built to sit on the edges of the schema (wrong types,
negative and huge numbers, -0, escapes, duplicate keys, aliases, the compact
form, tags); a list of hand-picked ones covers what random search may miss.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from monitor.schema import KNOWN_FIELDS
from monitor.slices import CardinalityGuard, Slicer
from streams.batch import decode_batch, fold_batch
from streams.native import NativeFolder, known_fields
from tests.support.batches import Rec
from tests.support.native_records import DIMENSIONS, EDGES, NOW, RESOLUTIONS, encoded, plain, variant


def folder(max_record_bytes: int = 4096, pair_id_slow: bool = False) -> NativeFolder:
    return NativeFolder(DIMENSIONS, RESOLUTIONS, max_record_bytes=max_record_bytes, pair_id_slow=pair_id_slow)


def both_ways(parts: list[list[bytes | None]], *, max_record_bytes: int = 4096, pair_id_slow: bool = False,
              max_values: int = 3):
    """Decode and fold ``parts`` (one list of values per partition) both ways; returns both results."""
    out = []
    for native in (None, folder(max_record_bytes, pair_id_slow)):
        offset = 0
        spec = []
        for p, values in enumerate(parts):
            spec.append(("t", p, [Rec(offset + i, v) for i, v in enumerate(values)]))
            offset += len(values)
        batch = decode_batch(spec, NOW, max_record_bytes=max_record_bytes, native=native)
        slicer = Slicer(DIMENSIONS, CardinalityGuard(max_values))  # a small cap: folding order matters too
        out.append((batch, fold_batch(batch, slicer, NOW, RESOLUTIONS)))
    return out


def assert_same(parts, **options) -> None:
    (py_batch, py_delta), (na_batch, na_delta) = both_ways(parts, **options)
    for py_part, na_part in zip(py_batch.parts, na_batch.parts, strict=True):
        assert [(r.offset, r.reasons) for r in py_part.rejections] == \
            [(r.offset, r.reasons) for r in na_part.rejections]
        assert py_part.trace_count == na_part.trace_count
        assert py_part.latest_ts == na_part.latest_ts
    assert py_delta.counters == na_delta.counters
    assert py_delta.last_seen == na_delta.last_seen
    assert py_delta.expire_at == na_delta.expire_at
    assert py_delta.identities == na_delta.identities      # the release version tuples, latest ts included
    for mine, theirs in ((py_delta.windows, na_delta.windows), (py_delta.totals, na_delta.totals)):
        assert mine.keys() == theirs.keys()
        for key in mine:
            assert mine[key].counts == theirs[key].counts, key      # exact, floats included
            assert mine[key].latency.buckets == theirs[key].latency.buckets, key
            assert mine[key].latency.zero_count == theirs[key].latency.zero_count, key
            assert mine[key].latency.count == theirs[key].latency.count, key


def test_the_native_reader_knows_exactly_the_schemas_fields():
    assert known_fields() == KNOWN_FIELDS


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(encoded(), max_size=12), min_size=1, max_size=3))
def test_native_and_python_agree_on_random_batches(parts):
    assert_same(parts)


@settings(max_examples=100, deadline=None)
@given(st.lists(plain.map(lambda r: json.dumps(r).encode()), min_size=1, max_size=30))
def test_native_and_python_agree_on_plain_records_either_way_of_reading_pairs(values):
    """Records with a pair_id are the native path's (their halves go to the pairer, test_native_pairs.py),
    or Python's with ``pair_id_slow`` (the previous version's way): the fold is the same."""
    assert_same([values])
    assert_same([values], pair_id_slow=True)


@pytest.mark.parametrize("value", EDGES, ids=range(len(EDGES)))
def test_native_and_python_agree_on_edges(value):
    assert_same([[value, variant()]])


def test_the_edges_exercise_both_paths():
    """Not every edge goes to Python: the list would prove nothing about the fast path then."""
    native = folder().fold(EDGES, NOW)
    taken = sum(count for count, _ in native.parts)
    assert 10 <= taken <= len(EDGES) - 30


def test_a_record_over_the_size_limit_goes_to_python():
    big = variant(extra="x" * 500)
    (_, _), (na_batch, _) = both_ways([[big, variant()]], max_record_bytes=400)
    assert na_batch.parts[0].native_count == 1
    assert "over the 400-byte limit" in na_batch.parts[0].rejections[0].reasons[0]


def test_per_part_figures_and_slow_positions():
    native = folder().fold([variant(ts=NOW - 50), b"bad", variant(ts=NOW - 40), variant(ts=NOW - 99), None],
                           NOW, part_lengths=[3, 2])
    assert native.slow == [1, 4]
    assert native.parts == [(2, NOW - 40), (1, NOW - 99)]
    with pytest.raises(ValueError, match="part_lengths must add up"):
        folder().fold([variant()], NOW, part_lengths=[2])


def test_both_paths_keep_each_releases_version_tuples_with_their_latest_time():
    values = [variant(ts=NOW - 30, prompt_hash="p1"), variant(ts=NOW - 20, prompt_hash="p2", config_hash="c"),
              variant(ts=NOW - 10, prompt_hash="p1", release="r9"), variant(ts=NOW - 5, prompt_hash="p1")]
    (_, py_delta), (na_batch, na_delta) = both_ways([values])
    assert na_batch.parts[0].native_count == 4      # all of them on the fast path
    assert na_delta.identities == py_delta.identities == {
        "m1": {'["m1","","p1","",""]': NOW - 5, '["m1","","p2","","c"]': NOW - 20},
        "r9": {'["m1","","p1","",""]': NOW - 10}}


def test_a_release_folded_by_the_guard_keeps_no_identity():
    values = [variant(release=f"r{i}", prompt_hash="p") for i in range(5)]
    (_, py_delta), (_, na_delta) = both_ways([values], max_values=3)
    assert sorted(py_delta.identities) == sorted(na_delta.identities) == ["r0", "r1", "r2"]


def test_groups_match_the_python_grouping_key_and_sketch():
    (_, _), (na_batch, _) = both_ways([[variant(latency_ms=1500.0), variant(latency_ms=0)]])
    ((values, starts), group), = na_batch.groups
    assert values == ("m1", "baseline", "unknown", "unknown", "m1", "unknown")
    assert starts == (int(NOW - 10) // 60 * 60, int(NOW - 10) // 3600 * 3600)
    assert group.aggregate.latency.zero_count == 1 and group.aggregate.traces == 2
    assert math.isclose(group.aggregate.latency.quantile(1.0), 1.5, rel_tol=0.01)
