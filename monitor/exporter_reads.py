"""The exporter's store reads, with change detection so an idle slice costs (almost) nothing.

A scrape of 1,000 active slices with an hour of minute windows touches about
61,000 window hashes; merging all of them on every scrape costs seconds on
the Redis side alone (see bench/exporter_bench.py). Most slices have not
changed since the previous scrape, so :class:`SpanReader` keeps, per slice,
the merged aggregates it returned last time together with the slice's
*version*, reads all versions in one server-side script, and merges again
only the slices whose version moved.

Version: the ``traces`` field of the slice's totals hash. Every write to a
slice is a fold of at least one trace (:func:`monitor.fold.fold` is the only
writer), and each fold adds the trace to the totals *and* to every window it
falls in, in the same atomic apply, so the field strictly grows with every
write to any of the slice's hashes: an unchanged version means unchanged
windows and totals. (A late trace that reaches only the totals re-reads the
windows for nothing; that is harmless.) The merge script reads the version
together with the contents, so a cached version is never newer than its
contents, and a write that lands between the two scripts only causes one
more read. Windows cannot expire inside a span (minute windows are kept
48 h, spans are at most a few hours). After a rebuild (clear, then replay of
the same topic) a slice that ends with the same count holds the same traces.

Cost: an unchanged slice costs one ``HGET`` on the server; a changed one the
same merge as :meth:`monitor.store_redis.RedisStore.window_aggregates`, with
the 5-minute and 1-hour sums taken in one pass (the shorter span's windows
are a suffix of the longer one's). Memory: the merged aggregates of the last
scrape, a few hundred fields per (slice, span).

Stores without a Redis client (the in-memory store) are read through the
plain :class:`~monitor.store.Store` methods, without caching.
"""

from __future__ import annotations

from typing import Any, Sequence

from monitor.aggregate import Aggregate
from monitor.store import Store, StoreError
from monitor.windows import MINUTE, Resolution

# KEYS: per group its version key (the slice's totals hash), then its content
# keys in window order. ARGV[1] = number of spans S; then per group: the number
# of content keys n and S suffix lengths (how many of the last keys each span
# sums). Returns per group {version, span_1 flat, ..., span_S flat}; the
# version is read in the same script as the contents, so it is never newer.
_MERGE_SPANS = """
local call, tonumber, format = redis.call, tonumber, string.format
local spans = tonumber(ARGV[1])
local out = {}
local pos, arg = 1, 2
while arg <= #ARGV do
  local n = tonumber(ARGV[arg])
  local version = call('HGET', KEYS[pos], 'traces') or '0'
  local sums, firsts = {}, {}
  for s = 1, spans do
    sums[s] = {}
    firsts[s] = pos + 1 + n - tonumber(ARGV[arg + s])
  end
  for i = pos + 1, pos + n do
    local flat = call('HGETALL', KEYS[i])
    for s = 1, spans do
      if i >= firsts[s] then
        local sum = sums[s]
        for j = 1, #flat, 2 do
          local f = flat[j]
          sum[f] = (sum[f] or 0) + tonumber(flat[j + 1])
        end
      end
    end
  end
  local group = {version}
  for s = 1, spans do
    local g = {}
    for f, v in pairs(sums[s]) do
      g[#g + 1] = f
      g[#g + 1] = format('%.17g', v)
    end
    group[#group + 1] = g
  end
  out[#out + 1] = group
  pos = pos + 1 + n
  arg = arg + 1 + spans
end
return out
"""

# KEYS: totals hashes. Returns their ``traces`` fields ('0' when missing).
_VERSIONS = """
local out = {}
for i = 1, #KEYS do out[i] = redis.call('HGET', KEYS[i], 'traces') or '0' end
return out
"""

#: Keys per script call: bounds the time Redis spends in one script.
CHUNK_KEYS = 20_000


class SpanReader:
    """Windowed sums and totals per slice, re-read only when the slice changed."""

    def __init__(self, store: Store, resolution: Resolution = MINUTE) -> None:
        self.store = store
        self.resolution = resolution
        client = getattr(store, "client", None)
        self._merge = self._versions = None
        if client is not None and hasattr(store, "window_key") and hasattr(store, "total_key"):
            self._merge = client.register_script(_MERGE_SPANS)
            self._versions = client.register_script(_VERSIONS)
        # (kind, slice id) -> (tag, version, [Aggregate per span])
        self._cache: dict[tuple[str, str], tuple[Any, str, list[Aggregate]]] = {}

    @property
    def incremental(self) -> bool:
        return self._merge is not None

    def windows(self, spans: Sequence[tuple[float, float]], slice_ids: Sequence[str]
                ) -> list[dict[str, Aggregate]]:
        """For each ``(start, end)`` span, ``{slice id: merged aggregate}`` over its windows.

        Every span must end at the same time (the shorter ones start later),
        as the exporter's windows do.
        """
        res = self.resolution
        if self._merge is None:
            return [self.store.window_aggregates(res.name, start, end, slice_ids) for start, end in spans]
        starts = [res.starts_between(start, end) for start, end in spans]
        longest = max(starts, key=len)
        for s in starts:
            if s and s != longest[len(longest) - len(s):]:
                raise ValueError(f"spans {spans} do not end together; cannot read them in one pass")
        tag = (longest[0] if longest else None, tuple(len(s) for s in starts))
        store: Any = self.store
        merged = self._read("w", slice_ids, tag, [len(s) for s in starts],
                            lambda sid: [store.window_key(res.name, start, sid) for start in longest])
        return [{sid: merged[sid][k] for sid in slice_ids} for k in range(len(spans))]

    def totals(self, slice_ids: Sequence[str]) -> dict[str, Aggregate]:
        if self._merge is None:
            return self.store.totals(slice_ids)
        store: Any = self.store
        merged = self._read("t", slice_ids, None, [1], lambda sid: [store.total_key(sid)])
        return {sid: merged[sid][0] for sid in slice_ids}

    def _call(self, script: Any, keys: list[str], args: list[Any]) -> Any:
        try:
            return script(keys=keys, args=args)
        except Exception as exc:  # the client's errors, re-raised with context
            raise StoreError(f"reading windows from Redis failed: {exc}") from exc

    def _read(self, kind: str, slice_ids: Sequence[str], tag: Any, suffixes: list[int],
              content_keys: Any) -> dict[str, list[Aggregate]]:
        store: Any = self.store
        ids = list(slice_ids)
        versions: list[str] = []
        for i in range(0, len(ids), CHUNK_KEYS):
            chunk = [store.total_key(sid) for sid in ids[i:i + CHUNK_KEYS]]
            versions.extend(v.decode() if isinstance(v, bytes) else str(v)
                            for v in self._call(self._versions, chunk, []))
        out: dict[str, list[Aggregate]] = {}
        changed = []
        for sid, version in zip(ids, versions):
            cached = self._cache.get((kind, sid))
            if cached is not None and cached[0] == tag and cached[1] == version:
                out[sid] = cached[2]
            else:
                changed.append(sid)
        i = 0
        while i < len(changed):
            keys: list[str] = []
            args: list[Any] = [len(suffixes)]
            batch = []
            while i < len(changed) and (not keys or len(keys) < CHUNK_KEYS):
                sid = changed[i]
                group = content_keys(sid)
                keys.append(store.total_key(sid))
                keys.extend(group)
                args.append(len(group))
                args.extend(min(s, len(group)) for s in suffixes)
                batch.append(sid)
                i += 1
            for sid, reply in zip(batch, self._call(self._merge, keys, args)):
                version = reply[0].decode() if isinstance(reply[0], bytes) else str(reply[0])
                aggs = [Aggregate.from_dict(dict(zip(flat[0::2], flat[1::2]))) for flat in reply[1:]]
                self._cache[(kind, sid)] = (tag, version, aggs)
                out[sid] = aggs
        wanted = set(ids)
        for stale in [k for k in self._cache if k[0] == kind and k[1] not in wanted]:
            del self._cache[stale]
        return out
