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
(:class:`HeldGroup`) have the same keys and the same arithmetic as
:func:`monitor.fold.group_traces`' groups, so the delta a batch
yields does not depend on which path folded which record (checked record
for record by ``tests/unit/streams/test_native.py``). Their sums stay
native (``fleetmon_native.HeldAggregates``): :class:`NativeSums` makes the
sums and places them where :func:`monitor.fold.place_groups` says, with
Python's additions in Python's order (``native/src/held.rs``), so a batch's
groups never become Python objects unless something reads them.

The schema's vocabularies (outcomes, arms, user signals, aliases) and the
value bounds of :mod:`monitor.limits` are passed from Python when a :class:`NativeFolder` is built, so
they have one definition. The module is optional: without it, or with
``FLEETMON_WORKER_NATIVE=0``, the worker folds in Python.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from monitor import limits
from monitor.aggregate import Aggregate
from monitor.delta import BatchDelta, WindowKey
from monitor.fold import GroupKey, Placeable, place_groups
from monitor.identity import Seen
from monitor.pairing import BASELINE_ARM, Caps, Half, Pairer, pair_key
from monitor.pricing import PriceMap, PricingError
from monitor.schema import ALIASES, ARMS, MAX_FUTURE_SKEW_SECONDS, OUTCOMES, PAIRED_ARMS, USER_SIGNALS
from monitor.sketch import DEFAULT_MIN_VALUE, DEFAULT_RELATIVE_ACCURACY, LogSketch
from monitor.slices import UNKNOWN, Slicer
from monitor.windows import Resolution

log = logging.getLogger("fleetmon.worker")

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

    groups: list[tuple[GroupKey, HeldGroup]]       # ordered by first position
    slow: list[int]                                # positions left to Python
    parts: list[tuple[int, float | None]]          # per part: traces folded, their latest event time
    identities: Seen = field(default_factory=dict)  # the version tuples it saw (monitor.identity)
    halves: list[NativeHalf] = field(default_factory=list)  # its traces with a pair_id, by position
    joined: Any = None   # instead, with ``native_join``: the halves held natively (``fleetmon_native.Halves``)
    held: Any = None     # the groups' sums (``fleetmon_native.HeldAggregates``)


def _aggregate(counts: dict[str, float], buckets: dict[int, int], zero_count: int) -> Aggregate:
    return Aggregate(counts, LogSketch.of_buckets(buckets, zero_count))


def empty_held() -> Any:
    """Held aggregates with nothing in them yet (``fleetmon_native.HeldAggregates``), for
    :class:`NativeSums` over Python aggregates alone (tests)."""
    if _native is None:
        raise RuntimeError("the native fold (fleetmon_native) is not installed; run `make install`")
    return _native.HeldAggregates()


class HeldGroup:
    """A group the native fold made (see :class:`monitor.fold.Placeable`): its sums are aggregate
    ``index`` of ``held``, made a Python :class:`Aggregate` only when :attr:`aggregate` is read."""

    __slots__ = ("_aggregate", "first", "held", "index", "latest", "traces")

    def __init__(self, held: Any, index: int, traces: int, latest: float, first: int) -> None:
        self.held, self.index, self.traces, self.latest, self.first = held, index, traces, latest, first
        self._aggregate: Aggregate | None = None

    @property
    def aggregate(self) -> Aggregate:
        if self._aggregate is None:
            self._aggregate = _aggregate(*self.held.aggregate(self.index))
        return self._aggregate


class NativeRefused(Exception):
    """The native sums cannot be made exactly as Python would make them: place the batch in Python."""


class HeldWindows:
    """A placement's windows and totals held natively (:class:`monitor.delta.HeldSums`)."""

    def __init__(self, placed: Any, window_keys: list[WindowKey], total_keys: list[str]) -> None:
        self.placed = placed
        self.window_keys = window_keys
        self.total_keys = total_keys

    def windows(self) -> list[Aggregate]:
        return [_aggregate(*parts) for parts in self.placed.aggregates()]

    def totals(self) -> list[Aggregate]:
        return [_aggregate(*parts) for parts in self.placed.aggregates(totals=True)]

    def window_traces(self) -> list[int]:
        """Each window's ``traces``, in :attr:`window_keys` order."""
        return list(self.placed.window_traces())

    def packed_windows(self, floats: Sequence[str], zero_field: str) -> list[str | None]:
        """Each window's packed text (``monitor.store.redis.packed.pack_python``'s), or None where
        Python must pack it (see ``native/src/held.rs``)."""
        return list(self.placed.packed(list(floats), zero_field))


class NativeSums:
    """:class:`monitor.fold.Summing` over a native fold's held aggregates: the sums are made and placed
    natively, in one call when :meth:`place` is reached (the GIL released). A group read by Python is
    added to the held aggregates as it is; anything that cannot be summed exactly as
    :class:`monitor.fold.AggregateSums` sums it (an ``int`` past ``i128``, an ``int`` where a ``float``
    was, another sketch accuracy, a delta that already holds windows) raises :class:`NativeRefused`."""

    def __init__(self, held: Any) -> None:
        self.held = held
        self.plan: list[int] = []
        self.built = -1   # the next sum's id, from the first add on

    def part(self, group: Placeable) -> int:
        if type(group) is HeldGroup and group.held is self.held:
            return group.index
        if self.built >= 0:
            raise RuntimeError("NativeSums: every part comes before the first sum")
        agg = group.aggregate
        latency = agg.latency
        if latency.relative_accuracy != DEFAULT_RELATIVE_ACCURACY or latency.min_value != DEFAULT_MIN_VALUE:
            raise NativeRefused(f"a sketch with other parameters ({latency!r})")
        index = self.held.add(agg.counts, latency.buckets, latency.zero_count)
        if index is None:
            raise NativeRefused("an aggregate whose values are not plain ints and floats")
        return int(index)

    def add(self, parts: list[int]) -> int:
        if self.built < 0:
            self.built = len(self.held)
        plan = self.plan
        plan.append(len(parts))
        plan.extend(parts)
        self.built += 1
        return self.built - 1

    def place(self, delta: BatchDelta, windows: list[tuple[WindowKey, int]], totals: list[tuple[str, int]]) -> None:
        if delta.windows or delta.totals:
            raise NativeRefused("the delta holds windows or totals already")
        window_slots: dict[WindowKey, int] = {}
        window_pairs: list[int] = []
        for key, held in windows:
            window_pairs.append(window_slots.setdefault(key, len(window_slots)))
            window_pairs.append(held)
        total_slots: dict[str, int] = {}
        total_pairs: list[int] = []
        for sid, held in totals:
            total_pairs.append(total_slots.setdefault(sid, len(total_slots)))
            total_pairs.append(held)
        try:
            placed = self.held.place(self.plan, window_pairs, len(window_slots), total_pairs, len(total_slots))
        except ValueError as exc:
            raise NativeRefused(str(exc)) from exc
        delta.hold(HeldWindows(placed, list(window_slots), list(total_slots)))


class NativeFolder:
    """A configured native fold (one per worker; thread-safe, holds no state between calls).

    ``native_join`` keeps the shadow halves native and joins them there (:func:`join_part`); without it
    they come back as :data:`NativeHalf` rows that Python joins. ``pair_id_slow`` leaves every trace with
    a ``pair_id`` to Python, as before the native path handed the pairer its halves. Both are kept so
    the differential tests can compare the paths.
    """

    def __init__(self, dimensions: Sequence[str], resolutions: Sequence[Resolution], *,
                 max_record_bytes: int, pair_id_slow: bool = False, native_join: bool = True,
                 threads: int = 1) -> None:
        if _native is None:
            raise RuntimeError("the native fold (fleetmon_native) is not installed; run `make install`")
        self.dimensions = tuple(dimensions)
        self.window_sizes = tuple(r.size_seconds for r in resolutions)
        self.native_join = native_join
        self._folder = _native.Folder(
            dimensions=list(dimensions), window_sizes=[r.size_seconds for r in resolutions],
            outcomes=list(OUTCOMES), arms=list(ARMS), user_signals=list(USER_SIGNALS), slow_keys=list(SLOW_KEYS),
            unknown=UNKNOWN, max_future_seconds=MAX_FUTURE_SKEW_SECONDS, max_record_bytes=max_record_bytes,
            pair_id_slow=pair_id_slow, relative_accuracy=DEFAULT_RELATIVE_ACCURACY, min_value=DEFAULT_MIN_VALUE,
            max_tokens=limits.MAX_TOKENS, max_count=limits.MAX_COUNT, max_latency_ms=limits.MAX_LATENCY_MS,
            max_fees_usd=limits.MAX_FEES_USD, max_ts=limits.MAX_TS, max_label_chars=limits.MAX_LABEL_CHARS,
            threads=threads)

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
        if self.native_join:
            rows, slow, parts, seen, joined, held = self._folder.fold(values, now, lengths, list(PAIRED_ARMS))
            halves: list[NativeHalf] = []
        else:
            rows, slow, parts, seen, halves, held = self._folder.fold(values, now, lengths)
            joined = None
        groups = [((dims, starts), HeldGroup(held, index, traces, group_latest, first))
                  for index, (dims, starts, traces, group_latest, first) in enumerate(rows)]
        identities: Seen = {(found[0], tuple(found[1:])): (latest, first) for found, latest, first in seen}
        return NativeFold(groups, slow, parts, identities, halves, joined, held)


def place_held(groups: list[tuple[GroupKey, Placeable]], slicer: Slicer, now: float,
               resolutions: Sequence[Resolution], held: Any) -> BatchDelta:
    """:func:`monitor.fold.place_groups` of ``groups`` into a new delta on :class:`NativeSums` over
    ``held`` (the delta's windows and totals held until read); in Python when the native sums refuse
    (the same delta either way). Placing the same groups twice gives the same delta (in Python, the
    first placement may merge into the groups' aggregates: a batch is decoded afresh to fold again)."""
    delta = BatchDelta()
    try:
        place_groups(groups, slicer, now, resolutions, delta, NativeSums(held))
    except NativeRefused as exc:
        log.info("placing a batch's %d groups in Python: %s", len(groups), exc)
        place_groups(groups, slicer, now, resolutions, delta := BatchDelta())
    return delta


class JoinInputs:
    """What the native join of a batch's halves needs from Python, resolved once per batch: the slice
    ids of each dimension tuple (``slices_of``: the guarded key's :func:`comparison_slice_ids`, shared
    with the Python join) and the price of each model in force over the batch's event times."""

    def __init__(self, joined: Any, slices_for: Callable[[tuple[str, ...]], tuple[str, ...]]) -> None:
        self.joined = joined
        self.slices = [None if dims is None else slices_for(dims) for dims in joined.dims()]
        self._rates: dict[int, list[tuple[float, float, float] | None]] = {}

    def rates(self, prices: PriceMap) -> list[tuple[float, float, float] | None]:
        """Per model, its rates when one price entry covers all its halves' times (else None: the
        native join refuses the part, and Python prices each half — or raises its PricingError)."""
        rates = self._rates.get(id(prices))
        if rates is None:
            rates = self._rates[id(prices)] = [None if span is None else _rates(prices, *span)
                                               for span in self.joined.models()]
        return rates


def _rates(prices: PriceMap, model: str, earliest: float, latest: float) -> tuple[float, float, float] | None:
    try:
        first, last = prices.price_for(model, earliest), prices.price_for(model, latest)
    except PricingError:
        return None
    if first is not last:   # price_for is monotone in time: one entry at both ends covers the span
        return None
    return first.input_usd_per_mtok, first.cached_input_usd_per_mtok, first.output_usd_per_mtok


def join_part(joined: Any, part: int, pairer: Pairer, inputs: JoinInputs, delta: BatchDelta) -> set[str] | None:
    """Offer part ``part``'s native halves to ``pairer`` as :meth:`Pairer.offer_half` would, one by one in
    position order, with :class:`PairEvidence`'s sums: the same pairer afterwards, and the same counters,
    waiting halves (same text) and evidence in ``delta`` (a fresh one). Its waiting-half changes are
    the net ones: a pair id that starts and stops waiting within the part is neither started nor
    stopped (the store never held it). Returns the pair ids that start waiting and that the pairer did
    not hold (see :func:`streams.batch.pair_batch`). The join runs natively and changes nothing until
    it has succeeded; None (nothing changed) when it cannot decide the part exactly as Python would
    (see ``native/src/join.rs``), and the caller pairs it in Python."""
    if delta.paired_evidence or delta.pending_set or delta.pending_del:
        raise ValueError("join_part needs a fresh delta (the sums and waiting changes assume one)")
    try:
        pairs, duplicates, dropped, fresh, waiting, evidence = joined.join(
            part, pairer.pending, inputs.slices, inputs.rates(pairer.prices), pairer.caps.cost_usd,
            pairer.caps.latency_seconds, BASELINE_ARM, PAIRED_ARMS[1])
    except ValueError:   # a refusal (e.g. a price that changes within the batch): Python decides the part
        return None
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:   # a native fault (a panic included): loud, and Python decides the part
        log.exception("the native pair join failed on part %d; pairing it in Python", part)
        return None
    pending = pairer.pending
    for pair_id in dropped:
        del pending[pair_id]
    delta.pending_del.update(dropped)    # stop_waiting, on a delta that starts none of them
    slices = inputs.slices
    for pair_id, arm, release, success, harmful, cost, latency, ts, dims, benign, over in waiting:
        half = pending[pair_id] = Half(arm, release, success, harmful, cost, latency, ts, slices[dims], benign, over)
        delta.start_waiting(pair_id, half.to_json())
    if pairs:
        delta.count("pairs", pairs)
    if duplicates:
        delta.count("pairs_duplicate_half", duplicates)
    for key, fields in evidence:
        delta.add_paired_evidence(key, fields)
    return set(fresh)


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
