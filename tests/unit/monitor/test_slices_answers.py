"""The guarded keys and grouping rows of a fold against the per-value, per-row questions spelt out.

``Slicer.key_for`` answers the pure guard inline and ``GroupingSet.rows`` remembers rows (and the pure
guard's answers) for one fold; both must give the same keys, rows, folds and guard sets as asking the
guard once per value and once per row, and a guard that can tell (a subclass) must be asked the same
questions in the same order."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from monitor.groupings import ADMITTED_PREFIX, BASE_DIMENSIONS, Grouping, GroupingSet, grouping_set, guard_admit
from monitor.slices import OTHER, UNKNOWN, CardinalityGuard, SliceKey, Slicer, answers_inline, parse_slice_id, slice_id

DIMS = ("release", "arm", "task_type", "tenant", "locale")


@dataclass
class RecordingGuard(CardinalityGuard):
    """Records every question, in order, and answers as the pure guard."""

    asked: list[tuple[str, str, int]] = field(default_factory=list)

    def admit_capped(self, dim: str, value: str, cap: int) -> str:
        self.asked.append((dim, value, cap))
        return super().admit_capped(dim, value, cap)


@dataclass
class FickleGuard(RecordingGuard):
    """Records every question and changes its mind about combinations: every third one is refused, admitted
    or not (a guard whose answers do not stand must be asked every time and its latest answer used)."""

    def admit_capped(self, dim: str, value: str, cap: int) -> str:
        answer = super().admit_capped(dim, value, cap)
        return OTHER if dim.startswith(ADMITTED_PREFIX) and len(self.asked) % 3 == 0 else answer


def spelt_out_key(slicer: Slicer, values: tuple[str, ...]) -> SliceKey:
    return tuple((dim, slicer.guard.admit(dim, value)) for dim, value in zip(slicer.dimensions, values))


def spelt_out_rows(groupings: GroupingSet, key: SliceKey, guard: CardinalityGuard,
                   ) -> list[tuple[Grouping, SliceKey, bool]]:
    values = dict(key)
    out = []
    for g in groupings.groupings:
        row = tuple((d, values[d]) for d in g.dimensions)
        folded = False
        extras = [v for d, v in row if d not in BASE_DIMENSIONS]
        sid = "|".join(f"{d}=" + v.replace("%", "%25").replace("|", "%7C").replace("=", "%3D") for d, v in row)
        if extras and any(v != OTHER for v in extras) and \
                guard.admit_capped(ADMITTED_PREFIX + g.name, sid, g.budget) == OTHER:
            row = tuple((d, v if d in BASE_DIMENSIONS else OTHER) for d, v in row)
            folded = True
        out.append((g, row, folded))
    return out


def raw_values(rng: random.Random, n: int) -> list[tuple[str, ...]]:
    """Raw slices with repeats, ``unknown`` and ``__other__`` raw values and characters ids escape."""
    pools = [["r1", "r2", "r|3"], ["baseline", "canary", UNKNOWN], ["code", "chat", "a=b", UNKNOWN],
             [f"t{k}" for k in range(12)] + [OTHER, "50%", "x|y=z"], ["en", "de", OTHER]]
    return [tuple(rng.choice(pool) for pool in pools) for _ in range(n)]


@pytest.mark.parametrize("kind", [CardinalityGuard, RecordingGuard, FickleGuard])
@pytest.mark.parametrize("seed", range(40))
def test_keys_rows_and_questions_equal_the_questions_spelt_out(kind, seed):
    rng = random.Random(seed)
    cap = rng.choice([1, 2, 3, 5, 100, {"tenant": 4, "locale": 1}])
    extra = rng.choice([(), (("tenant", "locale"),), (("arm", "task_type", "tenant", "locale"),)])
    groupings = grouping_set(DIMS, extra, rng.choice([1, 2, 4, 1000]), budgets={"tenant": rng.choice([1, 3, 50])})
    mine, theirs = Slicer(DIMS, kind(cap), groupings), Slicer(DIMS, kind(cap), groupings)
    for fold_number in range(3):   # several folds through one guard, a new admit each, as place_groups does
        admit = guard_admit(mine.guard)
        for values in raw_values(rng, rng.randint(1, 120)):
            key = mine.key_for(values)
            assert key == spelt_out_key(theirs, values), (fold_number, values)
            assert groupings.rows(key, admit) == spelt_out_rows(groupings, key, theirs.guard), (fold_number, values)
        assert mine.guard.admitted == theirs.guard.admitted
        if isinstance(mine.guard, RecordingGuard):
            assert mine.guard.asked == theirs.guard.asked


def test_the_pure_guard_alone_answers_inline():
    assert answers_inline(CardinalityGuard())
    assert not answers_inline(RecordingGuard())
    replaced = CardinalityGuard()
    replaced.admit = lambda dim, value: value
    assert not answers_inline(replaced)
    # a replaced admit is what key_for asks
    assert Slicer(("release", "tenant"), replaced).key_for(("r", "t")) == (("release", "r"), ("tenant", "t"))
    assert replaced.admitted == {}


def test_rows_of_a_key_out_of_the_slicers_order_are_those_of_its_values():
    groupings = grouping_set(DIMS)
    key = (("tenant", "acme"), ("release", "r1"), ("arm", "canary"), ("locale", "en"), ("task_type", "code"))
    rows = groupings.rows(key, guard_admit(CardinalityGuard()))
    assert [slice_id(row) for _, row, _ in rows] == [
        "release=r1|arm=canary", "release=r1|arm=canary|task_type=code", "release=r1|arm=canary|tenant=acme",
        "release=r1|arm=canary|locale=en", "release=r1|arm=canary|task_type=code|tenant=acme",
        "release=r1|arm=canary|task_type=code|locale=en"]


@pytest.mark.parametrize("value", ["plain", "", "%", "a|b", "x=y", "%7C", "50%|=%3D", "__other__"])
def test_slice_ids_escape_and_parse_back(value):
    key = (("release", value), ("tenant", "t"))
    assert slice_id(key) == "release=" + value.replace("%", "%25").replace("|", "%7C").replace("=", "%3D") \
        + "|tenant=t"
    assert parse_slice_id(slice_id(key)) == key


def test_a_dimension_the_caps_do_not_name_admits_100_values():
    slicer = Slicer(("release", "tenant"), CardinalityGuard({"tenant": 1}))
    keys = [slicer.key_for((f"r{i}", f"t{i}")) for i in range(102)]
    assert [key[0][1] for key in keys] == [f"r{i}" for i in range(100)] + [OTHER, OTHER]
    assert [key[1][1] for key in keys] == ["t0"] + [OTHER] * 101
