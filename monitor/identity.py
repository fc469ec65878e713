"""A release's identity: the version tuple behind a release label, and what changed between two (pure).

The version tuple of a trace is :data:`COMPONENTS` — ``model_id``,
``scaffold_hash``, ``prompt_hash``, ``tool_schema_hash``, ``config_hash`` —
each the trace's text, ``""`` when the trace does not send it. A release label
(``release``, which defaults to ``model_id``) should name exactly one tuple;
when traces of one label carry two, someone deployed a change without
re-labelling it, and a comparison of that label measures a mixture.

What is kept, per release label (a label the cardinality guard folds into
``__other__`` keeps nothing; the fold counts it in ``folded:release``):

* every distinct tuple seen under the label, with the latest event time of a
  trace that carried it (additive by ``max``, so batches apply in any order,
  replays and concurrent workers agree, and applying a batch twice changes
  nothing the watermark would not already refuse);
* at most :data:`MAX_IDENTITIES_PER_RELEASE` tuples: a batch offering one more
  unseen tuple adds one to the label's :data:`OVERFLOW_FIELD` instead (loud:
  it still counts as a change).

Read back (:func:`summarize`): the label's **current** tuple is the one seen
latest in event time (ties: the greatest encoded tuple, so every reader
agrees), and its **changes** are the distinct tuples beyond the first plus the
overflow — a counter that only grows. Going back to an earlier tuple (a
rollback) is not a new tuple and does not count again.

:func:`identity_changes` is the comparison of two tuples that pages and
``fleetmon compare`` print as ``changed``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

COMPONENTS = ("model_id", "scaffold_hash", "prompt_hash", "tool_schema_hash", "config_hash")
#: Distinct tuples kept per release label (a label with more is broken, not busy).
MAX_IDENTITIES_PER_RELEASE = 32
#: The field of a release's identity hash counting unseen tuples offered past the cap.
OVERFLOW_FIELD = "~overflow"

#: A version tuple, in :data:`COMPONENTS` order; ``""`` = not sent.
Identity = tuple[str, ...]


def identity_of(trace: Any) -> tuple[str, Identity]:
    """``(release label, version tuple)`` of a validated :class:`~monitor.schema.Trace` (a component the
    record type does not have, as on the offline fast path's trials, counts as not sent)."""
    return getattr(trace, "release", ""), tuple(getattr(trace, name, "") or "" for name in COMPONENTS)


def encode(identity: Identity) -> str:
    """The tuple as the store's field text: a JSON array in :data:`COMPONENTS` order."""
    return json.dumps(list(identity), ensure_ascii=False, separators=(",", ":"))


def decode(text: str) -> Identity:
    """Inverse of :func:`encode`; raises ValueError naming the text when it is not such an array."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not (isinstance(value, list) and len(value) == len(COMPONENTS) and all(isinstance(v, str) for v in value)):
        raise ValueError(f"a release identity must be a JSON array of {len(COMPONENTS)} strings "
                         f"({', '.join(COMPONENTS)}), got {text!r}")
    return tuple(value)


def as_mapping(identity: Identity) -> dict[str, str]:
    """``{component: value}`` of a tuple (what pages carry as ``baseline_identity``)."""
    return dict(zip(COMPONENTS, identity, strict=True))


def identity_changes(baseline: Mapping[str, str] | None, candidate: Mapping[str, str] | None) -> list[str]:
    """The components (in :data:`COMPONENTS` order) whose values differ between two identities.

    Identities are mappings as :func:`as_mapping` makes them; a component
    missing from a mapping counts as ``""`` (not sent). When either identity
    is unknown (None: no trace of that release carried one) nothing can be
    said and the result is ``[]`` — callers show the identity as unknown.
    More than one component in the result means the comparison is
    confounded: its effect cannot be attributed to one change.
    """
    if baseline is None or candidate is None:
        return []
    return [name for name in COMPONENTS if (baseline.get(name) or "") != (candidate.get(name) or "")]


def confounded_warning(changed: list[str]) -> str | None:
    """``"confounded: N components differ (a, b)"`` when more than one differs, else None."""
    if len(changed) <= 1:
        return None
    return f"confounded: {len(changed)} components differ ({', '.join(changed)})"


def identity_of_traces(traces: Iterable[Any]) -> tuple[dict[str, str] | None, int]:
    """``(current identity, distinct tuples)`` of one side's traces (offline: ``fleetmon compare``).

    The current identity is the tuple of the latest trace in event time
    (ties, and traces without ``ts``, which rank after every stamped one: the
    last in input order); None for no traces. More than one distinct tuple means the side
    itself mixes versions.
    """
    latest: tuple[float, int, Identity] | None = None
    distinct: set[Identity] = set()
    for position, trace in enumerate(traces):
        _release, identity = identity_of(trace)
        distinct.add(identity)
        key = (float("inf") if trace.ts is None else float(trace.ts), position, identity)
        if latest is None or key[:2] >= latest[:2]:
            latest = key
    return (None if latest is None else as_mapping(latest[2])), len(distinct)


Seen = dict[tuple[str, Identity], tuple[float, int]]
"""(release, tuple) → (latest event time, first position) of one batch."""


def collect(traces: Iterable[Any], positions: Iterable[int] | None = None, seen: Seen | None = None) -> Seen:
    """Add the version tuples of ``traces`` (each with a ``ts``) to ``seen`` (a new one by default)."""
    seen = seen if seen is not None else {}
    for position, trace in zip(range(10**18) if positions is None else positions, traces):
        key = identity_of(trace)
        ts = float(trace.ts)
        found = seen.get(key)
        seen[key] = (ts, position) if found is None else (max(ts, found[0]), min(position, found[1]))
    return seen


def place(seen: Seen, admit: Any, into: dict[str, dict[str, float]]) -> None:
    """Add ``seen`` to a delta's identities (release → encoded tuple → latest ts) through the guard.

    ``admit(dim, value)`` is the cardinality guard's; labels are asked in
    order of first position, once each. A label folded into ``__other__`` is
    left out.
    """
    answers: dict[str, str] = {}
    for (release, identity), (ts, _first) in sorted(seen.items(), key=lambda item: item[1][1]):
        guarded = answers.get(release)
        if guarded is None:
            guarded = answers[release] = admit("release", release)
        if guarded != release:
            continue
        fields = into.setdefault(release, {})
        field = encode(identity)
        if ts > fields.get(field, float("-inf")):
            fields[field] = ts


def apply_to(stored: dict[str, float], fields: Mapping[str, float], cap: int = MAX_IDENTITIES_PER_RELEASE) -> None:
    """One release's identity hash after an apply (what the Redis apply script does, in Python)."""
    for field, ts in fields.items():
        if field in stored:
            stored[field] = max(stored[field], ts)
        elif sum(1 for name in stored if name != OVERFLOW_FIELD) < cap:
            stored[field] = ts
        else:
            stored[OVERFLOW_FIELD] = stored.get(OVERFLOW_FIELD, 0) + 1


@dataclass(frozen=True)
class ReleaseIdentity:
    """A release label's current tuple (latest seen), when it was last seen, its changes so far, the
    tuples kept and the unseen tuples offered past the cap (``overflow``)."""

    release: str
    current: Identity
    last_seen: float
    changes: int
    tuples: int
    overflow: int = 0

    def mapping(self) -> dict[str, str]:
        return as_mapping(self.current)


def summarize(stored: Mapping[str, Mapping[str, float]]) -> dict[str, ReleaseIdentity]:
    """Per release label its :class:`ReleaseIdentity` from the store's hashes (release → field → value).

    A field that does not decode is skipped (it cannot be written by this
    code); a release without any tuple is left out.
    """
    out: dict[str, ReleaseIdentity] = {}
    for release, fields in stored.items():
        tuples = []
        for field, ts in fields.items():
            if field == OVERFLOW_FIELD:
                continue
            try:
                tuples.append((float(ts), field, decode(field)))
            except ValueError:
                continue
        if not tuples:
            continue
        ts, _field, current = max(tuples)
        overflow = int(fields.get(OVERFLOW_FIELD, 0))
        out[release] = ReleaseIdentity(release, current, ts, len(tuples) - 1 + overflow, len(tuples), overflow)
    return out
