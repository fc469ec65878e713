"""CPU of the fold's placement (:func:`monitor.fold.place_groups`) per batch shape, in process (no Kafka, no Redis).

Run::

    .venv/bin/python bench/fold_placement.py [--rounds 5] [--shapes bomb,replay,live] [--baseline OLD.py|DIR]

Shapes (default slicer: the five default dimensions, their six default
groupings, a :class:`~monitor.slices.CardinalityGuard` of 100 values per
dimension, fresh for each run; default resolutions):

* ``bomb`` — 100,000 traces, each of a new tenant (a new raw slice), spread
  over the last 10 minutes: the 100k-tenant burst of
  ``tests/integration/test_prometheus.py``; timed as a whole :func:`fold`;
* ``replay`` — 200,000 traces of ``bench/throughput.py``'s generator (360
  slices) over an hour of event time: what a rebuild or backfill batch holds;
* ``live`` — the same generator over the last 90 seconds (one or two minutes).

``replay`` and ``live`` time ``place_groups`` alone on groups built by
``group_traces`` (rebuilt, untimed, for every run: placement takes the
groups' aggregates over). CPU time (``time.process_time``), not wall-clock:
the machine may be shared. ``--baseline`` loads another copy of
``monitor/fold.py`` (e.g. ``git show HEAD~1:monitor/fold.py > /tmp/old.py``)
under another module name; a directory (a checkout, e.g. ``git worktree add
/tmp/old HEAD~1``) loads its ``monitor/slices.py``, ``monitor/groupings.py``
and ``monitor/fold.py`` together, so that the slicer, guard and groupings are
compared too. The two versions then run alternately, ``--rounds`` times each
per shape, and whether their deltas are equal to the bit (the float fields
included) and their guards' admitted sets equal is reported. Prints a table (min and
median seconds per shape and version) and, as the last line, one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import orjson
from throughput import traces as throughput_traces

import monitor
from monitor import fold as current
from monitor import slices as current_slices
from monitor.delta import BatchDelta
from monitor.schema import Trace, validate
from monitor.windows import DEFAULT_RESOLUTIONS

NOW = 1_800_000_000.0


def bomb_traces(n: int = 100_000) -> list[Trace]:
    """The 100k-tenant burst of ``tests/integration/test_prometheus.py``: every trace a new raw slice."""
    return [Trace(trace_id=f"b{i}", ts=NOW - (i % 600), model_id="m", release="burst", success=i % 3 != 0,
                  ok=i % 3 != 0, task_type="code", tenant=f"tenant-{i:06d}", locale="en",
                  latency_seconds=0.5 + (i % 50) / 10, tokens_in=100, tokens_out=20) for i in range(n)]


def generated_traces(n: int, span: float) -> list[Trace]:
    """``bench/throughput.py``'s traces (360 slices), event time over the ``span`` seconds before NOW."""
    return [validate(orjson.loads(value)) for _, value in throughput_traces(n, 7, NOW, span=span)]


def load_file(name: str, path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"--baseline must be a Python file or a checkout holding monitor/fold.py, got {path!r}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def standing_in(**modules: ModuleType) -> Iterator[None]:
    """``monitor.<name>`` is ``modules[name]`` while a baseline module imports it, then the current one again."""
    saved = {name: (sys.modules[f"monitor.{name}"], getattr(monitor, name)) for name in modules}
    try:
        for name, module in modules.items():
            sys.modules[f"monitor.{name}"] = module
            setattr(monitor, name, module)
        yield
    finally:
        for name, (module, attribute) in saved.items():
            sys.modules[f"monitor.{name}"] = module
            setattr(monitor, name, attribute)


def load(path: str) -> tuple[ModuleType, ModuleType]:
    """The baseline's fold module and the slices module its slicer comes from (a file: the current one)."""
    root = Path(path)
    if not root.is_dir():
        return load_file("fold_baseline", path), current_slices
    slices = load_file("slices_baseline", str(root / "monitor" / "slices.py"))
    with standing_in(slices=slices):
        groupings = load_file("groupings_baseline", str(root / "monitor" / "groupings.py"))
    with standing_in(slices=slices, groupings=groupings):
        fold = load_file("fold_baseline", str(root / "monitor" / "fold.py"))
    return fold, slices


def run(version: tuple[ModuleType, ModuleType], shape: str, traces: list[Trace]) -> tuple[float, BatchDelta, Any]:
    """One timed run of a version's fold (bomb) or placement (replay, live); its CPU seconds, delta and guard."""
    module, slices = version
    slicer = slices.Slicer(guard=slices.CardinalityGuard())
    delta = BatchDelta()
    if shape == "bomb":
        gc.collect()   # each run starts from the same collector state
        started = time.process_time()
        module.fold(traces, slicer, NOW, DEFAULT_RESOLUTIONS, delta)
        return time.process_time() - started, delta, slicer.guard
    groups = current.group_traces(traces, slicer.dimensions, DEFAULT_RESOLUTIONS)
    gc.collect()
    started = time.process_time()
    module.place_groups(groups.items(), slicer, NOW, DEFAULT_RESOLUTIONS, delta)
    return time.process_time() - started, delta, slicer.guard


def fingerprint(delta: BatchDelta, guard: Any) -> Any:
    """Everything placement writes, in insertion order, floats as their exact value (``float.hex``); the
    guard's admitted sets."""
    def agg(a: Any) -> Any:
        return ([(k, v.hex() if isinstance(v, float) else v) for k, v in a.counts.items()],
                list(a.latency.buckets.items()), a.latency.zero_count, a.latency.count)
    return ([(k, agg(a)) for k, a in delta.windows.items()], [(k, agg(a)) for k, a in delta.totals.items()],
            list(delta.expire_at.items()), list(delta.last_seen.items()), list(delta.counters.items()),
            sorted((dim, sorted(values)) for dim, values in guard.admitted.items()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--shapes", default="bomb,replay,live")
    parser.add_argument("--baseline", default="", help="another monitor/fold.py, or a checkout (its slices.py, "
                        "groupings.py and fold.py), to compare with (alternately)")
    args = parser.parse_args()
    versions = {"current": (current, current_slices)}
    if args.baseline:
        versions = {"baseline": load(args.baseline), "current": (current, current_slices)}
    makers = {"bomb": bomb_traces, "replay": lambda: generated_traces(200_000, 3600.0),
              "live": lambda: generated_traces(200_000, 90.0)}
    seconds: dict[str, dict[str, list[float]]] = {}
    identical: dict[str, bool] = {}
    for shape in args.shapes.split(","):
        traces = makers[shape]()
        seconds[shape] = {name: [] for name in versions}
        prints = {}
        for _ in range(args.rounds):
            for name, version in versions.items():
                cpu, delta, guard = run(version, shape, traces)
                seconds[shape][name].append(cpu)
                prints[name] = fingerprint(delta, guard)
        identical[shape] = len({repr(p) for p in prints.values()}) == 1
    print(f"{'shape':8} {'version':9} {'min s':>8} {'median s':>9}   (CPU, {args.rounds} runs each, alternating)")
    out: dict[str, Any] = {"bench": "fold_placement", "rounds": args.rounds}
    for shape, by_version in seconds.items():
        for name, xs in by_version.items():
            print(f"{shape:8} {name:9} {min(xs):8.3f} {statistics.median(xs):9.3f}")
            out[f"{shape}_{name}_cpu_min_s"] = round(min(xs), 3)
            out[f"{shape}_{name}_cpu_median_s"] = round(statistics.median(xs), 3)
        if len(by_version) > 1:
            print(f"{shape:8} deltas bit-identical, same guard sets: {'yes' if identical[shape] else 'NO'}")
            out[f"{shape}_identical"] = identical[shape]
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
