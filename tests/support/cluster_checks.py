"""Exactness of a Redis Cluster store against the records it was fed (the workers' own fold as the
reference, in memory): shared by the cluster integration tests."""

from __future__ import annotations

import json
import time
from typing import Any

from monitor.aggregate import FLOAT_FIELDS
from monitor.slices import Slicer
from monitor.store.memory import MemoryStore
from monitor.windows import DEFAULT_RESOLUTIONS
from streams.batch import decode_batch, fold_batch
from tests.support.batches import Rec
from tests.support.pipeline import expected_pairs, observed_pairs


def reference(records: list[dict], now: float) -> MemoryStore:
    """The records folded in one batch by the workers' fold, into memory (pairing aside)."""
    store = MemoryStore()
    batch = decode_batch([("ref", 0, [Rec(i, json.dumps(r).encode()) for i, r in enumerate(records)])], now)
    store.apply(fold_batch(batch, Slicer(), now, DEFAULT_RESOLUTIONS))
    return store


def integers(aggregates: dict) -> dict:
    return {sid: {k: v for k, v in agg.to_dict().items() if k not in FLOAT_FIELDS} for sid, agg in aggregates.items()}


def exactness(store: Any, records: list[dict], ref: MemoryStore) -> dict:
    """What differs between ``store`` and ``records`` (empty when every figure is exact): every slice's
    totals and 1m/1h windows (integer fields and sketch buckets), the paired counts, the counters."""
    problems: dict = {}
    want, got = integers(ref.totals()), integers(store.totals())
    wrong = {sid: (got.get(sid), want.get(sid)) for sid in set(want) | set(got) if got.get(sid) != want.get(sid)}
    if wrong:
        problems["slices"] = dict(sorted(wrong.items())[:3]) | {"count": len(wrong)}
    pairs = {k: +v for k, v in expected_pairs(records).items()}
    if observed_pairs(store) != pairs:
        problems["pairs"] = (observed_pairs(store), pairs)
    counters = store.counters()
    wanted = {"traces": len(records), "pairs": sum(c["n_pairs"] for c in pairs.values()), "dlq": 0}
    counted = {name: int(counters.get(name, 0)) for name in wanted}
    if counted != wanted:
        problems["counters"] = (counted, wanted)
    now, ids = time.time(), sorted(ref.active_slices())
    for res in ("1m", "1h"):
        mine = integers(store.window_aggregates(res, now - 2 * 3600, now + 600, ids))
        if mine != integers(ref.window_aggregates(res, now - 2 * 3600, now + 600, ids)):
            problems[f"windows_{res}"] = "differ"
    return problems


def cluster_answers(port: int) -> bool:
    """True when a Redis Cluster answers on 127.0.0.1:``port`` with every slot served."""
    import redis
    from redis.cluster import RedisCluster

    try:
        with RedisCluster(host="127.0.0.1", port=port, socket_timeout=5) as client:
            return bool(client.ping()) and client.cluster_info().get("cluster_state") == "ok"
    except (redis.RedisError, OSError):
        return False


def ensure_services_cluster(port: int) -> str:
    """The URL of the services' Redis Cluster (scripts/services.sh), started when it is not running;
    pytest.fail when it cannot be (or FLEETMON_SERVICES_EXTERNAL=1 says not to start it)."""
    import os
    import subprocess

    import pytest

    from tests.support.paths import ROOT

    if not cluster_answers(port):
        if os.environ.get("FLEETMON_SERVICES_EXTERNAL") == "1":
            pytest.fail(f"no Redis Cluster on 127.0.0.1:{port} (FLEETMON_SERVICES_EXTERNAL=1)", pytrace=False)
        proc = subprocess.run(["bash", str(ROOT / "scripts" / "services.sh"), "start", "redis"], cwd=ROOT,
                              env=dict(os.environ, FLEETMON_SERVICES_REDIS_CLUSTER="1"), capture_output=True,
                              text=True, timeout=600, check=False)
        if proc.returncode != 0:
            pytest.fail(f"starting the Redis Cluster failed:\n{proc.stdout}{proc.stderr}", pytrace=False)
    return f"redis://127.0.0.1:{port}/0"
