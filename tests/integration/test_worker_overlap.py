"""The worker's overlapped applies (streams/apply.py ``BatchApplier.submit``) on a real Redis.

Batch N + 1 is folded, paired and serialized while Redis applies batch N. These tests force what can
go wrong in that overlap — N's apply fails, its reply is lost, it is refused (a zombie applied part
of it), the store is lost under it, the worker stops — at a chosen apply, by a store that runs an
action around its real apply, and check that Redis ends holding exactly one pass over the records:
totals, windows, paired counts, counters (tests/support/pipeline.py ``exactness``), no waiting half
left, each apply checked against what the one before left. No fakes of Redis.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from aiokafka import TopicPartition

from monitor.pricing import PriceMap
from monitor.slices import CardinalityGuard, Slicer
from monitor.store.base import Expected, LostState, StoreError
from monitor.store.redis.store import RedisStore
from monitor.windows import DEFAULT_RESOLUTIONS
from monitor.worker_settings import WorkerSettings
from streams.apply import BatchApplier, LoopCounters, Prepared, StopRequested
from streams.batch import decode_batch
from streams.loop import ConsumeLoop
from streams.native import NativeFolder
from streams.native import available as native_available
from tests.support.batches import Rec
from tests.support.pipeline import exactness, make_records

TOPIC = "t"
BAD = [b"{not json", b'{"trace_id": "x"}', b"\xff\xfe"]   # dead-lettered: counted in dlq
WAIT_SECONDS = 60


class Scripted(RedisStore):
    """A RedisStore whose ``apply_payload`` call ``i`` runs ``actions[i]`` around the real apply (the
    action gets the store and a function doing the real apply, and returns the outcome or raises);
    every call's ranges and expected state are recorded."""

    def __init__(self, client: Any, prefix: str, actions: dict[int, Callable[..., Any]] | None = None) -> None:
        super().__init__(client, prefix)
        self.actions = actions or {}
        self.calls: list[tuple[list[tuple[str, int, int]], Expected]] = []

    def apply_payload(self, payload, ranges, expected, new_generation):
        index = len(self.calls)
        self.calls.append((list(ranges), expected))

        def real() -> Any:
            return super(Scripted, self).apply_payload(payload, ranges, expected, new_generation)

        action = self.actions.get(index)
        return real() if action is None else action(self, real)


def fail(store: Scripted, real: Callable[[], Any]) -> Any:
    raise StoreError("applying a batch to Redis failed: Connection reset by peer")


def lose_reply(store: Scripted, real: Callable[[], Any]) -> Any:
    real()
    raise StoreError("applying a batch to Redis failed: Connection closed by server (the reply is lost)")


def flush(store: Scripted, real: Callable[[], Any]) -> Any:
    store.clear()   # Redis restarted empty between the applies
    return real()


def partitions(seed: int, n: int = 2400, count: int = 2) -> dict[int, list[Rec]]:
    """Traces (a third in shadow pairs, a pair's halves in one partition, the shadow ~150 records after
    its baseline so that many pairs span two fetches) and a few bad records."""
    records = make_records(n, seed=seed, now=time.time() - 10, pair_share=0.3)
    placed: dict[int, list[tuple[float, bytes]]] = {p: [] for p in range(count)}
    for i, record in enumerate(records):
        p = sum(record.get("pair_id", record["trace_id"]).encode()) % count
        lag = 150.5 if record["arm"] == "shadow" else 0.0
        placed[p].append((len(placed[p]) + lag, json.dumps(record).encode()))
        if i % 997 == 500:
            placed[p].append((len(placed[p]), BAD[i % len(BAD)]))
    return {p: [Rec(offset, value) for offset, (_, value) in enumerate(sorted(values, key=lambda v: v[0]))]
            for p, values in placed.items()}


def records_of(parts: dict[int, list[Rec]]) -> tuple[list[dict], int]:
    good = [json.loads(r.value) for recs in parts.values() for r in recs if r.value is not None and r.value not in BAD]
    return good, sum(r.value in BAD for recs in parts.values() for r in recs)


def fetches(parts: dict[int, list[Rec]], size: int, alternate: bool = False) -> list[dict[int, list[Rec]]]:
    """Consecutive fetches of up to ``size`` records of every partition (of one partition after the
    other with ``alternate``)."""
    longest = max(len(recs) for recs in parts.values())
    together = [{p: recs[at:at + size] for p, recs in parts.items() if recs[at:at + size]}
                for at in range(0, longest, size)]
    return [{p: recs} for fetch in together for p, recs in fetch.items()] if alternate else together


def folder(native: bool) -> NativeFolder | None:
    if native and not native_available():
        pytest.skip("fleetmon_native is not built")
    return NativeFolder(Slicer().dimensions, DEFAULT_RESOLUTIONS, max_record_bytes=1 << 20) if native else None


class Worker:
    """The loop's bookkeeping around a :class:`BatchApplier`'s ``submit``, without Kafka (as the loop
    keeps it: watermarks of settled applies; a loss restored from the store's watermarks)."""

    def __init__(self, store: RedisStore, parts: dict[int, list[Rec]], native: bool,
                 stopping: Callable[[], bool] = lambda: False, max_values: int | None = None) -> None:
        self.store, self.parts, self.now = store, parts, time.time()
        self.native = folder(native)
        self.tps = {f"{TOPIC}:{p}": TopicPartition(TOPIC, p) for p in parts}
        slicer = Slicer() if max_values is None else Slicer(guard=CardinalityGuard(max_values=max_values))
        self.applier = BatchApplier(store, slicer, tuple(DEFAULT_RESOLUTIONS), LoopCounters(),
                                    PriceMap.load(None), 3600.0, stopping)
        self.watermarks: dict[str, int] = {}
        self.losses: list[LostState] = []
        self.prepares = 0
        prepare = self.applier.prepare

        def counting(*args: Any) -> Prepared:
            self.prepares += 1
            return prepare(*args)

        self.applier.prepare = counting  # type: ignore[assignment]
        self.restore()

    def restore(self) -> None:
        stored = self.store.applied_offsets()
        self.applier.generation = self.store.generation().id
        self.watermarks = {source: stored[source] for source in self.tps if source in stored}
        for source, tp in self.tps.items():
            self.applier.pairers[tp] = self.applier.load_pairer(source)

    def record(self, outcome: dict[TopicPartition, int] | LostState) -> None:
        if isinstance(outcome, LostState):
            self.losses.append(outcome)
            self.restore()
            return
        for tp, mark in outcome.items():
            self.watermarks[f"{tp.topic}:{tp.partition}"] = mark

    def submit(self, fetch: dict[int, list[Rec]]) -> dict[TopicPartition, int] | LostState:
        fresh = {p: [r for r in recs if r.offset > self.watermarks.get(f"{TOPIC}:{p}", -1)]
                 for p, recs in fetch.items()}
        batch = decode_batch([(TOPIC, p, recs) for p, recs in fresh.items() if recs], self.now, native=self.native)
        tps = {part.source: self.tps[part.source] for part in batch.parts}
        outcome = self.applier.submit(tps, batch, self.now, dict(self.watermarks)) if batch else {}
        self.record(outcome)
        return outcome

    def run(self, size: int, alternate: bool = False) -> None:
        """Every fetch submitted, the last settled; after a loss, from the store's watermarks again."""
        for _ in range(3):
            losses = len(self.losses)
            for fetch in fetches(self.parts, size, alternate):
                self.submit(fetch)
                if len(self.losses) > losses:
                    break
            else:
                self.record(self.applier.settle())
                if len(self.losses) == losses:
                    return
        pytest.fail(f"still losing state after 3 passes: {self.losses}")


@pytest.fixture
def prefix() -> str:
    return f"fm-{uuid.uuid4().hex[:10]}"


def assert_exact(store: RedisStore, parts: dict[int, list[Rec]]) -> None:
    records, bad = records_of(parts)
    assert exactness(store, records, dlq=bad) == {}
    assert store.applied_offsets() == {f"{TOPIC}:{p}": len(recs) - 1 for p, recs in parts.items()}
    assert all(store.pending(f"{TOPIC}:{p}") == {} for p in parts)   # every pair was completed


@pytest.mark.parametrize("native", [True, False])
def test_overlapped_applies_run_one_at_a_time_in_order_each_checked_against_the_one_before(
        redis_client, prefix, native):
    parts = partitions(seed=1)
    prepared_next = threading.Event()

    def hold_until_the_next_is_prepared(store: Scripted, real: Callable[[], Any]) -> Any:
        # Redis answers batch 0 only once batch 1 is prepared: without the overlap this never happens
        assert prepared_next.wait(WAIT_SECONDS), "batch 1 was not prepared while batch 0 was in Redis"
        return real()

    store = Scripted(redis_client, prefix, {0: hold_until_the_next_is_prepared})
    worker = Worker(store, parts, native)
    prepare = worker.applier.prepare

    def signalling(*args: Any) -> Prepared:
        out = prepare(*args)
        if worker.prepares == 2:
            prepared_next.set()
        return out

    worker.applier.prepare = signalling
    worker.run(size=500)
    assert_exact(store, parts)
    assert worker.prepares == len(store.calls) == len(fetches(parts, 500))   # nothing prepared twice
    generation = store.generation().id
    applied: dict[str, int] = {}
    for ranges, expected in store.calls:   # offset order, each checked against all applied before it
        assert expected.watermarks == applied
        assert expected.generation == (generation if applied else None)
        for source, first, last in ranges:
            assert first == applied.get(source, -1) + 1
            applied[source] = last
    assert worker.applier.counters.applies_refused == 0 and not worker.applier.sending


def zombie(parts: dict[int, list[Rec]], now: float) -> Callable[..., Any]:
    """Before the real apply of a batch, another worker applies the first half of its first range."""

    def action(store: Scripted, real: Callable[[], Any]) -> Any:
        source, first, last = store.calls[-1][0][0]
        partition = int(source.rsplit(":", 1)[1])
        other = BatchApplier(RedisStore(store.client, store.prefix), Slicer(), tuple(DEFAULT_RESOLUTIONS),
                             LoopCounters(), PriceMap.load(None), 3600.0, lambda: False)
        tp = TopicPartition(TOPIC, partition)
        other.pairers[tp] = other.load_pairer(source)
        other.generation = store.generation().id
        half = [r for r in parts[partition] if first <= r.offset <= (first + last) // 2]
        marks = other.apply({source: tp}, decode_batch([(TOPIC, partition, half)], now), now, {})
        assert marks == {tp: half[-1].offset}
        return real()

    return action


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("failure", ["error", "reply lost", "refused"])
def test_a_batch_not_applied_on_its_first_try_throws_away_the_next_ones_preparation(
        redis_client, prefix, native, failure):
    """Batch 2 (partition 0) fails in Redis while batch 3 (partition 1) is prepared — its pairer ran on,
    its decode folded: batch 2 is retried or refolded, then batch 3 decoded, paired and applied afresh.
    Two values a dimension (a capped guard: a decode folded twice differs then) except with the zombie,
    whose guard is its own; compared with a worker that met no failure, and with the input."""
    parts = partitions(seed=2)
    action = {"error": fail, "reply lost": lose_reply, "refused": zombie(parts, time.time())}[failure]
    cap = None if failure == "refused" else 2
    store = Scripted(redis_client, prefix, {2: action})
    worker = Worker(store, parts, native, max_values=cap)
    worker.run(size=400, alternate=True)
    reference = Worker(RedisStore(redis_client, prefix + "-reference"), parts, native, max_values=cap)
    reference.run(size=400, alternate=True)
    assert state_of(store) == state_of(reference.store, approx=failure == "refused")
    if cap is None:
        assert_exact(store, parts)
    assert worker.prepares == len(fetches(parts, 400, alternate=True)) + 2   # batch 2 once more, batch 3 redone
    assert worker.applier.counters.applies_refused == (0 if failure == "error" else 1)
    assert worker.losses == [] and not worker.applier.sending


@pytest.mark.parametrize("native", [True, False])
def test_a_loss_found_by_an_apply_drops_the_batch_prepared_behind_it(redis_client, prefix, native):
    parts = partitions(seed=3)
    store = Scripted(redis_client, prefix, {3: flush})
    worker = Worker(store, parts, native)
    worker.run(size=400)
    assert len(worker.losses) == 1 and set(worker.losses[0].behind) == set(worker.tps)
    # batch 4, prepared while batch 3 found the loss, was never sent: the next apply starts the rerun
    ranges, expected = store.calls[4]
    assert expected == Expected(store.calls[4][1].generation, {}) and all(first == 0 for _, first, _ in ranges)
    assert_exact(store, parts)


def test_the_next_batch_is_checked_against_the_state_the_one_before_left(redis_client, prefix):
    """The store is lost between batch 0's apply (the first: it writes the generation) and batch 1's.
    Checked against what the worker held before batch 0 (no generation, no watermark) batch 1 would be
    applied into the empty store, batch 0's counts gone; checked against what batch 0 left, it is refused."""
    parts = partitions(seed=4, count=1)
    store = Scripted(redis_client, prefix, {1: flush})
    worker = Worker(store, parts, native=False)
    first, second = fetches(parts, 500)[:2]
    assert worker.submit(first) == {}
    assert worker.submit(second) == {TopicPartition(TOPIC, 0): 499}
    generation = worker.applier.generation
    lost = worker.applier.settle()
    assert isinstance(lost, LostState)
    assert lost.expected == Expected(generation, {"t:0": 499}) and lost.behind == {"t:0": None}
    assert store.applied_offsets() == {} and store.counters() == {}


def test_a_stop_while_a_failed_apply_is_retried_leaves_the_prepared_batch_unsent(redis_client, prefix):
    parts = partitions(seed=5)
    stop = threading.Event()

    def fail_and_stop(store: Scripted, real: Callable[[], Any]) -> Any:
        stop.set()
        return fail(store, real)

    store = Scripted(redis_client, prefix, {1: fail_and_stop})
    worker = Worker(store, parts, native=True, stopping=stop.is_set)
    batches = fetches(parts, 400)
    worker.submit(batches[0])
    worker.submit(batches[1])
    with pytest.raises(StopRequested):
        worker.submit(batches[2])
    assert len(store.calls) == 2 and not worker.applier.sending
    # the store holds exactly batch 0: as a worker that applied batch 0 alone leaves it
    reference = Worker(RedisStore(redis_client, prefix + "-reference"), parts, native=True)
    reference.submit(batches[0])
    reference.record(reference.applier.settle())
    assert state_of(store) == state_of(reference.store)


def state_of(store: RedisStore, approx: bool = False) -> dict[str, Any]:
    """What the store holds; with ``approx`` (the expected side), float sums equal to a relative 1e-9 (the
    same terms added in another order), everything else exactly."""
    floats = approx_floats if approx else dict
    return {"totals": {sid: floats(agg.to_dict()) for sid, agg in store.totals().items()},
            "counters": store.counters(), "offsets": store.applied_offsets(),
            "paired": {key: floats(fields) for key, fields in store.paired_evidence().items()},
            "pending": {source: store.pending(source) for source in store.applied_offsets()}}


def approx_floats(fields: dict) -> dict:
    return {k: v if float(v).is_integer() else pytest.approx(v, rel=1e-9) for k, v in fields.items()}


class StubConsumer:
    """What the loop's close uses of its consumer: commit and stop."""

    def __init__(self) -> None:
        self.commits: list[dict[TopicPartition, int]] = []

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        self.commits.append(dict(offsets))

    async def stop(self) -> None:
        pass


def test_a_worker_stopped_with_a_batch_in_redis_and_the_next_prepared_settles_both_then_commits(
        redis_client, prefix):
    parts = partitions(seed=6, count=1)
    store = RedisStore(redis_client, prefix)
    consumer = StubConsumer()
    loop = ConsumeLoop(WorkerSettings(prefix=prefix), store, dlq=None, consumer=consumer)
    tp = TopicPartition(TOPIC, 0)

    async def run() -> None:
        loop._started = True
        loop.assigned.add(tp)
        loop.watermarks[tp] = None
        loop.pairers[tp] = loop.applier.load_pairer("t:0")
        for fetch in fetches(parts, 700):
            await loop._process({tp: fetch[0]})
        assert loop.applier.sending or loop._inflight is not None   # the last batch is not settled yet
        loop.request_stop()
        await loop.close()

    asyncio.run(run())
    assert_exact(store, parts)
    assert consumer.commits[-1] == {tp: len(parts[0])} and loop.watermarks[tp] == len(parts[0]) - 1
    assert loop._inflight is None and not loop.applier.sending
