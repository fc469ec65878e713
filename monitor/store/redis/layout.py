"""The Redis key layout of the aggregate store: every key family, named once.

Every user builds its keys here: the store's writes and reads, the Lua scripts
(:mod:`monitor.store.redis.scripts`, which take key names or prefixes from
these constants), the exporter's reads and ``fleetmon rebuild``'s patterns.
Key layout (``P`` = key prefix, default ``fleetmon``):

========================================  =========================================
``P:w:<res>:<start>:<slice id>``          hash, window aggregate, packed in one field (EXPIREAT window end + retention)
``P:wc:<res>:<bucket>:<slice id>``        hash, window start → its ``traces`` (EXPIREAT as the bucket's last window)
``P:t:<slice id>``                        hash, cumulative per-slice totals
``P:slices``                              zset, slice id → latest event time
``P:counters``                            hash, ``traces``, ``dlq``, ``late``, ``folded:<dim>``
``P:offsets``                             hash, ``<topic>:<partition>`` → last applied offset
``P:generation``                          hash, ``id`` (the state's generation), ``restores``, ``rebuilds``
``P:dims:<dim>``                          set, admitted values of a slice dimension
``P:x:<name>``                            hash, additive extras (paired evidence per comparison)
``P:id:<release>``                        hash, version tuple → latest event time (:mod:`monitor.identity`)
``P:id:``                                 set, the releases with an ``id:`` hash (their registry)
``P:pending:<topic>:<partition>``         hash, pair_id → the half of a shadow pair still waiting
``P:state:<name>``                        string, JSON state (the alert engine's lifecycle)
========================================  =========================================

Totals hashes hold an aggregate's fields (:meth:`monitor.aggregate.Aggregate.to_dict`), one hash
field each; their ``traces`` field (:data:`VERSION_FIELD`) grows with every write, so readers use a
totals hash's as the slice's version. A window hash holds one field, ``packed``
(:data:`PACKED_FIELD`): the JSON array ``[field, value, ...]`` of the aggregate's fields but its sketch
buckets (values as decimal text, as a field would hold them), a newline, then ``index count ...`` of
the ``latency:<index>`` buckets: the format the read scripts send a hash in (:mod:`monitor.store.redis.wire`),
so a fetch sends it as it is. The apply script merges an increment into it (integers exact below 2**53,
floats printed with 17 digits, as HINCRBY / HINCRBYFLOAT would), and rewrites a window still held
field by field (written before windows were packed, or edited by hand) as packed. One field instead of
~60 to ~160 makes the apply script ~5x cheaper on a replay, whose batches write mostly new windows
(docs/operating.md).
Every reader goes through the read scripts (``MERGE``, ``FETCH``), which accept both forms;
:func:`monitor.store.redis.packed.window_fields` decodes a raw window hash in Python.

``<bucket>`` is the window start aligned down to :data:`COUNT_BUCKET_WINDOWS` windows; a count field
equals the ``traces`` of its window's aggregate (both written by one atomic apply).

On a Redis Cluster (:mod:`monitor.store.redis.cluster`) the same layout is used once per Kafka
partition under ``P:{t:<topic>:<partition>}`` (every key of one apply in that hash tag's slot) and
once under ``P:{g}`` for what all share: ``dims:``, ``state:``, ``generation`` and ``views`` (the set
of partitions with a view). Readers read every view and merge (sums; max for latest times), one
round trip per view (names and merges: :mod:`monitor.store.redis.merge`). With ``redis.cluster``
off, ``P`` is the plain prefix and nothing here changes.

The generation's ``rebuilds`` (:data:`REBUILDS_FIELD`) counts the ``fleetmon rebuild`` swaps into
the prefix, incremented by the swap script (on a cluster in each swapped view's generation hash, in
the view's slot, and in ``P:{g}``'s): a rebuild can repair a hash without changing its ``traces``, so
the exporter's reader drops its caches of a prefix whose count moved (:mod:`monitor.store.redis.reads`).

The generation hash names the state's lineage: the first apply into a Redis without it writes
``id`` (:data:`GENERATION_ID_FIELD`), so a Redis that restarted empty or was flushed gets a new
one; ``restores`` counts the workers' restores from Kafka (:mod:`streams.restore`).
"""

from __future__ import annotations

from dataclasses import dataclass

from monitor.windows import Resolution

WINDOW = "w"
WINDOW_COUNTS = "wc"
TOTALS = "t"
SLICES = "slices"
COUNTERS = "counters"
OFFSETS = "offsets"
GENERATION = "generation"
DIMS = "dims"
PAIRED = "x"
IDENTITY = "id"
PENDING = "pending"
STATE = "state"

#: The field of a window or totals hash that counts its traces: a slice's version for readers.
VERSION_FIELD = "traces"

#: The fields of the generation hash: the generation's id, the restores counted in it, and the rebuild
#: swaps into the prefix (the exporter's reader drops its caches when that count moves).
GENERATION_ID_FIELD = "id"
RESTORES_FIELD = "restores"
REBUILDS_FIELD = "rebuilds"

#: The one field of a window hash: its aggregate, packed (see the module docstring).
PACKED_FIELD = "packed"

#: Windows per count hash (``P:wc:...``): an hour of minute windows, 60 hours of hour windows.
COUNT_BUCKET_WINDOWS = 60


def family_pattern(family: str) -> str:
    """The glob (after ``P:``) matching every key of a multi-key ``family``."""
    return f"{family}:*"


def count_bucket(resolution: Resolution, start: int) -> int:
    """The first window start of the count hash holding window ``start``."""
    span = resolution.size_seconds * COUNT_BUCKET_WINDOWS
    return start - start % span


def last_window_of_bucket(resolution: Resolution, bucket: int) -> int:
    """The start of the last window a count hash can hold: it expires with that window."""
    return bucket + (COUNT_BUCKET_WINDOWS - 1) * resolution.size_seconds


@dataclass(frozen=True)
class KeyLayout:
    """The key names under one prefix (see the module docstring); no escaping: prefixes are plain text."""

    prefix: str = "fleetmon"

    def window(self, resolution: str, start: int, sid: str) -> str:
        return f"{self.prefix}:{WINDOW}:{resolution}:{start}:{sid}"

    def window_counts(self, resolution: str, bucket: int, sid: str) -> str:
        """The count hash (window start → traces) of ``sid``'s windows in ``bucket``."""
        return f"{self.prefix}:{WINDOW_COUNTS}:{resolution}:{bucket}:{sid}"

    def totals(self, sid: str) -> str:
        return f"{self.prefix}:{TOTALS}:{sid}"

    def slices(self) -> str:
        return f"{self.prefix}:{SLICES}"

    def counters(self) -> str:
        return f"{self.prefix}:{COUNTERS}"

    def offsets(self) -> str:
        return f"{self.prefix}:{OFFSETS}"

    def generation(self) -> str:
        return f"{self.prefix}:{GENERATION}"

    def dims(self, dim: str) -> str:
        return f"{self.prefix}:{DIMS}:{dim}"

    def paired_base(self) -> str:
        """What every ``x:`` key starts with; the rest is the extra's name."""
        return f"{self.prefix}:{PAIRED}:"

    def paired(self, name: str) -> str:
        return f"{self.paired_base()}{name}"

    def identity_base(self) -> str:
        """What every ``id:`` key starts with; the rest is the release label."""
        return f"{self.prefix}:{IDENTITY}:"

    def identity(self, release: str) -> str:
        return f"{self.identity_base()}{release}"

    def pending(self, source: str | None) -> str:
        return f"{self.prefix}:{PENDING}:{source or ''}"

    def state(self, name: str) -> str:
        return f"{self.prefix}:{STATE}:{name}"

    def everything(self) -> str:
        """The glob of every key under the prefix."""
        return f"{self.prefix}:*"
