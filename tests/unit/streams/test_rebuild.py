"""Rebuild's key ownership (pure: no Redis)."""

import re

import monitor.store.redis.layout as store_redis
from streams.rebuild import KEPT_FAMILIES, REPLACED_KEYS, REPLACED_PATTERNS, glob_escape, replaced_patterns


def families_in_store_layout() -> set[str]:
    """First segment after ``P:`` of every key in the store's documented layout."""
    return set(re.findall(r"``P:([a-z]+)", store_redis.__doc__ or ""))


def test_every_store_key_family_is_either_replaced_or_kept_on_purpose():
    handled = {p.split(":")[0].rstrip("*") for p in REPLACED_PATTERNS} | set(REPLACED_KEYS)
    handled |= {"offsets", "pending"} | set(KEPT_FAMILIES)  # offsets/pending: this topic's fields only
    missing = families_in_store_layout() - handled
    assert not missing, f"rebuild does not know what to do with key families {sorted(missing)}"


def test_glob_escape_makes_a_prefix_match_only_itself():
    assert glob_escape("fleet*mon[1]?\\") == "fleet\\*mon\\[1\\]\\?\\\\"
    assert replaced_patterns("a*b")[-1] == "pending:a\\*b:*"
