"""Joining shadow pairs into typed :class:`PairedCounts` (pure).

A baseline trace and its shadow twin share a ``pair_id``. The producer keys
traces by ``pair_id``, so both halves land in the same partition and one
worker sees both. The first half to arrive waits in ``pending`` (persisted
with the batch that saw it, so a crash neither loses nor double-counts it);
when its twin arrives the pair is added to the :class:`PairedCounts` of its
comparison (baseline release x candidate release) in every slice of
:func:`monitor.slices.comparison_slices` of the baseline half's guarded key.

Counts are cumulative from the first pair of a comparison (the anytime-valid
tests need the whole sequence). A half waiting longer than ``ttl_seconds``
of event time is dropped and counted (``pairs_expired``); a second half of
the same arm is counted (``pairs_duplicate_half``) and ignored. Cost deltas
are priced when the pair completes, with the price entry in force at the
baseline half's time (a delta's square cannot be re-priced later).

:class:`PairedCounts` is the contract with the alert engine: this module
alone turns it into the store's flat hash (``pair:<baseline>:<candidate>:<slice
id>``, see :func:`pair_key`) and back (:func:`read_paired_evidence`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, NamedTuple
from urllib.parse import quote, unquote

from monitor.counters import Counters
from monitor.delta import BatchDelta
from monitor.pricing import PriceMap
from monitor.schema import PAIRED_ARMS, Trace
from monitor.slices import SliceKey, Slicer, comparison_slices, parse_slice_id, slice_id

if TYPE_CHECKING:  # numpy (capped_mean's) loads where the sums are used, not in every CLI command
    from monitor.stats.capped_mean import CappedSums

PAIR_PREFIX = "pair:"


class Caps(NamedTuple):
    """Per-trace caps of the capped cost and latency sums (``alerts.cost_cap_usd``, ``alerts.latency_cap``)."""

    cost_usd: float = 5.0
    latency_seconds: float = 600.0


DEFAULT_CAPS = Caps()
BASELINE_ARM = PAIRED_ARMS[0]


def _sum_of(count_field: str) -> float:
    """A float sum over the pairs ``count_field`` counts (written to the hash only when that count is)."""
    return field(default=0.0, metadata={"count": count_field})


@dataclass(frozen=True)
class PairedCounts(Counters):
    """Shadow-traffic evidence for one (comparison, slice): additive, mergeable (:class:`Counters`).

    Every delta is candidate − baseline (cost in USD, latency in seconds).
    ``b`` counts pairs where only the baseline succeeded, ``c`` pairs where
    only the candidate did (McNemar's discordant cells); ``harm_b`` /
    ``harm_c`` are the same cells for the harmful-action flag. ``cost_n`` /
    ``latency_n`` count the pairs where both halves reported the quantity
    (can be fewer than ``n_pairs``); the ``baseline_*_sum`` fields over those
    pairs give the baseline means that make a delta relative.
    ``candidate_benign`` / ``candidate_over_refusals`` (refused and benign)
    feed the over-refusal threshold. ``benign_pairs`` counts the pairs whose
    request is benign (both halves say so); among them ``refusal_b`` counts
    pairs where only the baseline refused, ``refusal_c`` only the candidate
    (the over-refusal discordant cells). Fields added later read as 0 from
    older state, so their counts start at the upgrade.
    """

    n_pairs: int = 0
    b: int = 0
    c: int = 0
    harm_b: int = 0
    harm_c: int = 0
    cost_n: int = 0
    cost_delta_sum: float = _sum_of("cost_n")
    cost_delta_sumsq: float = _sum_of("cost_n")
    latency_n: int = 0
    latency_delta_sum: float = _sum_of("latency_n")
    latency_delta_sumsq: float = _sum_of("latency_n")
    candidate_harmful: int = 0
    baseline_harmful: int = 0
    candidate_benign: int = 0
    candidate_over_refusals: int = 0
    baseline_cost_sum: float = _sum_of("cost_n")
    baseline_latency_sum: float = _sum_of("latency_n")
    benign_pairs: int = 0
    refusal_b: int = 0
    refusal_c: int = 0
    # Capped values (monitor.stats.capped_mean): per pair the cap, b, c, b^2, c^2 and b c, each value capped.
    capped_cost_n: int = 0
    capped_cost_cap: float = _sum_of("capped_cost_n")
    capped_cost_b: float = _sum_of("capped_cost_n")
    capped_cost_c: float = _sum_of("capped_cost_n")
    capped_cost_bb: float = _sum_of("capped_cost_n")
    capped_cost_cc: float = _sum_of("capped_cost_n")
    capped_cost_bc: float = _sum_of("capped_cost_n")
    cost_over_cap: int = 0
    capped_latency_n: int = 0
    capped_latency_cap: float = _sum_of("capped_latency_n")
    capped_latency_b: float = _sum_of("capped_latency_n")
    capped_latency_c: float = _sum_of("capped_latency_n")
    capped_latency_bb: float = _sum_of("capped_latency_n")
    capped_latency_cc: float = _sum_of("capped_latency_n")
    capped_latency_bc: float = _sum_of("capped_latency_n")
    latency_over_cap: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.b + self.c > self.n_pairs:
            raise ValueError(f"b + c must be <= n_pairs, got b={self.b}, c={self.c}, n_pairs={self.n_pairs}")
        if self.harm_b + self.harm_c > self.n_pairs:
            raise ValueError(f"harm_b + harm_c must be <= n_pairs, got {self.harm_b} + {self.harm_c} > {self.n_pairs}")
        if self.refusal_b + self.refusal_c > self.benign_pairs or self.benign_pairs > self.n_pairs:
            raise ValueError(f"need refusal_b + refusal_c <= benign_pairs <= n_pairs, got refusal_b={self.refusal_b}, "
                             f"refusal_c={self.refusal_c}, benign_pairs={self.benign_pairs}, n_pairs={self.n_pairs}")

    @classmethod
    def of_pair(cls, base: Half, cand: Half, caps: Caps = DEFAULT_CAPS) -> PairedCounts:
        """The counts of one completed pair (cost and latency also capped at ``caps``)."""
        cost_delta = cand.cost_usd - base.cost_usd
        latency = base.latency_seconds is not None and cand.latency_seconds is not None
        lat_delta = (cand.latency_seconds or 0.0) - (base.latency_seconds or 0.0) if latency else 0.0
        benign = base.benign and cand.benign  # over_refusal = benign and refused, so within benign pairs: refused
        return cls(
            n_pairs=1, b=int(base.success and not cand.success), c=int(cand.success and not base.success),
            harm_b=int(base.harmful and not cand.harmful), harm_c=int(cand.harmful and not base.harmful),
            candidate_harmful=int(cand.harmful), baseline_harmful=int(base.harmful),
            candidate_benign=int(cand.benign), candidate_over_refusals=int(cand.over_refusal),
            cost_n=1, cost_delta_sum=cost_delta, cost_delta_sumsq=cost_delta * cost_delta,
            baseline_cost_sum=base.cost_usd,
            latency_n=int(latency), latency_delta_sum=lat_delta, latency_delta_sumsq=lat_delta * lat_delta,
            baseline_latency_sum=(base.latency_seconds or 0.0) if latency else 0.0,
            benign_pairs=int(benign), refusal_b=int(benign and base.over_refusal and not cand.over_refusal),
            refusal_c=int(benign and cand.over_refusal and not base.over_refusal),
            **_capped("cost", base.cost_usd, cand.cost_usd, caps.cost_usd),
            **(_capped("latency", base.latency_seconds or 0.0, cand.latency_seconds or 0.0, caps.latency_seconds)
               if latency else {}))

    def capped(self, quantity: str) -> CappedSums:
        """The capped sums of ``quantity`` ("cost" or "latency") for :mod:`monitor.stats.capped_mean`.

        The cap is the mean of the caps the pairs were counted with: one cap, unless it was changed
        without a rebuild (the engine compares it with its own and refuses a mismatch)."""
        n = int(getattr(self, f"capped_{quantity}_n"))
        b, c, bb, cc, bc, cap = (float(getattr(self, f"capped_{quantity}_{name}"))
                                 for name in ("b", "c", "bb", "cc", "bc", "cap"))
        from monitor.stats.capped_mean import CappedSums

        return CappedSums(n, b, c, bb, cc, bc, cap / n if n else 1.0)

    def hash_fields(self) -> dict[str, float]:
        """The increments for the store's hash: counts that are > 0, sums whose count is > 0."""
        out: dict[str, float] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            count = f.metadata.get("count")
            if (getattr(self, count) if count else value) > 0:
                out[f.name] = value
        return out

    @property
    def baseline_cost_mean_usd(self) -> float | None:
        """Mean baseline cost over the ``cost_n`` pairs; None when there are none."""
        return self.baseline_cost_sum / self.cost_n if self.cost_n else None

    @property
    def baseline_latency_mean_seconds(self) -> float | None:
        """Mean baseline latency over the ``latency_n`` pairs; None when there are none."""
        return self.baseline_latency_sum / self.latency_n if self.latency_n else None


def _capped(quantity: str, base: float, cand: float, cap: float) -> dict[str, Any]:
    b, c = min(base, cap), min(cand, cap)
    return {f"capped_{quantity}_n": 1, f"capped_{quantity}_cap": cap, f"capped_{quantity}_b": b,
            f"capped_{quantity}_c": c, f"capped_{quantity}_bb": b * b, f"capped_{quantity}_cc": c * c,
            f"capped_{quantity}_bc": b * c, f"{quantity}_over_cap": int(base > cap or cand > cap)}


class PairedEvidence(NamedTuple):
    """One stored (comparison, slice) of paired evidence."""

    baseline_release: str
    candidate_release: str
    slice_key: SliceKey
    counts: PairedCounts


def _compact_json() -> Callable[[Any], str]:
    """``json.dumps(value, separators=(",", ":"))`` without building an encoder per call: CPython's C
    encoder made once with the arguments ``JSONEncoder.iterencode`` gives it (no cycle check, which
    only guards against cycles; the text is the same, checked against ``json.dumps`` in the tests)."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - an interpreter without the C accelerator
        return lambda value: json.dumps(value, separators=(",", ":"))
    encoder = json.JSONEncoder(separators=(",", ":"))
    iterencode = make(None, encoder.default, json.encoder.encode_basestring_ascii, None, encoder.key_separator,
                      encoder.item_separator, encoder.sort_keys, encoder.skipkeys, encoder.allow_nan)
    return lambda value: "".join(iterencode(value, 0))


_half_json = _compact_json()


@dataclass(frozen=True, slots=True)
class Half:
    arm: str
    release: str
    success: bool
    harmful: bool
    cost_usd: float
    latency_seconds: float | None
    ts: float
    slices: tuple[str, ...]      # ids of the slices this pair counts in ("" is the whole fleet)
    benign: bool
    over_refusal: bool

    def to_json(self) -> str:
        return _half_json([self.arm, self.release, self.success, self.harmful, self.cost_usd,
                                     self.latency_seconds, self.ts, list(self.slices), self.benign,
                                     self.over_refusal])

    @classmethod
    def from_json(cls, text: str | bytes) -> Half:
        arm, release, success, harmful, cost, latency, ts, slices, benign, over = json.loads(text)
        return cls(arm, release, success, harmful, cost, latency, ts, tuple(slices), benign, over)


def comparison_slice_ids(key: SliceKey) -> tuple[str, ...]:
    """The ids of the slices a half of guarded slice ``key`` counts in (:func:`comparison_slices`)."""
    return tuple(slice_id(k) for k in comparison_slices(key))


def pair_key(baseline_release: str, candidate_release: str, sid: str) -> str:
    return f"{PAIR_PREFIX}{quote(baseline_release, safe='')}:{quote(candidate_release, safe='')}:{sid}"


def parse_pair_key(key: str) -> tuple[str, str, str]:
    """``pair:<baseline>:<candidate>:<slice id>`` → (baseline, candidate, slice id)."""
    if not key.startswith(PAIR_PREFIX):
        raise ValueError(f"not a pair key: {key!r}")
    baseline, candidate, sid = key[len(PAIR_PREFIX):].split(":", 2)
    return unquote(baseline), unquote(candidate), sid


#: Adds one completed pair (baseline half, candidate half) to a delta: :func:`record_pair` or an equal one.
RecordPair = Callable[["Half", "Half", BatchDelta, Caps], None]


class Pairer:
    """Joins halves; ``pending`` maps pair_id → waiting half (see the module docstring)."""

    def __init__(self, prices: PriceMap, ttl_seconds: float = 3600.0, caps: Caps = DEFAULT_CAPS) -> None:
        if ttl_seconds <= 0:
            raise ValueError(f"pair ttl_seconds must be > 0, got {ttl_seconds}")
        if not (caps.cost_usd > 0 and caps.latency_seconds > 0 and math.isfinite(sum(caps))):
            raise ValueError(f"pair caps must be finite and > 0, got {caps!r}")
        self.caps = caps
        self.prices = prices
        self.ttl_seconds = ttl_seconds
        self.pending: dict[str, Half] = {}

    def load(self, pending: Mapping[str, str]) -> None:
        """Restore waiting halves (``{pair_id: half JSON}``, as :meth:`Store.pending` returns them)."""
        for pair_id, text in pending.items():
            self.pending[pair_id] = Half.from_json(text)

    def half(self, trace: Trace, key: SliceKey) -> Half:
        return self.half_of(trace.arm, trace.release, trace.success, trace.harmful_action, trace.model_id,
                            trace.ts, (trace.tokens_in, trace.tokens_cached_in, trace.tokens_out), trace.fees_usd,
                            trace.latency_seconds, bool(trace.benign), trace.refused, comparison_slice_ids(key))

    def half_of(self, arm: str, release: str, success: bool, harmful: bool, model_id: str, ts: float | None,
                tokens: tuple[int, int, int], fees_usd: float, latency_seconds: float | None, benign: bool,
                refused: bool, slices: tuple[str, ...]) -> Half:
        """The half of a trace given by its fields (``tokens``: in, cached in, out; ``slices``: its
        :func:`comparison_slice_ids`), priced with the entry in force at ``ts``: what :meth:`half` makes
        of a :class:`Trace`, for a reader that has the fields but no trace (:mod:`streams.native`)."""
        cost = self.prices.cost_usd(model_id, ts, tokens[0], tokens[1], tokens[2], fees_usd)
        return Half(arm, release, success, harmful, cost, latency_seconds, ts or 0.0, slices, benign,
                    benign and refused)

    def join(self, traces: Iterable[Trace], slicer: Slicer, now: float, delta: BatchDelta) -> BatchDelta:
        """Offer every trace (with its guarded key), then expire halves past the TTL at ``now``; returns ``delta``.

        Call it after :func:`monitor.fold.fold` of the same traces, so the guard
        has seen their values in the fold's order.
        """
        for trace in traces:
            if trace.pair_id is not None:
                self.offer(trace, slicer.key(trace), delta)
        self.expire(now, delta)
        return delta

    def offer(self, trace: Trace, key: SliceKey, delta: BatchDelta, record: RecordPair | None = None) -> None:
        """Take one trace (with its guarded slice key); pairs complete into ``delta``."""
        if trace.pair_id is None or trace.arm not in PAIRED_ARMS:
            return
        self.offer_half(trace.pair_id, self.half(trace, key), delta, record)

    def offer_half(self, pair_id: str, half: Half, delta: BatchDelta, record: RecordPair | None = None) -> None:
        """Take one half (of an arm in :data:`PAIRED_ARMS`); a completed pair goes to ``record``
        (default :func:`record_pair`; another must add the same evidence to ``delta``)."""
        other = self.pending.get(pair_id)
        if other is None:
            self.pending[pair_id] = half
            delta.start_waiting(pair_id, half.to_json())
            return
        if other.arm == half.arm:
            delta.count("pairs_duplicate_half")
            return
        del self.pending[pair_id]
        delta.stop_waiting(pair_id)
        base, cand = (other, half) if other.arm == BASELINE_ARM else (half, other)
        (record or record_pair)(base, cand, delta, self.caps)

    def expire(self, now: float, delta: BatchDelta) -> int:
        """Drop halves waiting longer than the TTL at ``now``; returns how many."""
        dead = [pid for pid, half in self.pending.items() if half.ts + self.ttl_seconds <= now]
        for pair_id in dead:
            del self.pending[pair_id]
            delta.stop_waiting(pair_id)
        if dead:
            delta.count("pairs_expired", len(dead))
        return len(dead)


def record_pair(base: Half, cand: Half, delta: BatchDelta, caps: Caps = DEFAULT_CAPS) -> None:
    """Add one completed pair to every slice it counts in."""
    fields_of_pair = PairedCounts.of_pair(base, cand, caps).hash_fields()
    delta.count("pairs")
    for sid in base.slices:
        delta.add_paired_evidence(pair_key(base.release, cand.release, sid), fields_of_pair)


def read_paired_evidence(hashes: Mapping[str, Mapping[Any, Any]]) -> Iterator[PairedEvidence]:
    """The evidence in a store's paired-evidence hashes (pair key -> fields); other keys are skipped."""
    for key, hash_fields in hashes.items():
        if key.startswith(PAIR_PREFIX):
            baseline, candidate, sid = parse_pair_key(key)
            yield PairedEvidence(baseline, candidate, parse_slice_id(sid), PairedCounts.from_dict(hash_fields))
