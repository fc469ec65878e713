"""The one place a Redis-backed store is built from configuration: a single Redis or a Redis Cluster.

``redis.cluster`` (``FLEETMON_REDIS_CLUSTER``) false, the default: a
:class:`~monitor.store.redis.store.RedisStore` on ``redis.url``, its key layout unchanged. True: a
:class:`~monitor.store.redis.cluster.ClusterStore` on the cluster that ``redis.url`` names one node of.
"""

from __future__ import annotations

from collections.abc import Sequence

from monitor.store.redis.cluster import ClusterStore
from monitor.store.redis.store import RedisStore
from monitor.windows import DEFAULT_RESOLUTIONS, Resolution

#: What :func:`open_store` returns: either store has the Store interface plus ``admit`` (the guard's).
AnyRedisStore = RedisStore | ClusterStore


def open_store(url: str, prefix: str = "fleetmon", resolutions: Sequence[Resolution] = DEFAULT_RESOLUTIONS,
               *, cluster: bool = False) -> AnyRedisStore:
    """The store on ``url``; StoreError when it cannot be reached or refuses the credentials."""
    if cluster:
        try:
            return ClusterStore.from_url(url, prefix, resolutions)
        except ValueError as exc:  # a prefix that cannot carry hash tags
            from monitor.store.base import StoreError

            raise StoreError(str(exc)) from exc
    return RedisStore.from_url(url, prefix, resolutions)
