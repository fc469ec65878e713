"""The Redis Cluster store's key naming and its readers' merges (pure: no client here).

Key naming: every Kafka partition (a *source*, ``<topic>:<partition>``) gets its own view, a
:class:`~monitor.store.redis.layout.KeyLayout` under the prefix ``P:{t:<source>}``; everything one
apply writes is under it, so it all hashes to the slot of the hash tag ``t:<source>`` and the apply
script stays one atomic script on one node. What every worker and reader shares — the admitted
values of each dimension, the alert engine's lifecycle state, the store's generation and the
registry of partition views — lives under ``P:{g}`` (one slot). Applies without a source (an
embedded ``fleetmon run --redis``) go to the view of the empty source, ``P:{t:}``.

Merges (a reader reads every view and merges): additive fields are summed (aggregates, counters,
paired evidence, an identity hash's overflow count), latest times take the max (the slices index,
an identity tuple's latest event time). Each merge is exact for integer fields; float fields are
summed in view order, so they may differ from a single Redis in the last bits (as any re-ordered
float sum does).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from monitor.aggregate import Aggregate
from monitor.identity import OVERFLOW_FIELD

#: The hash tag of the shared view (dims, lifecycle state, generation, view registry).
GLOBAL_TAG = "g"
#: What starts a partition view's hash tag: ``t:<topic>:<partition>``.
SOURCE_TAG = "t:"
#: The set, in the shared view, of the sources that have a view (written before their first apply).
VIEWS = "views"


def check_prefix(prefix: str) -> str:
    """``prefix`` when it can carry hash tags after it (no braces of its own); ValueError otherwise."""
    if not prefix or "{" in prefix or "}" in prefix:
        raise ValueError(f"redis.prefix must be non-empty and without '{{' or '}}' for a Redis Cluster store "
                         f"(the store adds the hash tags), got {prefix!r}")
    return prefix


def check_source(source: str) -> str:
    """``source`` when it can sit inside a hash tag (Kafka topic names never hold braces)."""
    if "{" in source or "}" in source:
        raise ValueError(f"a source (topic:partition) must not contain '{{' or '}}', got {source!r}")
    return source


def glob_escape(text: str) -> str:
    """``text`` with Redis glob metacharacters escaped, so a SCAN pattern matches it literally."""
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)


def view_prefix(prefix: str, source: str | None) -> str:
    """The key prefix of ``source``'s partition view: ``P:{t:<source>}``."""
    return f"{prefix}:{{{SOURCE_TAG}{check_source(source or '')}}}"


def global_prefix(prefix: str) -> str:
    """The key prefix of the shared view: ``P:{g}``."""
    return f"{prefix}:{{{GLOBAL_TAG}}}"


def hash_tag(key: str) -> str | None:
    """The part of ``key`` Redis Cluster hashes (between the first ``{`` and the next ``}``), None if none."""
    start = key.find("{")
    if start < 0:
        return None
    end = key.find("}", start + 1)
    if end <= start + 1:
        return None
    return key[start + 1:end]


def split_view_key(prefix: str, key: str) -> tuple[str, str] | None:
    """``(source, rest after the view prefix and ':')`` of a partition view's key, None for other keys."""
    head = f"{prefix}:{{{SOURCE_TAG}"
    if not key.startswith(head):
        return None
    end = key.find("}", len(head))
    if end < 0 or key[end + 1:end + 2] != ":":
        return None
    return key[len(head):end], key[end + 2:]


def one_source(ranges: Sequence[tuple[str, int, int]], pending_sources: Iterable[str]) -> str:
    """The one source an apply covers (its ranges' and its pending halves'); ValueError naming them when
    there are several (a cluster apply is atomic only within one partition view)."""
    sources = {source for source, _first, _last in ranges} | {source for source in pending_sources if source}
    if len(sources) > 1:
        raise ValueError(f"a Redis Cluster store applies one partition at a time (one slot, one atomic script); "
                         f"this apply covers {sorted(sources)}: split the batch by partition first")
    return next(iter(sources), "")


def merge_aggregates(parts: Iterable[Mapping[str, Aggregate]], ids: Sequence[str]) -> dict[str, Aggregate]:
    """Per id in ``ids`` the merge of its aggregates over ``parts`` (an empty aggregate where none has it).

    The inputs are not changed: an id found in one part only gets a copy.
    """
    out: dict[str, Aggregate] = {}
    for part in parts:
        for sid, agg in part.items():
            have = out.get(sid)
            out[sid] = agg.copy() if have is None else have.merge(agg)
    return {sid: out.get(sid) or Aggregate() for sid in ids}


def merge_latest(parts: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Per member the latest time over ``parts`` (the slices index: a slice's last event time)."""
    out: dict[str, float] = {}
    for part in parts:
        for member, ts in part.items():
            if ts > out.get(member, float("-inf")):
                out[member] = ts
    return out


def sum_fields(parts: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Field-wise sums over ``parts`` (counters, one paired-evidence hash)."""
    out: dict[str, float] = {}
    for part in parts:
        for name, value in part.items():
            out[name] = out.get(name, 0) + value
    return out


def sum_hashes(parts: Iterable[Mapping[str, Mapping[str, float]]]) -> dict[str, dict[str, float]]:
    """Per hash name the field-wise sums over ``parts`` (the paired evidence of every view)."""
    grouped: dict[str, list[Mapping[str, float]]] = {}
    for part in parts:
        for name, fields in part.items():
            grouped.setdefault(name, []).append(fields)
    return {name: sum_fields(hashes) for name, hashes in grouped.items()}


def merge_identities(parts: Iterable[Mapping[str, Mapping[str, float]]]) -> dict[str, dict[str, float]]:
    """Per release its version tuples' latest event times (max) and overflow counts (sum) over ``parts``.

    Each view caps its own tuples (``MAX_IDENTITIES_PER_RELEASE``), so a release seen with many tuples
    may list more than the cap after the merge: :func:`monitor.identity.summarize` counts them all.
    """
    out: dict[str, dict[str, float]] = {}
    for part in parts:
        for release, fields in part.items():
            merged = out.setdefault(release, {})
            for name, value in fields.items():
                if name == OVERFLOW_FIELD:
                    merged[name] = merged.get(name, 0) + value
                elif value > merged.get(name, float("-inf")):
                    merged[name] = value
    return out
