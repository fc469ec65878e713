"""How the exporter's reads travel between Redis and :mod:`monitor.store.redis.reads`.

The three read scripts (``counts``, ``fetch``, ``totals`` of :mod:`monitor.store.redis.scripts`,
one atomic snapshot each) and the format a hash travels in: one string, the JSON of
its plain fields, then its sketch buckets as plain numbers, which costs far less
to parse than redis-py's reply of hundreds of fields (:func:`decode_hash`); a window hash is
stored in that very format (:mod:`monitor.store.redis.packed`), so a fetch sends it as it is.
The native extension reads that format (``WindowCodec``, native/src/window.rs: :data:`CODEC`)
exactly as the Python reader here does, and hands back to it any text it is not sure of.
:class:`Scripts` calls them one at a time; :class:`Wire` sends calls ahead of
reading their replies on one connection, so Redis runs them on its own core while
this process works on earlier replies.

Typed on :class:`~monitor.store.base.ScriptClient` (the connection pool is looked
up, not required), so this module imports no Redis client itself.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from sys import intern
from typing import Any

import orjson

from monitor.aggregate import FLOAT_FIELDS, LATENCY_PREFIX, Aggregate
from monitor.sketch import ZERO_KEY, LogSketch
from monitor.store.base import ScriptClient, StoreError
from monitor.store.redis.scripts import COUNTS, FETCH, FLOATS, TOTALS

try:  # the native reader of packed hashes (native/src/window.rs); without it, the Python one below
    from fleetmon_native import WindowCodec as _WindowCodec
except ImportError:  # pragma: no cover - a tree without `make install`
    _WindowCodec = None
try:  # the native reader of a counts reply (an extension built before it: the Python one below)
    from fleetmon_native import parse_counts as _parse_counts
except ImportError:  # pragma: no cover - a tree without `make install`
    _parse_counts = None

__all__ = ["CHUNK_KEYS", "CODEC", "FLOATS", "Scripts", "Wire", "chunks", "counts_of", "decode_hash",
           "decode_interned", "parse_flat", "resp_command", "text"]

#: The native codec (None when not built): :func:`decode_hash` and ``span_sums.fresh_sums`` use it for
#: every hash it reads exactly as the Python reader would; it hands anything else back (None) to Python.
CODEC: Any = None if _WindowCodec is None else _WindowCodec(list(FLOATS), LATENCY_PREFIX + ZERO_KEY, LATENCY_PREFIX)

#: Keys per script call: bounds the time Redis spends in one script.
CHUNK_KEYS = 20_000


def parse_flat(flat: Sequence[str], buckets: dict[int, int] | None = None) -> Aggregate:
    """The aggregate of a hash listed as ``[field, value, ...]`` (strings), plus sketch ``buckets``.

    Same result as :meth:`Aggregate.from_dict` on the pairs with the buckets
    as ``latency:<index>`` fields (the tests check it), without its per-field
    type dispatch: this is the scrape's hot loop. ``buckets`` is taken over.
    """
    counts: dict[str, float] = {}
    buckets = {} if buckets is None else buckets
    zero = 0
    prefix, cut = LATENCY_PREFIX, len(LATENCY_PREFIX)
    it = iter(flat)
    for key, text in zip(it, it):
        if key.startswith(prefix):
            if key[cut:] == ZERO_KEY:
                zero += int(text)
            else:
                index = int(key[cut:])
                buckets[index] = buckets.get(index, 0) + int(text)
        elif key in FLOAT_FIELDS:
            counts[key] = float(text)
        else:
            try:
                counts[key] = int(text)
            except ValueError:
                counts[key] = int(float(text))
    if zero < 0 or (buckets and min(buckets.values()) <= 0):
        bad = {index: n for index, n in buckets.items() if n <= 0}
        if zero < 0 or any(n < 0 for n in bad.values()):
            raise ValueError(f"sketch buckets must hold counts >= 0, got {bad or {ZERO_KEY: zero}}")
        for index in bad:
            del buckets[index]
    sketch = LogSketch()
    sketch.buckets, sketch.zero_count, sketch.count = buckets, zero, zero + sum(buckets.values())
    return Aggregate(counts, sketch)


def decode_hash(raw: bytes | str, codec: Any = CODEC) -> Aggregate:
    """The aggregate of a hash as the read scripts send it (see ``scripts.ENCODE``).

    Read by the native ``codec`` when there is one (its field names interned), else, or
    when the codec hands the text back, by :func:`decode_hash_python`: the same aggregate.
    """
    if isinstance(raw, str):
        raw = raw.encode()
    if codec is not None:
        parts = codec.decode(raw)
        if parts is not None:
            return _aggregate(*parts)
    return decode_hash_python(raw)


def decode_interned(raw: bytes | str) -> Aggregate:
    """:func:`decode_hash` with its field names interned (shared with every cached aggregate's: a cache
    of thousands of aggregates would otherwise hold tens of thousands of copies of a few dozen names)."""
    if isinstance(raw, str):
        raw = raw.encode()
    if CODEC is not None and (parts := CODEC.decode(raw)) is not None:
        return _aggregate(*parts)  # the codec interns its names
    agg = decode_hash_python(raw)
    agg.counts = {intern(key): value for key, value in agg.counts.items()}
    return agg


def _aggregate(counts: dict[str, float], buckets: dict[int, int], zero: int, in_buckets: int) -> Aggregate:
    sketch = LogSketch()
    sketch.buckets, sketch.zero_count, sketch.count = buckets, zero, zero + in_buckets
    return Aggregate(counts, sketch)


def decode_hash_python(raw: bytes | str) -> Aggregate:
    """:func:`decode_hash` in Python (what the native codec is checked against)."""
    if isinstance(raw, str):
        raw = raw.encode()
    head, _, tail = raw.partition(b"\n")
    flat = orjson.loads(head)
    numbers = list(map(int, tail.split()))
    # buckets in index order: merging appends few keys to that, so the sorts in
    # the sketch's quantiles (every changed sum, every scrape) stay nearly free
    return parse_flat(flat if isinstance(flat, list) else [],  # cjson writes an empty array as {}
                      dict(sorted(zip(numbers[0::2], numbers[1::2]))))


def counts_of(raw: bytes | str, expected: int, native: bool = True) -> array:
    """The counts script's reply for one slice (``count count ...``) as an ``array("q")``:
    ``array("q", map(int, text(raw).split()))``, read natively when the extension is built and every
    token is a plain decimal integer (else, and with ``native=False``, in Python, whose ``int``
    decides and reports a bad token). ``expected``: how many counts the caller wants (the native
    reader fills an array of that length; any other number is still returned as read)."""
    if native and _parse_counts is not None and expected > 0:
        out = array("q", bytes(8 * expected))
        if _parse_counts(raw.encode() if isinstance(raw, str) else raw, out) == expected:
            return out
    return array("q", map(int, text(raw).split()))


def text(value: Any) -> str:
    """A reply element as text (bytes unless the client decodes responses)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def chunks(items: Sequence[Any], keys_per_item: int) -> Iterator[Sequence[Any]]:
    """``items`` in runs of at most :data:`CHUNK_KEYS` keys."""
    step = max(1, CHUNK_KEYS // max(keys_per_item, 1))
    for i in range(0, len(items), step):
        yield items[i:i + step]


def resp_command(args: Sequence[Any], encoding: str = "utf-8", errors: str = "strict") -> bytes | None:
    """A command as the Redis protocol sends it (an array of bulk strings): the bytes redis-py's packers
    write for arguments that are ``str`` (encoded as the client encodes them), ``int`` or ``bytes``, in
    one join instead of an encode and a format per argument; None for any other argument type (the
    client packs and checks those itself). The command's name must be one word."""
    parts = [b"*%d\r\n" % len(args)]
    append = parts.append
    for arg in args:
        kind = type(arg)
        if kind is str:
            arg = arg.encode(encoding, errors)
        elif kind is int:
            arg = b"%d" % arg
        elif kind is not bytes:
            return None
        append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(parts)


class Scripts:
    """The read scripts registered on one client; :meth:`call` runs one, :meth:`wire` opens a :class:`Wire`."""

    def __init__(self, client: ScriptClient) -> None:
        self.client = client
        self.by_name = {name: client.register_script(source) for name, source in
                        (("counts", COUNTS), ("fetch", FETCH), ("totals", TOTALS))}
        self.loaded = False  # known to be in Redis's script cache (a Wire needs that)

    def call(self, name: str, keys: list[str], args: list[Any]) -> Any:
        try:
            return self.by_name[name](keys=keys, args=args)
        except Exception as exc:  # the client's errors, re-raised with context
            raise StoreError(f"reading windows from Redis failed ({name} script): {exc}") from exc

    def wire(self) -> Wire | None:
        """A :class:`Wire` on a connection of the client's pool; None if the client has none."""
        pool = getattr(self.client, "connection_pool", None)
        if pool is None or not hasattr(pool, "get_connection"):
            return None
        try:
            if not self.loaded:
                for script in self.by_name.values():
                    self.client.script_load(script.script)
                self.loaded = True
            try:
                connection = pool.get_connection()
            except TypeError:  # redis-py before 5.3 wants a command name
                connection = pool.get_connection("EVALSHA")
        except Exception:  # noqa: BLE001 - the plain calls report a real outage
            return None
        return Wire(self, connection, pool)


class Wire:
    """Script calls sent ahead of reading their replies, on one connection.

    Replies come back in the order the calls were sent. A script Redis does
    not have (a restart emptied its cache) makes a reply raise; the caller
    then :meth:`close` s with ``ok=False`` (the connection is dropped, with
    any replies still on their way) and calls the scripts one at a time,
    which loads them again.
    """

    def __init__(self, scripts: Scripts, connection: Any, pool: Any) -> None:
        self.scripts, self.connection, self.pool = scripts, connection, pool
        encoder = getattr(connection, "encoder", None)
        self.encoding = None if encoder is None else (encoder.encoding, encoder.encoding_errors)

    def send(self, name: str, keys: list[str], args: list[Any]) -> None:
        command = ("EVALSHA", self.scripts.by_name[name].sha, len(keys), *keys, *args)
        packed = None if self.encoding is None else resp_command(command, *self.encoding)
        if packed is None:
            self.connection.send_command(*command)  # what the client packs itself (any other argument type)
        else:
            self.connection.send_packed_command([packed])

    def take(self) -> Any:
        return self.connection.read_response()

    def close(self, ok: bool) -> None:
        if not ok:
            self.connection.disconnect()
            self.scripts.loaded = False
        self.pool.release(self.connection)
