"""Slice groupings: the defaults, the operator's groupings and budgets (config and errors), ids, the fold
into one row per grouping with budgets, and which grouping each comparison slice is read from."""

from __future__ import annotations

import pytest

from monitor.aggregate import Aggregate
from monitor.config import ConfigError, load
from monitor.fold import fold
from monitor.groupings import (
    FOLDED_COUNTER_PREFIX,
    Grouping,
    comparison_feeds,
    default_groupings,
    grouping_name,
    grouping_set,
    of_slicer,
    rows_of,
)
from monitor.schema import validate
from monitor.slices import OTHER, UNKNOWN, WHOLE_FLEET, CardinalityGuard, Slicer, comparison_slices, parse_slice_id

NOW = 1_800_000_000.0
DIMS = ("release", "arm", "task_type", "tenant", "locale")


def trace(i: int, **values: str):
    return validate({"trace_id": f"t{i}", "ts": NOW - 30, "model_id": "m", "ok": i % 2 == 0, **values})


def test_defaults_are_base_each_single_dimension_and_task_type_with_each_other():
    assert default_groupings(DIMS) == (
        ("release", "arm"), ("release", "arm", "task_type"), ("release", "arm", "tenant"),
        ("release", "arm", "locale"), ("release", "arm", "task_type", "tenant"),
        ("release", "arm", "task_type", "locale"))
    assert grouping_set(DIMS).names() == ("", "task_type", "tenant", "locale", "task_type,tenant",
                                          "task_type,locale")
    # without task_type there is no stratum: base and single dimensions only
    assert default_groupings(("release", "tenant", "locale")) == (
        ("release",), ("release", "tenant"), ("release", "locale"))


def test_operator_groupings_are_ordered_deduplicated_and_budgeted():
    found = grouping_set(DIMS, [["locale", "tenant"], ["tenant", "task_type"], ["release", "arm", "tenant"]],
                         budget=50, budgets={"tenant,locale": 7, "task_type": 3})
    assert found.names() == ("", "task_type", "tenant", "locale", "task_type,tenant", "task_type,locale",
                             "tenant,locale")
    assert found.get("tenant,locale") == Grouping(("release", "arm", "tenant", "locale"), 7)
    assert found.get("task_type").budget == 3 and found.get("tenant").budget == 50


@pytest.mark.parametrize("extra, budget, budgets, needle", [
    ([["tenantt"]], 10, {}, "slices.groupings[0] must be distinct dimensions of slices.dimensions "
                            "['release', 'arm', 'task_type', 'tenant', 'locale'], got ['tenantt']"),
    ([["tenant", "tenant"]], 10, {}, "slices.groupings[0] must be distinct dimensions"),
    (["tenant"], 10, {}, "slices.groupings[0] must be a list of dimension names, got 'tenant'"),
    ([], 0, {}, "slices.grouping_budget must be an integer >= 1, got 0"),
    ([], 10, {"tenant,region": 5}, "slices.grouping_budgets key must name a grouping"),
    ([], 10, {"tenant,locale": 5}, "one of ['locale', 'task_type', 'task_type,locale', 'task_type,tenant', "
                                   "'tenant'], got 'tenant,locale'"),
    ([], 10, {"tenant": 0}, "slices.grouping_budgets['tenant'] must be an integer >= 1, got 0"),
])
def test_bad_groupings_name_field_value_and_allowed(extra, budget, budgets, needle):
    with pytest.raises(ValueError) as info:
        grouping_set(DIMS, extra, budget, budgets)
    assert needle in str(info.value)


def test_config_reads_groupings_and_budgets_from_toml_and_environment(tmp_path):
    path = tmp_path / "f.toml"
    path.write_text('[slices]\ngroupings = [["tenant", "locale"]]\ngrouping_budget = 200\n'
                    '[slices.grouping_budgets]\n"tenant,locale" = 5000\ntask_type = 50\n')
    found = load(path, env={}).slices.grouping_set()
    assert found.get("tenant,locale").budget == 5000 and found.get("task_type").budget == 50
    assert found.get("tenant").budget == 200
    env = {"FLEETMON_SLICES_GROUPINGS": "tenant,locale;task_type,tenant,locale",
           "FLEETMON_SLICES_GROUPING_BUDGETS": "tenant,locale=9;locale=4", "FLEETMON_SLICES_GROUPING_BUDGET": "30"}
    found = load(None, env=env).slices.grouping_set()
    assert found.names()[-2:] == ("tenant,locale", "task_type,tenant,locale")
    assert (found.get("tenant,locale").budget, found.get("locale").budget, found.get("task_type").budget) == (9, 4, 30)


@pytest.mark.parametrize("text, needle", [
    ('[slices]\ngroupings = ["tenant"]\n', "slices.groupings must be a list of lists of dimension names"),
    ('[slices]\ngroupings = [["region"]]\n', "slices.groupings[0] must be distinct dimensions of slices.dimensions"),
    ('[slices]\ngrouping_budgets = 5\n', "slices.grouping_budgets must be a table of grouping name = budget"),
    ('[slices]\ngrouping_budget = 0\n', "slices.grouping_budget must be an integer >= 1, got 0"),
])
def test_bad_grouping_config_is_a_config_error_naming_the_file(tmp_path, text, needle):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load(path, env={})
    assert needle in str(info.value)


def test_bad_grouping_environment_value_is_named():
    with pytest.raises(ConfigError, match=r"FLEETMON_SLICES_GROUPING_BUDGETS \(slices.grouping_budgets\) must "
                                          r"look like 'task_type,tenant=5000;locale=200', got 'tenant'"):
        load(None, env={"FLEETMON_SLICES_GROUPING_BUDGETS": "tenant"})


def test_each_trace_has_one_row_per_grouping_with_only_its_dimensions():
    delta = fold([trace(1, release="r1", arm="canary", task_type="code", tenant="acme", locale="en")],
                 Slicer(), NOW)
    assert sorted(delta.totals) == sorted([
        "release=r1|arm=canary", "release=r1|arm=canary|task_type=code", "release=r1|arm=canary|tenant=acme",
        "release=r1|arm=canary|locale=en", "release=r1|arm=canary|task_type=code|tenant=acme",
        "release=r1|arm=canary|task_type=code|locale=en"])
    assert {grouping_name(parse_slice_id(sid)) for sid in delta.totals} == set(grouping_set(DIMS).names())
    assert delta.counters == {"traces": 1}


def test_combinations_past_the_budget_fold_into_the_groupings_other_row_and_are_counted():
    groupings = grouping_set(DIMS, budget=2, budgets={"task_type,tenant": 3})
    slicer = Slicer(DIMS, CardinalityGuard(100), groupings)
    traces = [trace(i, release="r1", arm="baseline", task_type="code", tenant=f"t{i % 5}", locale="en")
              for i in range(10)]
    delta = fold(traces, slicer, NOW)
    tenants = rows_of(delta.totals, "tenant", parse_slice_id)
    # first seen t0, t1 admitted; t2..t4 (6 traces) in the __other__ row, which uses no budget
    assert {sid: delta.totals[sid].traces for sid in tenants} == {
        "release=r1|arm=baseline|tenant=t0": 2, "release=r1|arm=baseline|tenant=t1": 2,
        f"release=r1|arm=baseline|tenant={OTHER}": 6}
    assert delta.counters[FOLDED_COUNTER_PREFIX + "tenant"] == 6
    pairs = rows_of(delta.totals, "task_type,tenant", parse_slice_id)
    assert sorted(delta.totals[s].traces for s in pairs) == [2, 2, 2, 4]  # budget 3 + the __other__ row
    assert delta.counters[FOLDED_COUNTER_PREFIX + "task_type,tenant"] == 4
    assert FOLDED_COUNTER_PREFIX + "task_type" not in delta.counters  # one task type: within budget
    # a combination is the whole row, release and arm included: another release's t1 is a new one
    later = fold([trace(99, release="r2", arm="canary", task_type="code", tenant="t1", locale="en")], slicer, NOW)
    assert f"release=r2|arm=canary|tenant={OTHER}" in later.totals
    assert later.counters["grouping_folded:tenant"] == 1
    assert "release=r2|arm=canary" in later.totals  # the base grouping has no budget: never folded


def test_a_value_folded_per_dimension_uses_no_grouping_budget():
    slicer = Slicer(DIMS, CardinalityGuard(1), grouping_set(DIMS, budget=1))
    delta = fold([trace(i, release="r1", arm="baseline", tenant=f"t{i}") for i in range(3)], slicer, NOW)
    rows = {sid: a.traces for sid, a in delta.totals.items() if grouping_name(parse_slice_id(sid)) == "tenant"}
    assert rows == {"release=r1|arm=baseline|tenant=t0": 1, f"release=r1|arm=baseline|tenant={OTHER}": 2}
    assert delta.counters["folded:tenant"] == 2 and "grouping_folded:tenant" not in delta.counters


def test_a_slicer_without_groupings_gets_the_defaults_and_mismatched_ones_are_refused():
    slicer = Slicer(("release", "tenant"))
    assert of_slicer(slicer).names() == ("", "tenant")
    with pytest.raises(ValueError, match="groupings are of dimensions"):
        Slicer(("release", "tenant"), groupings=grouping_set(DIMS))


@pytest.mark.parametrize("full", [
    (("release", "r"), ("arm", "baseline"), ("task_type", "code"), ("tenant", "acme"), ("locale", "en")),
    (("release", "r"), ("arm", "canary"), ("task_type", UNKNOWN), ("tenant", "acme"), ("locale", UNKNOWN)),
    (("release", "r"), ("arm", "canary"), ("task_type", "code"), ("tenant", UNKNOWN), ("locale", "de")),
])
def test_each_comparison_slice_is_read_from_exactly_one_row(full):
    """Unstratified and stratified by task type: over the rows of one trace, the comparison slices fed
    are exactly ``comparison_slices`` of its full key, each once, with the trace's task type."""
    rows = [row for _, row, _ in grouping_set(DIMS).rows(full, lambda _g, _c: True)]
    values = dict(full)
    for stratum in (None, "task_type"):
        fed = [feed for row in rows for feed in comparison_feeds(row, stratum)]
        keys = [key for key, _ in fed]
        assert sorted(keys) == sorted(comparison_slices(full)) and len(set(keys)) == len(keys)
        assert {level for _, level in fed} == {values["task_type"] if stratum else UNKNOWN}
    assert comparison_feeds(parse_slice_id("release=r|arm=a")) == ((WHOLE_FLEET, UNKNOWN),)
    assert comparison_feeds(parse_slice_id("release=r|arm=a"), "task_type") == ()


def test_rows_of_one_grouping_sum_to_the_fleet_and_ids_say_their_grouping():
    traces = [trace(i, release=f"r{i % 2}", arm="baseline", task_type=f"k{i % 3}", tenant=f"t{i % 4}")
              for i in range(24)]
    delta = fold(traces, Slicer(), NOW)
    for name in grouping_set(DIMS).names():
        rows = rows_of(delta.totals, name, parse_slice_id)
        merged = Aggregate()
        for sid in rows:
            merged.merge(delta.totals[sid])
        assert merged == Aggregate.of(traces), name
