"""The native fast path of the streaming fold (the compiled ``fleetmon_native``).

One call per batch decodes, validates and group-folds the records the
native code can take — plain full-form traces — with the GIL released, and
returns the positions of the others, which Python decides as before
(:func:`monitor.schema.validate` writes every rejection reason). For the
traces it folded that carry a ``pair_id`` it also returns the fields the
shadow pairer needs (:data:`NativeHalf`), so paired traffic stays on this
path: :func:`streams.batch.pair_batch` offers them to the same
:class:`monitor.pairing.Pairer`, in the same order, as Python-read traces
(same waiting halves, same stored text, same evidence). Its groups
are :class:`monitor.fold.Group` values with the same keys and the same
arithmetic as :func:`monitor.fold.group_traces`, so the delta a batch
yields does not depend on which path folded which record (checked record
for record by ``tests/unit/streams/test_native.py``).

The schema's vocabularies (outcomes, arms, user signals, aliases) and the
value bounds of :mod:`monitor.limits` are passed from Python when a :class:`NativeFolder` is built, so
they have one definition. The module is optional: without it, or with
``FLEETMON_WORKER_NATIVE=0``, the worker folds in Python.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from monitor import limits
from monitor.aggregate import Aggregate
from monitor.delta import BatchDelta
from monitor.fold import Group, GroupKey
from monitor.identity import Seen
from monitor.pairing import Caps, Half, pair_key
from monitor.schema import ALIASES, ARMS, MAX_FUTURE_SKEW_SECONDS, OUTCOMES, USER_SIGNALS
from monitor.sketch import DEFAULT_MIN_VALUE, DEFAULT_RELATIVE_ACCURACY, LogSketch
from monitor.slices import UNKNOWN
from monitor.windows import Resolution

try:
    import fleetmon_native as _native
except ImportError:  # pragma: no cover - built by `make install`; the worker then folds in Python
    _native = None

#: Keys that always send a record to Python: the OTel aliases are renamed
#: there, and ``_lat_seconds`` is the compact form's internal latency name.
SLOW_KEYS = (*ALIASES, "_lat_seconds")


def available() -> bool:
    """True when the compiled module is installed."""
    return _native is not None


#: A folded trace with a ``pair_id``: ``(position, pair_id, arm, release, dimension values (missing ones
#: as ``unknown``, before the cardinality guard), (success, harmful_action, benign, refused), model_id,
#: (tokens_in, tokens_cached_in, tokens_out), fees_usd, latency_seconds or None, ts)``.
NativeHalf = tuple[int, str, str, str, tuple[str, ...], tuple[bool, bool, bool, bool], str,
                   tuple[int, int, int], float, float | None, float]


@dataclass(slots=True)
class NativeFold:
    """What the native pass made of a batch."""

    groups: list[tuple[GroupKey, Group]]           # ordered by first position
    slow: list[int]                                # positions left to Python
    parts: list[tuple[int, float | None]]          # per part: traces folded, their latest event time
    identities: Seen = field(default_factory=dict)  # the version tuples it saw (monitor.identity)
    halves: list[NativeHalf] = field(default_factory=list)  # its traces with a pair_id, by position


class NativeFolder:
    """A configured native fold (one per worker; thread-safe, holds no state between calls).

    ``pair_id_slow`` leaves every trace with a ``pair_id`` to Python, as before the native path handed
    the pairer its halves (kept so the differential tests can compare the two).
    """

    def __init__(self, dimensions: Sequence[str], resolutions: Sequence[Resolution], *,
                 max_record_bytes: int, pair_id_slow: bool = False) -> None:
        if _native is None:
            raise RuntimeError("the native fold (fleetmon_native) is not installed; run `make install`")
        self.dimensions = tuple(dimensions)
        self.window_sizes = tuple(r.size_seconds for r in resolutions)
        self._folder = _native.Folder(
            dimensions=list(dimensions), window_sizes=[r.size_seconds for r in resolutions],
            outcomes=list(OUTCOMES), arms=list(ARMS), user_signals=list(USER_SIGNALS), slow_keys=list(SLOW_KEYS),
            unknown=UNKNOWN, max_future_seconds=MAX_FUTURE_SKEW_SECONDS, max_record_bytes=max_record_bytes,
            pair_id_slow=pair_id_slow, relative_accuracy=DEFAULT_RELATIVE_ACCURACY, min_value=DEFAULT_MIN_VALUE,
            max_tokens=limits.MAX_TOKENS, max_count=limits.MAX_COUNT, max_latency_ms=limits.MAX_LATENCY_MS,
            max_fees_usd=limits.MAX_FEES_USD, max_ts=limits.MAX_TS, max_label_chars=limits.MAX_LABEL_CHARS)

    def folds_like(self, dimensions: Sequence[str], resolutions: Sequence[Resolution]) -> bool:
        """True when this folder groups by ``dimensions`` and the windows of ``resolutions``."""
        return self.dimensions == tuple(dimensions) and self.window_sizes == tuple(r.size_seconds for r in resolutions)

    def fold(self, values: list[Any], now: float, part_lengths: Sequence[int] | None = None) -> NativeFold:
        """Fold ``values`` (bytes, or None for a tombstone) at ``now`` (epoch seconds).

        ``part_lengths`` splits ``values`` into consecutive parts (one per
        partition) for the per-part figures. A group's ``first`` is the index
        in ``values`` of its first trace.
        """
        lengths = None if part_lengths is None else list(part_lengths)
        rows, slow, parts, seen, halves = self._folder.fold(values, now, lengths)
        groups = []
        for dims, starts, counts, buckets, zero, group_latest, first in rows:
            agg = Aggregate(counts, LogSketch.of_buckets(buckets, zero))
            groups.append(((dims, starts), Group(agg, group_latest, first)))
        identities: Seen = {(found[0], tuple(found[1:])): (latest, first) for found, latest, first in seen}
        return NativeFold(groups, slow, parts, identities, halves)


class PairEvidence:
    """Sums the evidence of completed pairs natively: :func:`monitor.pairing.record_pair` (a
    ``record`` for :meth:`monitor.pairing.Pairer.offer_half`) with the same float operations in the
    same order, so :meth:`flush` adds to the delta exactly what ``record_pair`` would have added
    pair by pair into a delta that held no paired evidence before. One per partition's batch.
    """

    def __init__(self, caps: Caps) -> None:
        if _native is None:
            raise RuntimeError("the native fold (fleetmon_native) is not installed; run `make install`")
        self.caps = caps
        self._sums = _native.PairEvidence(caps.cost_usd, caps.latency_seconds)
        self._keys: dict[tuple[str, str, tuple[str, ...]], tuple[str, ...]] = {}

    def record(self, base: Half, cand: Half, delta: BatchDelta, caps: Caps) -> None:
        if caps != self.caps:
            raise ValueError(f"PairEvidence sums pairs capped at {self.caps}, got a pair capped at {caps}")
        slices = (base.release, cand.release, base.slices)
        keys = self._keys.get(slices)
        if keys is None:
            keys = self._keys[slices] = tuple(pair_key(base.release, cand.release, sid) for sid in base.slices)
        self._sums.add(keys, (base.success, base.harmful, base.cost_usd, base.latency_seconds, base.benign,
                              base.over_refusal),
                       (cand.success, cand.harmful, cand.cost_usd, cand.latency_seconds, cand.benign,
                        cand.over_refusal))
        delta.count("pairs")

    def flush(self, delta: BatchDelta) -> None:
        """Add the sums so far to ``delta`` (which must hold no paired evidence of its own) and start again."""
        if delta.paired_evidence:
            raise ValueError("PairEvidence.flush needs a delta without paired evidence (the sums would be "
                             "added in another order than record_pair adds them)")
        for key, fields in self._sums.drain():
            delta.add_paired_evidence(key, fields)


def pair_evidence_fields() -> frozenset[str]:
    """The PairedCounts fields the native sums know (must equal the dataclass's)."""
    if _native is None:
        raise RuntimeError("the native fold (fleetmon_native) is not installed")
    return frozenset(_native.PairEvidence.field_names())


def known_fields() -> frozenset[str]:
    """The full-form fields the native reader knows (must equal ``monitor.schema.KNOWN_FIELDS``)."""
    if _native is None:
        raise RuntimeError("the native fold (fleetmon_native) is not installed")
    return frozenset(_native.known_fields())
