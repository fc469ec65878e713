"""Canary evidence: cumulative, time- and task-type-stratified matched pairs from disjoint traffic (pure).

A canary's traces and the baseline's are different interactions, so there is
no natural pair. The ledger makes pairs that are valid by construction: time
is cut into blocks (``block_seconds``, default 10 minutes); in each closed
block, each comparison slice and each task type (a *cell*), ``m = min(n_b,
n_c)`` canary traces are matched at random with ``m`` baseline traces of the
same cell. Only counts are needed: the number of successes among the chosen
traces is hypergeometric, and so is the number of (success, success) pairs
of a random matching (:func:`match_cell`). The draws are seeded by the cell
(comparison, slice, block, task type, outcome), so a restarted engine makes
the same pairs. The matched pairs are added, block after block, to
cumulative :class:`monitor.pairing.PairedCounts` per (comparison, slice)
from the canary's first block on — the same counters as shadow pairs, tested
by the same exact betting e-processes (:mod:`alerts.paired`).

Why this is valid. Assume, within a cell, that each arm's traces are
independent with one success probability per arm (p_b, p_c) and that which
trace goes to the canary does not depend on its outcome given task type and
time (a router by user or request hash). A choice of traces made without
looking at outcomes keeps them independent with those probabilities, so
each matched pair's "baseline only succeeded" minus "canary only succeeded"
has mean p_b − p_c, independently of the earlier pairs. Under H0: p_b − p_c
≤ floor in every cell, the flip e-process of the pairs is a supermartingale,
whatever the traffic does between cells: a shift of the task mix (each cell
has one task type), a ramp of the canary's share and a drift shared by both
arms (each cell is one short block) all cancel. Left over: a drift *within*
a block, weighted by how unevenly the two arms spread over the block; with
10-minute blocks and a ramp that is a few hundredths of a point, far under
the 2-point success floor (the harm and over-refusal tests have floor 0 and
are exposed to it, in proportion to the within-block drift of those rates).

What it costs: a canary trace without a baseline twin in its cell is not
used (n_c > n_b, or a sparse slice), and only ``m`` of the baseline traces
are; a block is used once, ``grace_seconds`` after it ends (late traces
after that are not counted in the canary ledger). Cost and latency need
per-trace values, which the minute windows do not keep, so canary
comparisons have no cost or latency test yet.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from alerts.evidence import ArmCounts, CanaryStrata, Comparison
from monitor.pairing import PairedCounts
from monitor.slices import SliceKey, parse_slice_id, slice_id

__all__ = ["CanaryLedger", "match_cell", "match_strata"]

STATE_VERSION = 1


def _rng(seed_key: str) -> np.random.Generator:
    digest = hashlib.blake2b(seed_key.encode(), digest_size=16).digest()
    return np.random.Generator(np.random.PCG64(int.from_bytes(digest, "big")))


def _matched(rng: np.random.Generator, m: int, xb: int, nb: int, xc: int, nc: int) -> tuple[int, int, int]:
    """(baseline-only, canary-only, both) of ``m`` random pairs of traces with xb of nb / xc of nc positive."""
    if m == 0:
        return 0, 0, 0
    kb = int(rng.hypergeometric(xb, nb - xb, m)) if 0 < xb < nb else (m if xb == nb else 0)
    kc = int(rng.hypergeometric(xc, nc - xc, m)) if 0 < xc < nc else (m if xc == nc else 0)
    both = int(rng.hypergeometric(kb, m - kb, kc)) if 0 < kb < m and kc > 0 else (kc if kb == m else 0)
    return kb - both, kc - both, both


def match_cell(base: ArmCounts, cand: ArmCounts, seed_key: str) -> PairedCounts:
    """The counts of a random matching of ``min(n_b, n_c)`` canary traces with baseline traces of one cell.

    Success, harmful action and (among benign requests) over-refusal are each
    matched on their own draw: each test uses one outcome, and each draw is a
    random matching of that outcome's traces (the windows keep no joint counts).
    """
    m = min(base.n, cand.n)
    if m == 0:
        return PairedCounts()
    b, c, _ = _matched(_rng(seed_key + "|success"), m, base.successes, base.n, cand.successes, cand.n)
    hb, hc, h2 = _matched(_rng(seed_key + "|harmful"), m, base.harmful, base.n, cand.harmful, cand.n)
    benign = min(base.benign, cand.benign)
    rb, rc, r2 = _matched(_rng(seed_key + "|refusal"), benign, base.over_refusals, base.benign,
                          cand.over_refusals, cand.benign)
    return PairedCounts(n_pairs=m, b=b, c=c, harm_b=hb, harm_c=hc, baseline_harmful=hb + h2,
                        candidate_harmful=hc + h2, candidate_benign=benign, candidate_over_refusals=rc + r2,
                        benign_pairs=benign, refusal_b=rb, refusal_c=rc)


def match_strata(strata: CanaryStrata, seed_key: str) -> PairedCounts:
    """:func:`match_cell` in every stratum (task type) of one slice's block, summed."""
    total = PairedCounts()
    for stratum in sorted(strata.strata):
        base, cand = strata.strata[stratum]
        total = total.merge(match_cell(base, cand, f"{seed_key}|{stratum}"))
    return total


def _comparison_id(c: Comparison) -> str:
    return f"{c.baseline_release}\x1f{c.candidate_release}"


@dataclass
class CanaryLedger:
    """Cumulative matched-pair counts per canary comparison and slice, and the next block to use.

    ``next_block`` is None until the first evaluation; then every block that
    starts at or after it and has closed (ended ``grace_seconds`` ago) is
    folded once, in order (:meth:`due_blocks`, :meth:`add_block`).
    """

    block_seconds: float = 600.0
    next_block: float | None = None
    counts: dict[Comparison, dict[SliceKey, PairedCounts]] = field(default_factory=dict)
    #: Blocks that could not be read any more (older than the minute windows' retention) when caught up.
    missed_blocks: int = 0

    def due_blocks(self, now: float, grace_seconds: float, start_from: float, oldest: float) -> list[float]:
        """Starts of the closed blocks not yet folded, oldest first; blocks before ``oldest`` count as missed."""
        size = self.block_seconds
        if self.next_block is None:  # a new ledger: from the first block that can be read whole
            self.next_block = max(math.floor(start_from / size), math.ceil(oldest / size)) * size
        last = math.floor((now - grace_seconds) / size) * size - size  # the newest block that has closed
        first = self.next_block
        if first < oldest:
            readable = math.ceil(oldest / size) * size
            self.missed_blocks += max(0, round((min(readable, last + size) - first) / size))
            first = self.next_block = readable
        return [first + i * size for i in range(max(0, round((last - first) / size) + 1))]

    def add_block(self, block_start: float, cells: Mapping[Comparison, Mapping[SliceKey, CanaryStrata]]) -> None:
        """Fold one closed block's cells (per comparison and slice, per task type) into the ledger."""
        for comparison, slices in cells.items():
            mine = self.counts.setdefault(comparison, {})
            for key, strata in slices.items():
                seed = f"{_comparison_id(comparison)}|{slice_id(key)}|{int(block_start)}"
                mine[key] = mine.get(key, PairedCounts()).merge(match_strata(strata, seed))
        self.next_block = block_start + self.block_seconds

    def evidence(self) -> dict[Comparison, dict[SliceKey, PairedCounts]]:
        return {c: dict(s) for c, s in self.counts.items() if any(v.n_pairs for v in s.values())}

    def to_dict(self) -> dict[str, Any]:
        return {"version": STATE_VERSION, "block_seconds": self.block_seconds, "next_block": self.next_block,
                "missed_blocks": self.missed_blocks,
                "counts": {_comparison_id(c): {slice_id(k): v.to_dict() for k, v in s.items()}
                           for c, s in self.counts.items()}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], block_seconds: float) -> CanaryLedger:
        """The saved ledger; a different block size or version starts a new ledger (the old pairs stay valid,
        but mixing block sizes would change the cells mid-stream, so the ledger restarts at the next block)."""
        if d.get("version") != STATE_VERSION or float(d.get("block_seconds", 0)) != block_seconds:
            return cls(block_seconds=block_seconds, next_block=d.get("next_block"))
        counts: dict[Comparison, dict[SliceKey, PairedCounts]] = {}
        for cid, slices in d.get("counts", {}).items():
            baseline, candidate = cid.split("\x1f")
            comparison = Comparison(baseline, candidate, "canary")
            counts[comparison] = {parse_slice_id(sid): PairedCounts.from_dict(v) for sid, v in slices.items()}
        return cls(block_seconds=block_seconds, next_block=d.get("next_block"), counts=counts,
                   missed_blocks=int(d.get("missed_blocks", 0)))
