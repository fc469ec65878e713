"""Redis store: the streaming workers' shared state (an edge module: thin).

Keys are named by :mod:`monitor.store.redis.layout` and written and merged by the
scripts of :mod:`monitor.store.redis.scripts`. A batch is applied by one script
(one round trip, atomic): it covers consecutive records of one or more
partitions (sources); if any source's watermark is at or past its first offset
nothing is written and the refusal names that watermark; otherwise every
increment, TTL, zset update and waiting pair half is written and every watermark
advanced, so a redelivered batch is skipped and a half-applied batch cannot
exist. A window hash is one packed field (:mod:`monitor.store.redis.layout`) that the
apply merges into. The same apply adds each window's trace count to its count hash
(``P:wc:...``), so a count field always equals its window's ``traces``; a count
hash expires with the last window it can hold, so a reader must not trust a
field whose window is past retention. Reads merge hashes server-side, one
merged hash per slice.

Redis Cluster: the scripts touch keys they build themselves, which a cluster
node allows only for keys of its own slots, so this store runs on one Redis,
or as one *view* of :class:`~monitor.store.redis.cluster.ClusterStore`, which
gives each Kafka partition a prefix with a hash tag (``P:{t:<topic>:<partition>}``)
so that every key one apply touches is in one slot (docs/operating.md "Redis Cluster").
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Protocol, cast

import orjson
import redis

from monitor.aggregate import Aggregate
from monitor.delta import BatchDelta
from monitor.identity import MAX_IDENTITIES_PER_RELEASE, OVERFLOW_FIELD
from monitor.slices import CardinalityGuard
from monitor.store.base import (
    AlreadyApplied,
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
from monitor.store.redis import scripts
from monitor.store.redis.access import check_access
from monitor.store.redis.layout import (
    COUNT_BUCKET_WINDOWS,
    GENERATION_ID_FIELD,
    RESTORES_FIELD,
    KeyLayout,
    count_bucket,
    last_window_of_bucket,
)
from monitor.store.redis.packed import hash_fields, packed_windows
from monitor.store.redis.wire import text
from monitor.windows import DEFAULT_RESOLUTIONS, Resolution

__all__ = ["COUNT_BUCKET_WINDOWS", "RedisGuard", "RedisStore", "connect"]



def connect(url: str) -> redis.Redis:
    """A client for ``url`` (``redis://``, ``rediss://`` with TLS, user and password in the URL).

    Credentials and TLS are checked now (:func:`~monitor.store.redis.access.check_access`): a wrong
    password is a StoreError naming Redis, never a retry loop.
    """
    try:
        client = redis.Redis.from_url(url, socket_timeout=30, socket_connect_timeout=5)
    except ValueError as exc:
        raise StoreError(f"bad Redis URL: {exc}") from exc
    check_access(client, url)
    return client


class RedisStore:
    """The :class:`~monitor.store.base.Store` interface over one Redis."""

    def __init__(self, client: redis.Redis, prefix: str = "fleetmon",
                 resolutions: Sequence[Resolution] = DEFAULT_RESOLUTIONS) -> None:
        self.client = client
        self.prefix = prefix
        self.keys = KeyLayout(prefix)
        self.resolutions = tuple(resolutions)
        self._apply = client.register_script(scripts.APPLY)
        self._merge = client.register_script(scripts.MERGE)
        self._admit = client.register_script(scripts.ADMIT)
        self._identities_outside_registry: bool | None = None  # see release_identities

    @classmethod
    def from_url(cls, url: str, prefix: str = "fleetmon",
                 resolutions: Sequence[Resolution] = DEFAULT_RESOLUTIONS) -> RedisStore:
        return cls(connect(url), prefix, resolutions)

    # -- keys (named by the layout; kept here for callers that hold a store) ---------
    def window_key(self, resolution: str, start: int, sid: str) -> str:
        return self.keys.window(resolution, start, sid)

    def total_key(self, sid: str) -> str:
        return self.keys.totals(sid)

    def count_bucket(self, resolution: Resolution, start: int) -> int:
        """The first window start of the count hash holding window ``start``."""
        return count_bucket(resolution, start)

    def count_key(self, resolution: str, bucket: int, sid: str) -> str:
        """The count hash (window start → traces) of ``sid``'s windows in ``bucket``."""
        return self.keys.window_counts(resolution, bucket, sid)

    def pending_key(self, source: str | None) -> str:
        return self.keys.pending(source)

    # -- writing ------------------------------------------------------------------
    def payload(self, delta: BatchDelta, pending: PendingChanges | None = None) -> bytes:
        """The JSON (UTF-8) the apply script reads: every increment, expiry, zset score and waiting pair half.

        A window's increment is its packed text (:func:`monitor.store.redis.packed.pack`, merged by
        the script); other hashes' are per field. Values are decimal text (HINCRBY/HINCRBYFLOAT take them as they are;
        a Lua number would be printed with 14 digits). ``pending`` maps a
        source to the pair halves that start waiting (``{pair_id: half}``)
        and stop waiting (pair ids) in its ``P:pending:<source>`` hash.
        """
        ints: dict[str, dict[str, str]] = {}
        floats: dict[str, dict[str, str]] = {}
        windows: dict[str, str] = {}
        expire_at: dict[str, str] = {}

        def add(key: str, agg: Aggregate) -> None:
            ints[key], as_float = hash_fields(agg)
            if as_float:
                floats[key] = as_float

        by_name = {r.name: r for r in self.resolutions}
        keys = self.keys
        window_key, count_key = keys.window, keys.window_counts
        # per window start: its expiry, and its count bucket's (None for an unknown resolution: no reader
        # uses its counts), the same for every slice (a replay batch has ~40 starts and ~17,000 windows)
        per_start: dict[tuple[str, int], tuple[str, tuple[int, str, str] | None]] = {}
        for (res, start, sid), packed, traces in packed_windows(delta):
            key = window_key(res, start, sid)
            windows[key] = packed
            known = per_start.get((res, start))
            if known is None:
                at = delta.expire_at[(res, start)]
                resolution = by_name.get(res)
                bucketed = None
                if resolution is not None:
                    bucket = count_bucket(resolution, start)
                    # the expiry of the bucket's last window: this window's, shifted
                    bucketed = (bucket, str(start), str(at + last_window_of_bucket(resolution, bucket) - start))
                known = per_start[(res, start)] = (str(at), bucketed)
            expire_at[key], bucketed = known
            if bucketed is not None and traces:
                bucket, start_text, bucket_expire_at = bucketed
                counts_key = count_key(res, bucket, sid)
                window_counts = ints.setdefault(counts_key, {})
                before = window_counts.get(start_text)
                window_counts[start_text] = str(traces) if before is None else str(int(before) + traces)
                expire_at[counts_key] = bucket_expire_at
        for sid, agg in delta.totals.items():
            add(keys.totals(sid), agg)
        if delta.counters:
            ints[keys.counters()] = {name: str(int(n)) for name, n in delta.counters.items()}
        for key, fields in delta.paired_evidence.items():  # paired evidence: all HINCRBYFLOAT
            floats.setdefault(keys.paired(key), {}).update(
                {name: repr(float(value)) for name, value in fields.items()})
        waiting = {keys.pending(source): {"start": dict(starts), "stop": sorted(stops)}
                   for source, (starts, stops) in (pending or {}).items() if starts or stops}
        identities = {"cap": MAX_IDENTITIES_PER_RELEASE, "overflow": OVERFLOW_FIELD,
                      "registry": keys.identity_base(),  # the registry set: see release_identities
                      "hashes": {keys.identity(release): {name: repr(float(ts)) for name, ts in fields.items()}
                                 for release, fields in delta.identities.items()}}
        return orjson.dumps({"windows": windows, "ints": ints, "floats": floats, "expire_at": expire_at,
                             "last_seen": delta.last_seen, "pending": waiting, "identities": identities})

    def pending(self, source: str) -> dict[str, str]:
        return {text(k): text(v) for k, v in self.client.hgetall(self.keys.pending(source)).items()}

    def apply(self, delta: BatchDelta, source: str | None = None, first_offset: int | None = None,
              last_offset: int | None = None) -> bool:
        """Apply ``delta`` atomically; with a source and offsets, only when the
        source's watermark is below ``first_offset``, advancing it to ``last_offset``."""
        ranges = [] if source is None or first_offset is None or last_offset is None else \
            [(source, first_offset, last_offset)]
        return self.apply_ranges(delta, ranges, {source or "": (delta.pending_set, delta.pending_del)}) is None

    def apply_ranges(self, delta: BatchDelta, ranges: Sequence[OffsetRange],
                     pending: PendingChanges | None = None) -> tuple[str, int] | None:
        """Apply ``delta`` and advance every ``(source, first, last)`` watermark, atomically.

        Nothing is written when any source's watermark is at or past its
        ``first``: the refusal ``(source, watermark)`` is returned instead
        (None when applied). ``pending`` as in :meth:`payload`.
        """
        outcome = self.apply_payload(self.payload(delta, pending), ranges, None, new_generation_id())
        if isinstance(outcome, AlreadyApplied):
            return outcome.source, outcome.watermark
        return None

    def apply_verified(self, delta: BatchDelta, ranges: Sequence[OffsetRange], pending: PendingChanges | None,
                       expected: Expected, new_generation: str) -> ApplyOutcome:
        """:meth:`apply_ranges`, refused as :class:`LostState` when Redis does not hold ``expected``
        (checked in the same script, so no apply can slip in between the check and the write)."""
        return self.apply_payload(self.payload(delta, pending), ranges, expected, new_generation)

    def apply_payload(self, payload: str | bytes, ranges: Sequence[OffsetRange], expected: Expected | None,
                      new_generation: str) -> ApplyOutcome:
        """:meth:`apply_verified` (unchecked without ``expected``) of a :meth:`payload` built beforehand:
        the part that waits for Redis (a worker builds the next batch's payload meanwhile, streams/apply.py)."""
        check = "" if expected is None else json.dumps(
            {"generation": expected.generation,
             "watermarks": {source: str(mark) for source, mark in expected.watermarks.items()}})
        args = [json.dumps([[source, str(first), str(last)] for source, first, last in ranges]),
                payload, new_generation, check]
        try:
            reply = self._apply(keys=[self.keys.offsets(), self.keys.slices(), self.keys.generation()], args=args)
        except redis.RedisError as exc:
            raise StoreError(f"applying a batch to Redis failed: {exc}") from exc
        kind = int(reply[0])
        if kind == 1:
            return Applied(text(reply[1]))
        if kind == 0:
            return AlreadyApplied(text(reply[1]), int(reply[2]))
        assert expected is not None  # the script reports a loss only when asked to check
        flat = [text(x) for x in reply[2]]
        behind = {source: int(mark) if mark else None for source, mark in zip(flat[0::2], flat[1::2])}
        return LostState(expected, text(reply[1]) or None, behind)

    def generation(self) -> Generation:
        try:
            fields = {text(k): text(v) for k, v in self.client.hgetall(self.keys.generation()).items()}
        except redis.RedisError as exc:
            raise StoreError(f"reading the state generation from Redis failed: {exc}") from exc
        return Generation(fields.get(GENERATION_ID_FIELD), int(fields.get(RESTORES_FIELD, 0)))

    def count_restore(self) -> None:
        try:
            self.client.hincrby(self.keys.generation(), RESTORES_FIELD, 1)
        except redis.RedisError as exc:
            raise StoreError(f"counting a restore in Redis failed: {exc}") from exc

    def admit(self, dim: str, value: str, cap: int) -> bool:
        try:
            return bool(self._admit(keys=[self.keys.dims(dim)], args=[value, cap]))
        except redis.RedisError as exc:
            raise StoreError(f"cardinality guard in Redis failed: {exc}") from exc

    def expire(self, now: float) -> int:
        """Nothing to do: Redis expires windows itself (EXPIREAT at the apply); returns 0."""
        return 0

    # -- reading --------------------------------------------------------------------
    def applied_offset(self, source: str) -> int | None:
        value = self.client.hget(self.keys.offsets(), source)
        return None if value is None else int(value)

    def applied_offsets(self) -> dict[str, int]:
        return {text(k): int(v) for k, v in self.client.hgetall(self.keys.offsets()).items()}

    def active_slices(self, since: float | None = None) -> dict[str, float]:
        low = "-inf" if since is None else since
        rows = self.client.zrangebyscore(self.keys.slices(), low, "+inf", withscores=True)
        return {text(member): float(score) for member, score in cast("list[tuple[bytes, float]]", rows)}

    def _merge_groups(self, groups: list[list[str]], chunk_keys: int = 20_000) -> list[Aggregate]:
        out: list[Aggregate] = []
        i = 0
        while i < len(groups):
            keys: list[str] = []
            sizes: list[int] = []
            while i < len(groups) and (not keys or len(keys) + len(groups[i]) <= chunk_keys):
                keys.extend(groups[i])
                sizes.append(len(groups[i]))
                i += 1
            try:
                result = self._merge(keys=keys, args=sizes)
            except redis.RedisError as exc:
                raise StoreError(f"reading windows from Redis failed: {exc}") from exc
            for flat in result:
                out.append(Aggregate.from_dict(dict(zip(flat[0::2], flat[1::2]))))
        return out

    def window_aggregates(self, resolution: str, start: float, end: float,
                          slice_ids: Sequence[str]) -> dict[str, Aggregate]:
        res = {r.name: r for r in self.resolutions}.get(resolution)
        if res is None:
            raise StoreError(f"unknown resolution {resolution!r}; configured: {[r.name for r in self.resolutions]}")
        starts = res.starts_between(start, end)
        groups = [[self.keys.window(resolution, s, sid) for s in starts] for sid in slice_ids]
        return dict(zip(slice_ids, self._merge_groups(groups)))

    def totals(self, slice_ids: Sequence[str] | None = None) -> dict[str, Aggregate]:
        ids = list(self.active_slices()) if slice_ids is None else list(slice_ids)
        return dict(zip(ids, self._merge_groups([[self.keys.totals(sid)] for sid in ids])))

    def counters(self) -> dict[str, float]:
        return {text(k): float(v) for k, v in self.client.hgetall(self.keys.counters()).items()}

    def paired_evidence(self, prefix: str = "") -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        base = self.keys.paired_base()
        for key in self.client.scan_iter(match=f"{base}{prefix}*", count=1000):
            name = key.decode()[len(base):]
            out[name] = {text(k): float(v) for k, v in self.client.hgetall(key).items()}
        return out

    def release_identities(self) -> dict[str, dict[str, float]]:
        """Every ``P:id:<release>`` hash (see :mod:`monitor.identity`), found through the registry.

        The apply adds each release whose hash it writes to the registry set ``P:id:`` (the
        empty release name; in the ``id:`` family, so a rebuild replaces it with the hashes),
        so a read costs two round trips, not a SCAN of the keyspace. The first read of this
        store object also scans once for hashes written before the registry existed; only
        while some are found does every read scan again.
        """
        base = self.keys.identity_base()
        try:
            names = {text(member) for member in self.client.smembers(base)}
            if self._identities_outside_registry is not False:
                scanned = {name for key in self.client.scan_iter(match=f"{base}*", count=1000)
                           if (name := text(key)[len(base):])}
                self._identities_outside_registry = bool(scanned - names)
                names |= scanned
            releases = sorted(names)
            pipe = self.client.pipeline(transaction=False)  # one round trip for every release's hash
            for release in releases:
                pipe.hgetall(base + release)
            hashes = pipe.execute() if releases else []
        except redis.RedisError as exc:
            raise StoreError(f"reading release identities from Redis failed: {exc}") from exc
        return {release: {text(k): float(v) for k, v in fields.items()}
                for release, fields in zip(releases, hashes, strict=True) if fields}

    def get_state(self, name: str) -> dict | None:
        try:
            text = self.client.get(self.keys.state(name))
        except redis.RedisError as exc:
            raise StoreError(f"reading state {name!r} from Redis failed: {exc}") from exc
        return None if text is None else json.loads(text)

    def put_state(self, name: str, state: dict) -> None:
        try:
            self.client.set(self.keys.state(name), json.dumps(state))
        except redis.RedisError as exc:
            raise StoreError(f"writing state {name!r} to Redis failed: {exc}") from exc

    def clear(self) -> int:
        """Delete every key under the prefix (used by rebuild); returns how many."""
        keys = list(self.client.scan_iter(match=self.keys.everything(), count=1000))
        return sum(int(self.client.delete(*keys[at:at + 1000])) for at in range(0, len(keys), 1000))


class Admitting(Protocol):
    """A store that keeps the admitted values of each dimension (RedisStore, ClusterStore)."""

    def admit(self, dim: str, value: str, cap: int) -> bool: ...


class RedisGuard(CardinalityGuard):
    """Cardinality guard whose admitted sets live in Redis, shared by all workers."""

    def __init__(self, store: Admitting, max_values: int = 100) -> None:
        super().__init__(max_values=max_values)
        self.store = store
        self.rejected: dict[str, set[str]] = {}

    def admit_capped(self, dim: str, value: str, cap: int) -> str:
        """As the pure guard's, with the admitted set in Redis (``dim`` may be a grouping's
        ``grouping:<name>``: its admitted combinations, capped by the grouping's budget)."""
        seen = self.admitted.setdefault(dim, set())
        if value in seen:
            return value
        rejected = self.rejected.setdefault(dim, set())
        if value in rejected:
            return "__other__"
        if self.store.admit(dim, value, cap):
            seen.add(value)
            return value
        if len(rejected) < 100_000:
            rejected.add(value)
        return "__other__"

    def forget(self) -> None:
        """Drop what this process remembers of the admitted sets (after Redis lost them): the next
        value of each dimension is asked of Redis again."""
        self.admitted.clear()
        self.rejected.clear()
