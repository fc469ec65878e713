"""What changed between a comparison's two releases: their version tuples on every finding (pure).

:func:`annotate` adds to each finding's ``detail`` — and so to the evidence of
every page (:func:`alerts.pages.evidence_of`) — the keys

* ``baseline_identity``, ``candidate_identity``: ``{component: value}`` of
  each release's **current** version tuple (:mod:`monitor.identity`: the one
  seen latest in event time; ``""`` = not sent), or None when the store has
  none for that release (its label was folded into ``__other__``, or the
  traces predate identity tracking);
* ``changed``: the components that differ (:func:`monitor.identity.identity_changes`),
  e.g. ``["prompt_hash"]``; more than one means the comparison is confounded;
* ``identity_changes``: ``{"baseline": n, "candidate": n}``, the tuples each
  label saw beyond its first (a deploy nobody re-labelled: the label then
  measures a mixture).

Nothing else in the finding changes, so decisions do not depend on identities.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from alerts.policy import Finding
from monitor.identity import ReleaseIdentity, identity_changes, summarize

#: The evidence keys :func:`annotate` adds (and :func:`alerts.pages.evidence_of` copies).
EVIDENCE_KEYS = ("baseline_identity", "candidate_identity", "changed", "identity_changes")


def identity_detail(baseline: ReleaseIdentity | None, candidate: ReleaseIdentity | None) -> dict[str, Any]:
    """The :data:`EVIDENCE_KEYS` for a comparison of ``baseline`` and ``candidate`` (None: unknown)."""
    base = None if baseline is None else baseline.mapping()
    cand = None if candidate is None else candidate.mapping()
    return {"baseline_identity": base, "candidate_identity": cand, "changed": identity_changes(base, cand),
            "identity_changes": {"baseline": 0 if baseline is None else baseline.changes,
                                 "candidate": 0 if candidate is None else candidate.changes}}


def annotate(findings: Sequence[Finding], stored: Mapping[str, Mapping[str, float]]) -> list[Finding]:
    """``findings`` with :data:`EVIDENCE_KEYS` in their detail; ``stored`` is ``Store.release_identities()``."""
    identities = summarize(stored)
    cache: dict[tuple[str, str], dict[str, Any]] = {}
    out = []
    for f in findings:
        key = (f.comparison.baseline_release, f.comparison.candidate_release)
        detail = cache.get(key)
        if detail is None:
            detail = cache[key] = identity_detail(identities.get(key[0]), identities.get(key[1]))
        out.append(replace(f, detail={**f.detail, **detail}))
    return out
