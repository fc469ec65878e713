"""Redis store: the streaming workers' shared state (an edge module: thin).

Key layout (``P`` = key prefix, default ``fleetmon``):

========================================  =========================================
``P:w:<res>:<start>:<slice id>``          hash, window aggregate (EXPIREAT window end + retention)
``P:wc:<res>:<bucket>:<slice id>``        hash, window start → its ``traces`` (EXPIREAT as the bucket's last window)
``P:t:<slice id>``                        hash, cumulative per-slice totals
``P:slices``                              zset, slice id → latest event time
``P:counters``                            hash, ``traces``, ``dlq``, ``late``, ``folded:<dim>``
``P:offsets``                             hash, ``<topic>:<partition>`` → last applied offset
``P:dims:<dim>``                          set, admitted values of a slice dimension
``P:x:<name>``                            hash, additive extras (paired evidence per comparison)
``P:pending:<topic>:<partition>``         hash, pair_id → the half of a shadow pair still waiting
``P:state:<name>``                        string, JSON state (the alert engine's lifecycle)
========================================  =========================================

A batch is applied by one Lua script (one round trip, atomic): a batch
covers consecutive records of one or more partitions (sources); if any
source's watermark is at or past its first offset nothing is written and
the script returns that watermark; otherwise every increment, TTL and zset
update is applied and every watermark advanced, so a redelivered batch is
skipped and a half-applied batch cannot exist. Reads merge window hashes
server-side (a Lua script) so a scrape moves one merged hash per slice.

Window counts: the same script adds every window's trace count to a small
per-slice hash, ``P:wc:<res>:<bucket>:<slice id>``, field ``<window start>``,
where ``<bucket>`` is the start aligned down to :data:`COUNT_BUCKET_WINDOWS`
windows (an hour of minute windows). A field therefore always equals the
``traces`` field of its window hash (written in the same atomic apply), and a
reader learns which of a slice's windows changed by reading one or two
60-field hashes instead of the windows themselves (the exporter's
:class:`~monitor.store.redis.reads.SpanReader`). Each count hash expires with the
last window it can hold (EXPIREAT bucket end + retention), so it outlives its
earliest windows by less than one bucket; a reader must not trust a field
whose window is past retention.

Redis Cluster: the scripts touch keys they build themselves, so this store
needs a single Redis (or one shard per key prefix); see the README.
"""

from __future__ import annotations

import json
from typing import Iterable, Mapping, Sequence

import redis

from monitor.aggregate import FLOAT_FIELDS, LATENCY_PREFIX, Aggregate
from monitor.fold import BatchDelta
from monitor.sketch import ZERO_KEY
from monitor.slices import CardinalityGuard
from monitor.store.base import StoreError
from monitor.windows import DEFAULT_RESOLUTIONS, Resolution

#: Windows per count hash (``P:wc:...``): an hour of minute windows, 60 hours of hour windows.
COUNT_BUCKET_WINDOWS = 60

_BUCKET_FIELDS: dict[int, str] = {}   # sketch bucket index -> its hash field name (a few hundred at most)
_ZERO_FIELD = LATENCY_PREFIX + ZERO_KEY

_APPLY = """
local ranges = cjson.decode(ARGV[1])
for _, r in ipairs(ranges) do
  local mark = redis.call('HGET', KEYS[1], r[1])
  if mark and tonumber(mark) >= tonumber(r[2]) then
    return {0, r[1], mark}
  end
end
local ops = cjson.decode(ARGV[2])
-- one read and one write per hash (not one HINCRBY per field: twice the
-- cost on listpack hashes); sums are exact below 2^53, as HINCRBY's are
for key, fields in pairs(ops.i) do
  local floats = ops.f[key]
  local flat = redis.call('HGETALL', key)
  for j = 1, #flat, 2 do
    local name = flat[j]
    local add = fields[name]
    if add then
      fields[name] = string.format('%.0f', tonumber(flat[j + 1]) + tonumber(add))
    elseif floats and floats[name] then
      floats[name] = string.format('%.17g', tonumber(flat[j + 1]) + tonumber(floats[name]))
    end
  end
  local args = {}
  local n = 0
  for f, v in pairs(fields) do args[n + 1] = f; args[n + 2] = v; n = n + 2 end
  if floats then
    for f, v in pairs(floats) do args[n + 1] = f; args[n + 2] = v; n = n + 2 end
    ops.f[key] = nil
  end
  for j = 1, n, 4000 do  -- unpack stays far below Lua's stack limit
    redis.call('HSET', key, unpack(args, j, math.min(j + 3999, n)))
  end
end
for key, fields in pairs(ops.f) do
  for f, v in pairs(fields) do redis.call('HINCRBYFLOAT', key, f, v) end
end
for key, at in pairs(ops.x) do redis.call('EXPIREAT', key, at) end
for member, score in pairs(ops.z) do redis.call('ZADD', ops.zkey, 'GT', score, member) end
for pkey, p in pairs(ops.p) do
  for _, field in ipairs(p.d) do redis.call('HDEL', pkey, field) end
  for field, value in pairs(p.s) do redis.call('HSET', pkey, field, value) end
end
for _, r in ipairs(ranges) do redis.call('HSET', KEYS[1], r[1], r[3]) end
return {1}
"""

_MERGE = """
local out = {}
local pos = 1
for g = 1, #ARGV do
  local n = tonumber(ARGV[g])
  local sum = {}
  for i = pos, pos + n - 1 do
    local flat = redis.call('HGETALL', KEYS[i])
    for j = 1, #flat, 2 do
      sum[flat[j]] = (sum[flat[j]] or 0) + tonumber(flat[j + 1])
    end
  end
  pos = pos + n
  local group = {}
  for f, v in pairs(sum) do
    group[#group + 1] = f
    group[#group + 1] = string.format('%.17g', v)
  end
  out[#out + 1] = group
end
return out
"""

_ADMIT = """
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then return 1 end
if redis.call('SCARD', KEYS[1]) < tonumber(ARGV[2]) then redis.call('SADD', KEYS[1], ARGV[1]); return 1 end
return 0
"""


def connect(url: str) -> redis.Redis:
    """A client for ``url`` (``redis://``, ``rediss://`` with TLS, password in the URL)."""
    try:
        return redis.Redis.from_url(url, socket_timeout=30, socket_connect_timeout=5)
    except ValueError as exc:
        raise StoreError(f"bad Redis URL: {exc}") from exc


class RedisStore:
    """The :class:`~monitor.store.base.Store` interface over one Redis."""

    def __init__(self, client: redis.Redis, prefix: str = "fleetmon",
                 resolutions: Sequence[Resolution] = DEFAULT_RESOLUTIONS) -> None:
        self.client = client
        self.prefix = prefix
        self.resolutions = tuple(resolutions)
        self._apply = client.register_script(_APPLY)
        self._merge = client.register_script(_MERGE)
        self._admit = client.register_script(_ADMIT)

    @classmethod
    def from_url(cls, url: str, prefix: str = "fleetmon",
                 resolutions: Sequence[Resolution] = DEFAULT_RESOLUTIONS) -> "RedisStore":
        return cls(connect(url), prefix, resolutions)

    # -- keys -------------------------------------------------------------------
    def window_key(self, resolution: str, start: int, sid: str) -> str:
        return f"{self.prefix}:w:{resolution}:{start}:{sid}"

    def total_key(self, sid: str) -> str:
        return f"{self.prefix}:t:{sid}"

    def count_bucket(self, resolution: Resolution, start: int) -> int:
        """The first window start of the count hash holding window ``start``."""
        span = resolution.size_seconds * COUNT_BUCKET_WINDOWS
        return start - start % span

    def count_key(self, resolution: str, bucket: int, sid: str) -> str:
        """The count hash (window start → traces) of ``sid``'s windows in ``bucket``."""
        return f"{self.prefix}:wc:{resolution}:{bucket}:{sid}"

    # -- writing ------------------------------------------------------------------
    def payload(self, delta: BatchDelta,
                pending: Mapping[str, tuple[Mapping[str, str], Iterable[str]]] | None = None) -> str:
        """The JSON the apply script reads: every increment, expiry, zset score and waiting pair half.

        Values are decimal text (HINCRBY/HINCRBYFLOAT take them as they are;
        a Lua number would be printed with 14 digits). ``pending`` maps a
        source to the pair halves that start waiting (``{pair_id: half}``)
        and stop waiting (pair ids) in its ``P:pending:<source>`` hash.
        """
        ints: dict[str, dict[str, str]] = {}
        floats: dict[str, dict[str, str]] = {}
        expire_at: dict[str, str] = {}

        def add(key: str, agg: Aggregate) -> None:
            counts = agg.counts
            fields = {name: "%d" % value for name, value in counts.items() if value and name not in FLOAT_FIELDS}
            latency = agg.latency
            if latency.buckets:
                names = _BUCKET_FIELDS
                for index, n in latency.buckets.items():
                    name = names.get(index)
                    if name is None:
                        name = names[index] = LATENCY_PREFIX + str(index)
                    fields[name] = "%d" % n
            if latency.zero_count:
                fields[_ZERO_FIELD] = "%d" % latency.zero_count
            ints[key] = fields
            as_float = {name: repr(float(counts[name])) for name in FLOAT_FIELDS if counts.get(name)}
            if as_float:
                floats[key] = as_float

        by_name = {r.name: r for r in self.resolutions}
        window_key, count_key = self.window_key, self.count_key
        for (res, start, sid), agg in delta.windows.items():
            key = window_key(res, start, sid)
            add(key, agg)
            at = delta.expire_at[(res, start)]
            expire_at[key] = str(at)
            resolution = by_name.get(res)
            if resolution is not None and agg.traces:  # unknown resolutions: no reader uses their counts
                bucket = self.count_bucket(resolution, start)
                counts_key = count_key(res, bucket, sid)
                window_counts = ints.setdefault(counts_key, {})
                window_counts[str(start)] = "%d" % (int(window_counts.get(str(start), 0)) + agg.traces)
                # the expiry of the bucket's last window: this window's, shifted
                last = bucket + (COUNT_BUCKET_WINDOWS - 1) * resolution.size_seconds
                expire_at[counts_key] = str(at + last - start)
        for sid, agg in delta.totals.items():
            add(self.total_key(sid), agg)
        if delta.counters:
            ints[f"{self.prefix}:counters"] = {name: "%d" % n for name, n in delta.counters.items()}
        for key, fields in delta.extra.items():  # extras: all HINCRBYFLOAT
            floats.setdefault(f"{self.prefix}:x:{key}", {}).update(
                {name: repr(float(value)) for name, value in fields.items()})
        waiting = {self.pending_key(source): {"s": dict(starts), "d": sorted(stops)}
                   for source, (starts, stops) in (pending or {}).items() if starts or stops}
        return json.dumps({"i": ints, "f": floats, "x": expire_at, "z": delta.last_seen,
                           "zkey": f"{self.prefix}:slices", "p": waiting})

    def pending_key(self, source: str | None) -> str:
        return f"{self.prefix}:pending:{source or ''}"

    def pending(self, source: str) -> dict[str, str]:
        return {k.decode(): v.decode() for k, v in self.client.hgetall(self.pending_key(source)).items()}

    def apply(self, delta: BatchDelta, source: str | None = None, first_offset: int | None = None,
              last_offset: int | None = None) -> bool:
        """Apply ``delta`` atomically; with a source and offsets, only when the
        source's watermark is below ``first_offset``, advancing it to ``last_offset``."""
        ranges = [] if source is None or first_offset is None or last_offset is None else \
            [(source, first_offset, last_offset)]
        return self.apply_ranges(delta, ranges, {source or "": (delta.pending_set, delta.pending_del)}) is None

    def apply_ranges(self, delta: BatchDelta, ranges: Sequence[tuple[str, int, int]],
                     pending: Mapping[str, tuple[Mapping[str, str], Iterable[str]]] | None = None
                     ) -> tuple[str, int] | None:
        """Apply ``delta`` and advance every ``(source, first, last)`` watermark, atomically.

        Nothing is written when any source's watermark is at or past its
        ``first``: the refusal ``(source, watermark)`` is returned instead
        (None when applied). ``pending`` as in :meth:`payload`.
        """
        args = [json.dumps([[source, str(first), str(last)] for source, first, last in ranges]),
                self.payload(delta, pending)]
        try:
            reply = self._apply(keys=[f"{self.prefix}:offsets"], args=args)
        except redis.RedisError as exc:
            raise StoreError(f"applying a batch to Redis failed: {exc}") from exc
        if reply[0]:
            return None
        return reply[1].decode(), int(reply[2])

    def admit(self, dim: str, value: str, cap: int) -> bool:
        try:
            return bool(self._admit(keys=[f"{self.prefix}:dims:{dim}"], args=[value, cap]))
        except redis.RedisError as exc:
            raise StoreError(f"cardinality guard in Redis failed: {exc}") from exc

    # -- reading --------------------------------------------------------------------
    def applied_offset(self, source: str) -> int | None:
        value = self.client.hget(f"{self.prefix}:offsets", source)
        return None if value is None else int(value)

    def applied_offsets(self) -> dict[str, int]:
        return {k.decode(): int(v) for k, v in self.client.hgetall(f"{self.prefix}:offsets").items()}

    def active_slices(self, since: float | None = None) -> dict[str, float]:
        low = "-inf" if since is None else since
        rows = self.client.zrangebyscore(f"{self.prefix}:slices", low, "+inf", withscores=True)
        return {member.decode(): score for member, score in rows}

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
        groups = [[self.window_key(resolution, s, sid) for s in starts] for sid in slice_ids]
        return dict(zip(slice_ids, self._merge_groups(groups)))

    def totals(self, slice_ids: Sequence[str] | None = None) -> dict[str, Aggregate]:
        ids = list(self.active_slices()) if slice_ids is None else list(slice_ids)
        return dict(zip(ids, self._merge_groups([[self.total_key(sid)] for sid in ids])))

    def counters(self) -> dict[str, float]:
        return {k.decode(): float(v) for k, v in self.client.hgetall(f"{self.prefix}:counters").items()}

    def extra(self, prefix: str) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        base = f"{self.prefix}:x:"
        for key in self.client.scan_iter(match=f"{base}{prefix}*", count=1000):
            name = key.decode()[len(base):]
            out[name] = {k.decode(): float(v) for k, v in self.client.hgetall(key).items()}
        return out

    def get_state(self, name: str) -> dict | None:
        try:
            text = self.client.get(f"{self.prefix}:state:{name}")
        except redis.RedisError as exc:
            raise StoreError(f"reading state {name!r} from Redis failed: {exc}") from exc
        return None if text is None else json.loads(text)

    def put_state(self, name: str, state: dict) -> None:
        try:
            self.client.set(f"{self.prefix}:state:{name}", json.dumps(state))
        except redis.RedisError as exc:
            raise StoreError(f"writing state {name!r} to Redis failed: {exc}") from exc

    def clear(self) -> int:
        """Delete every key under the prefix (used by rebuild); returns how many."""
        deleted = 0
        for key in self.client.scan_iter(match=f"{self.prefix}:*", count=1000):
            deleted += self.client.delete(key)
        return deleted


class RedisGuard(CardinalityGuard):
    """Cardinality guard whose admitted sets live in Redis, shared by all workers."""

    def __init__(self, store: RedisStore, max_values: int = 100) -> None:
        super().__init__(max_values=max_values)
        self.store = store
        self.rejected: dict[str, set[str]] = {}

    def admit(self, dim: str, value: str) -> str:
        seen = self.admitted.setdefault(dim, set())
        if value in seen:
            return value
        rejected = self.rejected.setdefault(dim, set())
        if value in rejected:
            return "__other__"
        if self.store.admit(dim, value, self.cap(dim)):
            seen.add(value)
            return value
        if len(rejected) < 100_000:
            rejected.add(value)
        return "__other__"
