"""fleetmon's library: the trace schema, mergeable aggregates, pricing and the producer SDK.

The public names, importable from ``monitor`` directly and loaded on first
use (so ``import monitor`` costs nothing and never loads the Kafka client
unless ``TraceEmitter`` is asked for)::

    from monitor import TraceEmitter, validate, Trace, Aggregate, LogSketch, PriceMap

Where each concept lives (a trace's journey, in folder order): ``schema`` →
``fold`` (with ``windows``, ``slices``, ``aggregate``, ``sketch``) → ``store/``
→ ``exporter/``; ``pairing`` → ``store/`` → ``alerts`` → notifiers;
``offline/`` is ``fleetmon compare``; ``stats/`` the estimators and tests;
``cli/`` and ``run/`` wire it all together.
"""

from __future__ import annotations

import importlib
from typing import Any

_PUBLIC = {
    "Trace": "monitor.schema",
    "TraceError": "monitor.schema",
    "validate": "monitor.schema",
    "Aggregate": "monitor.aggregate",
    "health": "monitor.aggregate",
    "LogSketch": "monitor.sketch",
    "PriceMap": "monitor.pricing",
    "PricingError": "monitor.pricing",
    "Resolution": "monitor.windows",
    "Slicer": "monitor.slices",
    "TraceEmitter": "monitor.emitter",
    "EmitError": "monitor.emitter",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'monitor' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return __all__
