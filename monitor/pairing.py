"""Joining shadow pairs: a baseline trace and its shadow twin share a ``pair_id`` (pure).

The producer keys traces by ``pair_id``, so both halves land in the same
partition and one worker sees both. The first half to arrive waits in
``pending`` (persisted with the batch that saw it, so a crash neither loses
nor double-counts it); when its twin arrives the pair is folded into
additive :class:`~alerts.evidence.PairedCounts` fields for its comparison
(baseline release x candidate release) and slices:

* ``all`` — the whole comparison, and
* one slice per non-release dimension value (``task_type=refund``,
  ``tenant=acme``, ...), taken from the baseline half's guarded slice
  (``unknown`` values are left out: they would repeat ``all``).

Counts are cumulative from the first pair of a comparison (the anytime-valid
tests need the whole sequence). A half waiting longer than ``ttl_seconds``
of event time is dropped and counted (``pairs_expired``); a second half of
the same arm is counted (``pairs_duplicate_half``) and ignored. Cost deltas
are priced when the pair completes, with the price entry in force at the
baseline half's time (a delta's square cannot be re-priced later).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable, Mapping
from urllib.parse import quote, unquote

from monitor.fold import BatchDelta
from monitor.pricing import PriceMap
from monitor.schema import Trace
from monitor.slices import UNKNOWN, SliceKey, slice_id

PAIR_PREFIX = "pair:"
PAIRED_ARMS = ("baseline", "shadow")
COMPARISON_DIMENSIONS_EXCLUDED = ("release", "arm", "model_id")


@dataclass(frozen=True, slots=True)
class Half:
    arm: str
    release: str
    success: bool
    harmful: bool
    cost_usd: float
    latency_seconds: float | None
    ts: float
    slices: tuple[str, ...]      # slice ids this pair counts in ("" = all)
    benign: bool
    over_refusal: bool

    def to_json(self) -> str:
        return json.dumps([self.arm, self.release, self.success, self.harmful, self.cost_usd,
                           self.latency_seconds, self.ts, list(self.slices), self.benign, self.over_refusal],
                          separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> "Half":
        arm, release, success, harmful, cost, latency, ts, slices, benign, over = json.loads(text)
        return cls(arm, release, success, harmful, cost, latency, ts, tuple(slices), benign, over)


def pair_key(baseline_release: str, candidate_release: str, sid: str) -> str:
    return f"{PAIR_PREFIX}{quote(baseline_release, safe='')}:{quote(candidate_release, safe='')}:{sid}"


def parse_pair_key(key: str) -> tuple[str, str, str]:
    """``pair:<baseline>:<candidate>:<slice id>`` → (baseline, candidate, slice id)."""
    if not key.startswith(PAIR_PREFIX):
        raise ValueError(f"not a pair key: {key!r}")
    baseline, candidate, sid = key[len(PAIR_PREFIX):].split(":", 2)
    return unquote(baseline), unquote(candidate), sid


def comparison_slices(key: SliceKey) -> tuple[str, ...]:
    """``""`` (all) plus one single-dimension slice id per non-release dimension."""
    out = [""]
    for dim, value in key:
        if dim not in COMPARISON_DIMENSIONS_EXCLUDED and value != UNKNOWN:
            out.append(slice_id(((dim, value),)))
    return tuple(out)


class Pairer:
    """Joins halves; ``pending`` maps pair_id → waiting half (see the module docstring)."""

    def __init__(self, prices: PriceMap, ttl_seconds: float = 3600.0) -> None:
        if ttl_seconds <= 0:
            raise ValueError(f"pair ttl_seconds must be > 0, got {ttl_seconds}")
        self.prices = prices
        self.ttl_seconds = ttl_seconds
        self.pending: dict[str, Half] = {}

    def load(self, pending: Mapping[str | bytes, str | bytes]) -> None:
        """Restore waiting halves (as persisted by a store)."""
        for pair_id, text in pending.items():
            key = pair_id.decode() if isinstance(pair_id, bytes) else pair_id
            self.pending[key] = Half.from_json(text)

    def half(self, trace: Trace, key: SliceKey) -> Half:
        cost = self.prices.cost_usd(trace.model_id, trace.ts, trace.tokens_in, trace.tokens_cached_in,
                                    trace.tokens_out, trace.fees_usd)
        return Half(trace.arm, trace.release, trace.success, trace.harmful_action, cost, trace.latency_seconds,
                    trace.ts or 0.0, comparison_slices(key), bool(trace.benign),
                    bool(trace.benign and trace.refused))

    def offer(self, trace: Trace, key: SliceKey, delta: BatchDelta) -> None:
        """Take one trace (with its guarded slice key); pairs complete into ``delta``."""
        if trace.pair_id is None or trace.arm not in PAIRED_ARMS:
            return
        pair_id = trace.pair_id
        half = self.half(trace, key)
        other = self.pending.get(pair_id)
        if other is None:
            self.pending[pair_id] = half
            delta.pending_set[pair_id] = half.to_json()
            delta.pending_del.discard(pair_id)
            return
        if other.arm == half.arm:
            delta.count("pairs_duplicate_half")
            return
        del self.pending[pair_id]
        delta.pending_set.pop(pair_id, None)
        delta.pending_del.add(pair_id)
        base, cand = (other, half) if other.arm == "baseline" else (half, other)
        record_pair(base, cand, delta)

    def expire(self, now: float, delta: BatchDelta) -> int:
        """Drop halves waiting longer than the TTL at ``now``; returns how many."""
        dead = [pid for pid, half in self.pending.items() if half.ts + self.ttl_seconds <= now]
        for pair_id in dead:
            del self.pending[pair_id]
            delta.pending_set.pop(pair_id, None)
            delta.pending_del.add(pair_id)
        if dead:
            delta.count("pairs_expired", len(dead))
        return len(dead)


def record_pair(base: Half, cand: Half, delta: BatchDelta) -> None:
    """Add one completed pair to every slice it counts in."""
    fields: dict[str, float] = {"n_pairs": 1}
    if base.success and not cand.success:
        fields["b"] = 1
    elif cand.success and not base.success:
        fields["c"] = 1
    if base.harmful and not cand.harmful:
        fields["harm_b"] = 1
    elif cand.harmful and not base.harmful:
        fields["harm_c"] = 1
    if cand.harmful:
        fields["candidate_harmful"] = 1
    if base.harmful:
        fields["baseline_harmful"] = 1
    if cand.benign:
        fields["candidate_benign"] = 1
    if cand.over_refusal:
        fields["candidate_over_refusals"] = 1
    cost_delta = cand.cost_usd - base.cost_usd
    fields.update(cost_n=1, cost_delta_sum=cost_delta, cost_delta_sumsq=cost_delta * cost_delta,
                  baseline_cost_sum=base.cost_usd)
    if base.latency_seconds is not None and cand.latency_seconds is not None:
        lat_delta = cand.latency_seconds - base.latency_seconds
        fields.update(latency_n=1, latency_delta_sum=lat_delta, latency_delta_sumsq=lat_delta * lat_delta,
                      baseline_latency_sum=base.latency_seconds)
    delta.count("pairs")
    for sid in base.slices:
        target = delta.extra.setdefault(pair_key(base.release, cand.release, sid), {})
        for name, value in fields.items():
            target[name] = target.get(name, 0) + value


def pairs_from_extra(extra: Mapping[str, Mapping[str, float]]) -> Iterable[tuple[str, str, str, dict[str, float]]]:
    """(baseline, candidate, slice id, fields) for every stored pair key."""
    for key, fields in extra.items():
        if key.startswith(PAIR_PREFIX):
            baseline, candidate, sid = parse_pair_key(key)
            yield baseline, candidate, sid, dict(fields)
