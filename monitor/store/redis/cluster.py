"""The aggregate store on a Redis Cluster (``redis.cluster = true``): one view per Kafka partition.

Layout (:mod:`monitor.store.redis.merge`): a :class:`~monitor.store.redis.store.RedisStore` *view*
per source under ``P:{t:<topic>:<partition>}``, so that everything one apply touches — windows,
count hashes, totals, the slices index, counters, the watermark, the generation marker, waiting
pair halves, paired evidence, release identities — hashes to that partition's slot and the apply
script (:mod:`monitor.store.redis.scripts`) runs whole on one node, exactly as on a single Redis.
The shared view ``P:{g}`` holds the admitted values of each dimension (the cardinality guard), the
alert engine's lifecycle state, the store's generation (its ``id`` and the restores counted) and
``P:{g}:views``, the registry of the sources that have a view.

Guarantees and their limits:

* an apply covers one source (:meth:`ClusterStore.apply_verified` raises ValueError otherwise; the
  worker splits a batch by partition first, :mod:`streams.apply`). It is atomic within its view, with
  the same watermark check as on one Redis, so a master lost with its slots — restarted empty, or a
  replica promoted that had not received the last applies — shows as that partition's watermark
  missing or behind the worker's, and the worker restores that partition from Kafka;
* the store's generation is the shared view's: each apply first writes it when absent, registers its
  view and reads it (one round trip to the shared slot), and refuses as lost state when it is not the
  one the worker expects (the shared slot lost: dims and lifecycle state with it). That check and the
  view's apply are two steps, not one script: a loss of the shared slot between them is caught by
  the next apply;
* readers read every registered view and merge: sums for additive fields, max for latest times.
  Each read costs one round trip (or one script) per view, so a reader's cost grows with the number
  of partitions; size the partition count for the workers, not more (docs/operating.md).

``P:{t:...}`` keys are only ever written by the apply of their partition, so views never overlap.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import redis
from redis.cluster import RedisCluster

from monitor.aggregate import Aggregate
from monitor.delta import BatchDelta
from monitor.store.base import (
    Applied,
    ApplyOutcome,
    Expected,
    Generation,
    LostState,
    OffsetRange,
    PendingChanges,
    StoreError,
    new_generation_id,
)
from monitor.store.redis.access import check_access
from monitor.store.redis.layout import GENERATION_ID_FIELD, IDENTITY, PAIRED, KeyLayout
from monitor.store.redis.merge import (
    VIEWS,
    check_prefix,
    glob_escape,
    global_prefix,
    merge_aggregates,
    merge_identities,
    merge_latest,
    one_source,
    split_view_key,
    sum_fields,
    sum_hashes,
    view_prefix,
)
from monitor.store.redis.store import RedisStore
from monitor.store.redis.wire import text
from monitor.windows import DEFAULT_RESOLUTIONS, Resolution

__all__ = ["ClusterStore", "connect_cluster"]


def connect_cluster(url: str) -> RedisCluster:
    """A cluster client from one node's URL (the others are discovered); credentials checked now."""
    try:
        client = RedisCluster.from_url(url, socket_timeout=30, socket_connect_timeout=5)
    except ValueError as exc:
        raise StoreError(f"bad Redis Cluster URL: {exc}") from exc
    except redis.RedisError as exc:
        raise StoreError(f"cannot reach the Redis Cluster at {url.split('@')[-1]}: {exc}") from exc
    check_access(cast("redis.Redis", client), url)
    return client


class ClusterStore:
    """The :class:`~monitor.store.base.Store` interface over a Redis Cluster (see the module docstring).

    Not a :class:`~monitor.store.base.ScriptableStore` on purpose: its keys are not under one prefix.
    The exporter's incremental reads take one reader per view (:mod:`monitor.store.redis.cluster_reads`).
    """

    #: The worker folds and applies each partition of a batch on its own (streams/apply.py).
    applies_per_source = True

    def __init__(self, client: RedisCluster, prefix: str = "fleetmon",
                 resolutions: Sequence[Resolution] = DEFAULT_RESOLUTIONS) -> None:
        self.cluster = client
        self.base_prefix = check_prefix(prefix)
        self.resolutions = tuple(resolutions)
        # RedisCluster has every command a view sends, routed by key (a view's keys share one slot)
        self._client = cast("redis.Redis", client)
        self.shared = RedisStore(self._client, global_prefix(prefix), self.resolutions)
        self._views: dict[str, RedisStore] = {}
        self._applied: set[str] = set()  # the sources this process applied to
        self._identities_outside_registry: bool | None = None  # see release_identities

    @classmethod
    def from_url(cls, url: str, prefix: str = "fleetmon",
                 resolutions: Sequence[Resolution] = DEFAULT_RESOLUTIONS) -> ClusterStore:
        return cls(connect_cluster(url), prefix, resolutions)

    # -- views ----------------------------------------------------------------------
    def view(self, source: str | None) -> RedisStore:
        """The partition view of ``source`` (built on first use; no I/O)."""
        key = source or ""
        found = self._views.get(key)
        if found is None:
            found = self._views[key] = RedisStore(self._client, view_prefix(self.base_prefix, key), self.resolutions)
        return found

    def sources(self) -> list[str]:
        """The sources with a view, sorted: the registry in the shared slot, plus those this process
        applied to (so a worker still finds its partitions' watermarks when the shared slot was lost)."""
        try:
            members = self.cluster.smembers(self.shared.keys.prefix + ":" + VIEWS)
        except redis.RedisError as exc:
            raise StoreError(f"reading the partition views of the Redis Cluster failed: {exc}") from exc
        return sorted({text(m) for m in cast("set[bytes]", members)} | self._applied)

    def views(self) -> list[RedisStore]:
        return [self.view(source) for source in self.sources()]

    # -- writing ----------------------------------------------------------------------
    def _shared_generation(self, source: str, new_generation: str) -> str:
        """Write the generation when absent, register ``source``'s view, return the generation (one round trip)."""
        keys = self.shared.keys
        try:
            pipe = self.cluster.pipeline()
            pipe.hsetnx(keys.generation(), GENERATION_ID_FIELD, new_generation)
            pipe.sadd(keys.prefix + ":" + VIEWS, source)
            pipe.hget(keys.generation(), GENERATION_ID_FIELD)
            reply = pipe.execute()
        except redis.RedisError as exc:
            raise StoreError(f"reading the state generation from the Redis Cluster failed: {exc}") from exc
        self._applied.add(source)
        return text(reply[2])

    def apply(self, delta: BatchDelta, source: str | None = None, first_offset: int | None = None,
              last_offset: int | None = None) -> bool:
        ranges = [] if source is None or first_offset is None or last_offset is None else \
            [(source, first_offset, last_offset)]
        return self.apply_ranges(delta, ranges, {source or "": (delta.pending_set, delta.pending_del)}) is None

    def apply_ranges(self, delta: BatchDelta, ranges: Sequence[OffsetRange],
                     pending: PendingChanges | None = None) -> tuple[str, int] | None:
        source = one_source(ranges, pending or {})
        self._shared_generation(source, new_generation_id())
        return self.view(source).apply_ranges(delta, ranges, pending)

    def apply_verified(self, delta: BatchDelta, ranges: Sequence[OffsetRange], pending: PendingChanges | None,
                       expected: Expected, new_generation: str) -> ApplyOutcome:
        """One source's apply into its view, checked against ``expected`` (see the module docstring)."""
        source = one_source(ranges, pending or {})
        generation = self._shared_generation(source, new_generation)
        if expected.generation is not None and expected.generation != generation:
            return LostState(expected, generation, {})
        mine = Expected(None, {s: mark for s, mark in expected.watermarks.items() if s == source})
        outcome = self.view(source).apply_verified(delta, ranges, pending, mine, generation)
        if isinstance(outcome, Applied):
            return Applied(generation)
        if isinstance(outcome, LostState):
            return LostState(expected, generation, outcome.behind)
        return outcome

    def generation(self) -> Generation:
        return self.shared.generation()

    def count_restore(self) -> None:
        self.shared.count_restore()

    def admit(self, dim: str, value: str, cap: int) -> bool:
        return self.shared.admit(dim, value, cap)

    def expire(self, now: float) -> int:
        """Nothing to do: Redis expires windows itself; returns 0."""
        return 0

    def get_state(self, name: str) -> dict | None:
        return self.shared.get_state(name)

    def put_state(self, name: str, state: dict) -> None:
        self.shared.put_state(name, state)

    # -- reading ------------------------------------------------------------------------
    def pending(self, source: str) -> dict[str, str]:
        return self.view(source).pending(source)

    def applied_offset(self, source: str) -> int | None:
        return self.view(source).applied_offset(source)

    def applied_offsets(self) -> dict[str, int]:
        out: dict[str, int] = {}
        try:
            for view in self.views():
                out.update(view.applied_offsets())
        except redis.RedisError as exc:
            raise StoreError(f"reading the watermarks from the Redis Cluster failed: {exc}") from exc
        return out

    def view_slices(self, since: float | None = None) -> list[tuple[RedisStore, dict[str, float]]]:
        """Each view with its active slices (those with an event at or after ``since``)."""
        try:
            return [(view, view.active_slices(since)) for view in self.views()]
        except redis.RedisError as exc:
            raise StoreError(f"reading the slices index from the Redis Cluster failed: {exc}") from exc

    def active_slices(self, since: float | None = None) -> dict[str, float]:
        return merge_latest(active for _view, active in self.view_slices(since))

    def window_aggregates(self, resolution: str, start: float, end: float,
                          slice_ids: Sequence[str]) -> dict[str, Aggregate]:
        ids = list(slice_ids)
        wanted = set(ids)
        parts = []
        for view, active in self.view_slices():
            mine = [sid for sid in active if sid in wanted]  # a view never wrote a slice it does not index
            if mine:
                parts.append(view.window_aggregates(resolution, start, end, mine))
        if not parts and ids and resolution not in {r.name for r in self.resolutions}:
            raise StoreError(f"unknown resolution {resolution!r}; configured: {[r.name for r in self.resolutions]}")
        return merge_aggregates(parts, ids)

    def totals(self, slice_ids: Sequence[str] | None = None) -> dict[str, Aggregate]:
        per_view = self.view_slices()
        ids = list(merge_latest(active for _v, active in per_view)) if slice_ids is None else list(slice_ids)
        wanted = set(ids)
        parts = [view.totals(mine) for view, active in per_view if (mine := [s for s in active if s in wanted])]
        return merge_aggregates(parts, ids)

    def counters(self) -> dict[str, float]:
        try:
            return sum_fields(view.counters() for view in self.views())
        except redis.RedisError as exc:
            raise StoreError(f"reading the counters from the Redis Cluster failed: {exc}") from exc

    def _hashes(self, family: str, prefix: str = "", keys: Sequence[str] | None = None
                ) -> list[tuple[str, dict[str, float]]]:
        """Every ``P:{t:<source>}:<family>:<name>`` hash (or those of ``keys``) as ``(name, fields)``: one scan
        of the cluster without ``keys``; a key with an empty name (the identity registry set) is left out."""
        pattern = f"{glob_escape(self.base_prefix)}:{{t:*}}:{family}:{glob_escape(prefix)}*"
        try:
            if keys is None:
                keys = [key for k in self.cluster.scan_iter(match=pattern, count=1000)
                        if not (key := text(k)).endswith(f"}}:{family}:")]
            pipe = self.cluster.pipeline()
            for key in keys:
                pipe.hgetall(key)
            hashes = pipe.execute() if keys else []
        except redis.RedisError as exc:
            raise StoreError(f"reading {family}: hashes from the Redis Cluster failed: {exc}") from exc
        out = []
        for key, fields in zip(keys, hashes, strict=True):
            parts = split_view_key(self.base_prefix, key)
            if parts is not None and parts[1].startswith(family + ":"):
                out.append((parts[1][len(family) + 1:], {text(k): float(v) for k, v in fields.items()}))
        return out

    def paired_evidence(self, prefix: str = "") -> dict[str, dict[str, float]]:
        return sum_hashes({name: fields} for name, fields in self._hashes(PAIRED, prefix))

    def release_identities(self) -> dict[str, dict[str, float]]:
        """Every view's identity hashes merged, found through each view's registry set (as
        :meth:`RedisStore.release_identities`; the first read also scans once for hashes written
        before the registries existed, and every read does while some are found)."""
        views = self.views()
        try:
            pipe = self.cluster.pipeline()
            for view in views:
                pipe.smembers(view.keys.identity_base())
            registered = pipe.execute() if views else []
        except redis.RedisError as exc:
            raise StoreError(f"reading the release registries from the Redis Cluster failed: {exc}") from exc
        keys = {view.keys.identity_base() + text(member)
                for view, members in zip(views, registered, strict=True) for member in members}
        if self._identities_outside_registry is not False:
            pattern = f"{glob_escape(self.base_prefix)}:{{t:*}}:{IDENTITY}:*"
            try:
                scanned = {key for k in self.cluster.scan_iter(match=pattern, count=1000)
                           if not (key := text(k)).endswith(f"}}:{IDENTITY}:")}
            except redis.RedisError as exc:
                raise StoreError(f"reading {IDENTITY}: hashes from the Redis Cluster failed: {exc}") from exc
            self._identities_outside_registry = bool(scanned - keys)
            keys |= scanned
        found = self._hashes(IDENTITY, keys=sorted(keys))
        return merge_identities({release: fields} for release, fields in found if fields)

    def clear(self) -> int:
        """Delete every key of every view and of the shared view; returns how many."""
        deleted = 0
        try:
            keys = list(self.cluster.scan_iter(match=f"{glob_escape(self.base_prefix)}:{{*}}:*", count=1000))
            for at in range(0, len(keys), 1000):  # one DEL per slot of each chunk (a view's keys share one)
                deleted += int(self.cluster.delete(*keys[at:at + 1000]))
        except redis.RedisError as exc:
            raise StoreError(f"clearing the Redis Cluster store failed: {exc}") from exc
        self._views.clear()
        self._applied.clear()
        return deleted

    def nodes(self) -> dict[str, str | None]:
        """Per source the node (``host:port``) serving its view's slot now."""
        out: dict[str, str | None] = {}
        for source in self.sources():
            node = self.cluster.get_node_from_key(KeyLayout(view_prefix(self.base_prefix, source)).offsets())
            out[source] = node.name if node is not None else None
        return out
