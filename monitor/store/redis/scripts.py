"""Every Lua script the project runs on Redis, with the contract of its KEYS, ARGV and reply.

Scripts touch only keys passed in KEYS or built from prefixes passed in ARGV; the
family names and hash fields they need come from :mod:`monitor.store.redis.layout`
(substituted once, at import). Each script is atomic: one snapshot, all or nothing.
The Lua of the packed window format (``merged``, ``encode``) that APPLY, FETCH and TOTALS
start with lives beside its Python half, in :mod:`monitor.store.redis.packed`.
"""

from __future__ import annotations

from string import Template

from monitor.aggregate import FLOAT_FIELDS, LATENCY_PREFIX
from monitor.sketch import ZERO_KEY
from monitor.store.redis import layout
from monitor.store.redis.packed import PACKING

#: The float fields of an aggregate, in the order the fetch script returns them.
FLOATS = tuple(sorted(FLOAT_FIELDS))

#: The fetch script's per-slice mode: send the whole totals hash, or only its float fields.
WHOLE_TOTALS, TOTALS_FLOATS = "whole", "floats"


def _lua(text: str) -> str:
    """``text`` with ``$name`` replaced by the layout's names (Lua itself never uses ``$``)."""
    return Template(text).substitute(
        version=layout.VERSION_FIELD, offsets=layout.OFFSETS, generation_id=layout.GENERATION_ID_FIELD,
        generation=layout.GENERATION, rebuilds=layout.REBUILDS_FIELD, latency=LATENCY_PREFIX,
        latency_length=len(LATENCY_PREFIX), latency_zero=LATENCY_PREFIX + ZERO_KEY,
        whole=WHOLE_TOTALS, floats=", ".join(f"'{name}'" for name in FLOATS), packed=layout.PACKED_FIELD)


# KEYS[1]: the offsets hash, KEYS[2]: the slices zset, KEYS[3]: the generation hash. ARGV[1]: JSON
# [[source, first, last], ...]; ARGV[2]: the JSON of RedisStore.payload; ARGV[3]: the generation id to
# write when there is none; ARGV[4]: '' (no check) or the JSON {"generation": id or null, "watermarks":
# {source: "offset"}} of what the writer believes the store holds. Returns {2, generation or '',
# {source, watermark or '', ...}} (lost, nothing written: the generation differs from an expected one,
# or those sources' watermarks are missing or below the expected ones), {0, source, watermark}
# (refused, nothing written: a source's watermark is at or past its first offset) or {1, generation}
# (applied, every watermark advanced; the generation written if there was none).
APPLY = PACKING + _lua("""
local generation = redis.call('HGET', KEYS[3], '$generation_id')
if ARGV[4] ~= '' then
  local expect = cjson.decode(ARGV[4])
  local lost = expect.generation ~= cjson.null and expect.generation ~= generation
  local behind = {}
  for source, mark in pairs(expect.watermarks) do
    local stored = redis.call('HGET', KEYS[1], source)
    if (not stored) or tonumber(stored) < tonumber(mark) then
      lost = true
      behind[#behind + 1] = source
      behind[#behind + 1] = stored or ''
    end
  end
  if lost then return {2, generation or '', behind} end
end
local ranges = cjson.decode(ARGV[1])
for _, r in ipairs(ranges) do
  local mark = redis.call('HGET', KEYS[1], r[1])
  if mark and tonumber(mark) >= tonumber(r[2]) then
    return {0, r[1], mark}
  end
end
local ops = cjson.decode(ARGV[2])
-- windows: one packed field each (PACKING), one read and one write; a window still held field by
-- field (written before windows were packed) is rewritten packed, its TTL set again below
for key, packed in pairs(ops.windows or {}) do
  local flat = redis.call('HGETALL', key)
  if #flat == 0 then
    redis.call('HSET', key, '$packed', packed)
  elseif #flat == 2 and flat[1] == '$packed' then
    redis.call('HSET', key, '$packed', merged(flat[2], packed))
  else
    local old = encode(flat)
    redis.call('DEL', key)
    redis.call('HSET', key, '$packed', merged(old, packed))
  end
end
-- one read and one write per hash (not one HINCRBY per field: twice the
-- cost on listpack hashes); sums are exact below 2^53, as HINCRBY's are
for key, fields in pairs(ops.ints) do
  local floats = ops.floats[key]
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
    ops.floats[key] = nil
  end
  for j = 1, n, 4000 do  -- unpack stays far below Lua's stack limit
    redis.call('HSET', key, unpack(args, j, math.min(j + 3999, n)))
  end
end
for key, fields in pairs(ops.floats) do
  for f, v in pairs(fields) do redis.call('HINCRBYFLOAT', key, f, v) end
end
for key, at in pairs(ops.expire_at) do redis.call('EXPIREAT', key, at) end
for member, score in pairs(ops.last_seen) do redis.call('ZADD', KEYS[2], 'GT', score, member) end
for key, waiting in pairs(ops.pending) do
  for _, field in ipairs(waiting.stop) do redis.call('HDEL', key, field) end
  for field, value in pairs(waiting.start) do redis.call('HSET', key, field, value) end
end
-- release identities (monitor.identity.apply_to): a tuple's latest ts by max, at most cap tuples a release
if ops.identities then
  local cap, overflow = tonumber(ops.identities.cap), ops.identities.overflow
  for key, fields in pairs(ops.identities.hashes) do
    redis.call('SADD', ops.identities.registry, string.sub(key, #ops.identities.registry + 1))
    for f, ts in pairs(fields) do
      local seen = redis.call('HGET', key, f)
      if seen then
        if tonumber(seen) < tonumber(ts) then redis.call('HSET', key, f, ts) end
      elseif redis.call('HLEN', key) - redis.call('HEXISTS', key, overflow) < cap then
        redis.call('HSET', key, f, ts)
      else
        redis.call('HINCRBY', key, overflow, 1)
      end
    end
  end
end
for _, r in ipairs(ranges) do redis.call('HSET', KEYS[1], r[1], r[3]) end
if not generation then
  generation = ARGV[3]
  redis.call('HSET', KEYS[3], '$generation_id', generation)
end
return {1, generation}
""")

# KEYS: the hashes of every group, in order; ARGV: each group's number of keys. Returns per
# group the field-wise sum of its hashes as [field, value, ...] (values printed with 17 digits;
# a packed window's fields and latency:<index> buckets added as if held field by field).
MERGE = _lua("""
local find, gmatch, sub, tonumber = string.find, string.gmatch, string.sub, tonumber
local function add_packed(sum, text)
  local nl = find(text, '\\n', 1, true)
  local plain = cjson.decode(sub(text, 1, nl - 1))
  for j = 1, #plain, 2 do sum[plain[j]] = (sum[plain[j]] or 0) + tonumber(plain[j + 1]) end
  for i, n in gmatch(sub(text, nl + 1), '(%S+) (%S+)') do
    local f = '$latency' .. i
    sum[f] = (sum[f] or 0) + tonumber(n)
  end
end
local out = {}
local pos = 1
for g = 1, #ARGV do
  local n = tonumber(ARGV[g])
  local sum = {}
  for i = pos, pos + n - 1 do
    local flat = redis.call('HGETALL', KEYS[i])
    for j = 1, #flat, 2 do
      if flat[j] == '$packed' then
        add_packed(sum, flat[j + 1])
      else
        sum[flat[j]] = (sum[flat[j]] or 0) + tonumber(flat[j + 1])
      end
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
""")

# KEYS[1]: a dimension's admitted set; ARGV: the value, the cap. Returns 1 (admitted) or 0.
ADMIT = """
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then return 1 end
if redis.call('SCARD', KEYS[1]) < tonumber(ARGV[2]) then redis.call('SADD', KEYS[1], ARGV[1]); return 1 end
return 0
"""

# KEYS: per slice its totals hash, then its count hashes (one per bucket). ARGV[1]:
# the number of buckets B; ARGV[2..B+1]: how many of the wanted window starts
# fall in each bucket; then those starts, in order; then per slice the version
# the reader holds ('' = read the counts anyway). Returns per slice 0 (version
# unchanged) or {version, "count count ..."}, one count per wanted start (0 when
# absent).
COUNTS = _lua("""
local call, tonumber, unpack = redis.call, tonumber, unpack
local buckets = tonumber(ARGV[1])
local fields, a = {}, 2 + buckets
for b = 1, buckets do
  local n = tonumber(ARGV[1 + b])
  fields[b] = {}
  for i = 1, n do fields[b][i] = ARGV[a + i - 1] end
  a = a + n
end
local out = {}
local k = 1
for v = a, #ARGV do
  local version = call('HGET', KEYS[k], '$version') or '0'
  if version == ARGV[v] then
    out[#out + 1] = 0
  else
    local parts = {}
    for b = 1, buckets do
      local counts = call('HMGET', KEYS[k + b], unpack(fields[b]))
      for i = 1, #counts do parts[#parts + 1] = counts[i] or '0' end
    end
    out[#out + 1] = {version, table.concat(parts, ' ')}
  end
  k = k + 1 + buckets
end
return out
""")

# A hash as one string (the packed form: see PACKING); FETCH and TOTALS send every hash so.
ENCODE = PACKING

# KEYS: per slice its totals hash, then its window hashes. ARGV: per slice the
# number of windows, then WHOLE_TOTALS (send the whole totals) or TOTALS_FLOATS
# (only its float fields, space-separated, '' where absent). Returns per slice
# {version, totals part, window 1, ...}: one snapshot, as a script is atomic.
FETCH = ENCODE + _lua("""
local out = {}
local k, a = 1, 1
while a <= #ARGV do
  local n = tonumber(ARGV[a])
  local group = {call('HGET', KEYS[k], '$version') or '0'}
  if ARGV[a + 1] == '$whole' then
    group[2] = encode(call('HGETALL', KEYS[k]))
  else
    local floats = call('HMGET', KEYS[k], $floats)
    for i = 1, #floats do floats[i] = floats[i] or '' end
    group[2] = table.concat(floats, ' ')
  end
  for i = 1, n do group[2 + i] = encode(call('HGETALL', KEYS[k + i])) end
  out[#out + 1] = group
  k = k + 1 + n
  a = a + 2
end
return out
""")

# KEYS: totals hashes; ARGV: the version the reader holds per hash ('' = read it
# anyway). Returns per hash 0 (version unchanged) or {version, encoded hash}.
TOTALS = ENCODE + _lua("""
local out = {}
for i = 1, #KEYS do
  local version = call('HGET', KEYS[i], '$version') or '0'
  if version == ARGV[i] then
    out[i] = 0
  else
    out[i] = {version, encode(call('HGETALL', KEYS[i]))}
  end
end
return out
""")

# ``fleetmon rebuild``'s swap. ARGV: live prefix, fresh prefix, topic, JSON of the replaced
# family patterns, JSON of the replaced single keys, the two prefixes glob-escaped, and '1' to keep
# the fresh prefix's watermarks ('' deletes them), then '' to find the families' keys with SCAN or,
# on a Redis Cluster, the JSON of their literal prefixes (each pattern without its final '*'): the
# keys are then those of the slot (CLUSTER GETKEYSINSLOT: the slot's keys only, not the node's).
# KEYS: none on a single Redis; on a Redis Cluster the two offsets hashes, which route the script to
# the slot every key it touches hashes to (both prefixes carry the same hash tag:
# streams/rebuild_cluster.py). Returns
# {0, source, live watermark, rebuilt watermark} (the rebuild is behind: nothing changed) or
# {1, keys moved, partitions}; a swap also increments the live generation's ``rebuilds`` (a rebuild may
# repair a hash and keep its ``traces``, the version the exporter's reader trusts).
SWAP = _lua("""
local live, fresh, topic = ARGV[1], ARGV[2], ARGV[3]
local live_offsets = live .. ':$offsets'
local fresh_offsets = fresh .. ':$offsets'
-- 1. the rebuilt watermark must be at or past the live one, partition by partition
local marks = redis.call('HGETALL', live_offsets)
for i = 1, #marks, 2 do
  if string.sub(marks[i], 1, #topic + 1) == topic .. ':' then
    local mine = redis.call('HGET', fresh_offsets, marks[i])
    if (not mine) or tonumber(mine) < tonumber(marks[i + 1]) then
      return {0, marks[i], marks[i + 1], mine or ''}
    end
  end
end
local literals = ARGV[9] and ARGV[9] ~= '' and cjson.decode(ARGV[9]) or nil
local slot_keys
local function collect(prefix, patterns)
  local seen, keys = {}, {}
  if literals then  -- one slot of a cluster: its keys that start with a family's literal prefix
    if not slot_keys then
      local slot = redis.call('CLUSTER', 'KEYSLOT', KEYS[1])
      slot_keys = redis.call('CLUSTER', 'GETKEYSINSLOT', slot, redis.call('CLUSTER', 'COUNTKEYSINSLOT', slot))
    end
    local n = #prefix
    for _, k in ipairs(slot_keys) do  -- one pass over the slot (the swap's cost is per key of the slot)
      if string.sub(k, 1, n) == prefix then
        for _, literal in ipairs(literals) do
          if string.sub(k, n + 1, n + #literal) == literal then keys[#keys + 1] = k; break end
        end
      end
    end
    return keys
  end
  for _, pattern in ipairs(patterns) do
    local cursor = '0'
    repeat
      local page = redis.call('SCAN', cursor, 'MATCH', prefix .. pattern, 'COUNT', 1000)
      cursor = page[1]
      for _, k in ipairs(page[2]) do
        if not seen[k] then seen[k] = true; keys[#keys + 1] = k end
      end
    until cursor == '0'
  end
  return keys
end
local patterns, singles = cjson.decode(ARGV[4]), cjson.decode(ARGV[5])
-- 2. drop the live families (SCAN patterns use the glob-escaped prefixes, a slot's the literal ones)
for _, k in ipairs(collect((literals and live or ARGV[6]) .. ':', patterns)) do redis.call('UNLINK', k) end
for _, name in ipairs(singles) do redis.call('UNLINK', live .. ':' .. name) end
-- 3. rename the rebuilt ones over them (RENAME keeps each window's TTL)
local fresh_keys = collect((literals and fresh or ARGV[7]) .. ':', patterns)
for _, name in ipairs(singles) do
  if redis.call('EXISTS', fresh .. ':' .. name) == 1 then fresh_keys[#fresh_keys + 1] = fresh .. ':' .. name end
end
for _, k in ipairs(fresh_keys) do
  -- a slot's key list may still name a key past its expiry, which RENAME would refuse
  if (not literals) or redis.call('EXISTS', k) == 1 then redis.call('RENAME', k, live .. string.sub(k, #fresh + 1)) end
end
-- 4. this topic's watermarks: replace them, keep other sources' fields
for i = 1, #marks, 2 do
  if string.sub(marks[i], 1, #topic + 1) == topic .. ':' then redis.call('HDEL', live_offsets, marks[i]) end
end
local mine = redis.call('HGETALL', fresh_offsets)
for i = 1, #mine, 2 do redis.call('HSET', live_offsets, mine[i], mine[i + 1]) end
if ARGV[8] ~= '1' then redis.call('UNLINK', fresh_offsets) end
redis.call('HINCRBY', live .. ':$generation', '$rebuilds', 1)
return {1, #fresh_keys, #mine / 2}
""")

# KEYS[1]: a prefix's generation hash. Returns "<id> <rebuilds>" ('' for an absent field): the rebuild
# swaps into the prefix (incremented by SWAP) and the generation (a flushed and rebuilt Redis has a new one).
REBUILDS = _lua("""
local got = redis.call('HMGET', KEYS[1], '$generation_id', '$rebuilds')
return (got[1] or '') .. ' ' .. (got[2] or '')
""")
