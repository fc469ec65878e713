"""The cluster rebuild's key ownership and pattern handling (pure: no Redis)."""

import pytest

from monitor.store.redis import layout
from monitor.store.redis.merge import VIEWS, global_prefix, hash_tag, view_prefix
from streams.rebuild import KEPT_FAMILIES, REPLACED_PATTERNS, glob_escape, glob_literal, replaced_patterns
from streams.rebuild_cluster import SHARED_REPLACED


def test_a_fresh_prefix_has_the_hash_tags_of_the_live_one_so_each_swap_is_one_slot():
    for source in ("fleetmon.traces:0", "t-1.x:17", ""):
        assert hash_tag(view_prefix("fleetmon", source) + ":w") == hash_tag(
            view_prefix("fleetmon.rebuild.1796-abc", source) + ":w") == f"t:{source}"
    assert hash_tag(global_prefix("fleetmon") + ":dims:x") == hash_tag(global_prefix("fm.rebuild.1") + ":x") == "g"


def test_the_shared_slot_is_handled_like_one_redis_handles_those_families():
    # the shared view holds dims:, state:, generation and views (monitor/store/redis/layout.py)
    assert [glob_literal(p) for p in SHARED_REPLACED] == [layout.DIMS + ":"]
    assert layout.family_pattern(layout.DIMS) in REPLACED_PATTERNS  # one Redis replaces dims: too
    assert layout.STATE in KEPT_FAMILIES and layout.GENERATION in KEPT_FAMILIES
    assert VIEWS == "views"  # merged (SUNIONSTORE), not replaced: other topics' views stay registered


@pytest.mark.parametrize(("pattern", "literal"), [
    ("w:*", "w:"), ("pending:a\\*b\\[1\\]:*", "pending:a*b[1]:"), ("x\\\\y:*", "x\\y:")])
def test_glob_literal_undoes_glob_escape(pattern, literal):
    assert glob_literal(pattern) == literal
    assert glob_literal(glob_escape(literal) + "*") == literal


def test_every_replaced_pattern_is_a_literal_then_a_star():
    literals = [glob_literal(p) for p in replaced_patterns("fleetmon.traces")]
    assert literals[-1] == "pending:fleetmon.traces:"
    assert len(set(literals)) == len(literals)
    # no literal is a prefix of another family's keys (a key is claimed by one family only)
    for one in literals:
        assert not any(other != one and other.startswith(one) for other in literals), one


@pytest.mark.parametrize("pattern", ["w:", "w*x:*", "a?:*", "[ab]:*"])
def test_glob_literal_refuses_what_is_not_literal_then_star(pattern):
    with pytest.raises(ValueError, match="pattern must"):
        glob_literal(pattern)
