"""Seeded synthetic traces and the fixed clock and price map the exporter and store tests share."""

from __future__ import annotations

import random

from monitor.pricing import PriceMap
from monitor.schema import Trace

NOW = 1_750_000_000.0  # a fixed clock
PRICES = PriceMap.load()  # the bundled map: one "*" entry, $3 / $15 / $0.30 per million


def make_traces(n: int, seed: int = 0, now: float = NOW, spread_seconds: float = 3000.0,
                releases: tuple[str, ...] = ("r1", "r2"), tenants: tuple[str, ...] = ("acme", "globex"),
                ) -> list[Trace]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        ok = rng.random() < 0.7
        tokens_in = rng.randint(100, 5000)
        out.append(Trace(
            trace_id=f"t{i}", ts=now - rng.uniform(0, spread_seconds), model_id="m1",
            release=rng.choice(releases), arm="baseline", success=ok,
            outcome=rng.choice(("success", "failure", "escalated", "abandoned")) if rng.random() < 0.9 else None,
            ok=ok, task_type="code", tenant=rng.choice(tenants), locale="en",
            tool_calls=rng.randint(0, 5), tool_errors=rng.randint(0, 1),
            tokens_in=tokens_in, tokens_cached_in=rng.randint(0, tokens_in), tokens_out=rng.randint(10, 2000),
            fees_usd=0.001 if rng.random() < 0.1 else 0.0,
            latency_seconds=rng.lognormvariate(1.0, 1.0) if rng.random() < 0.95 else None,
            harmful_action=rng.random() < 0.02, refused=rng.random() < 0.1,
            benign=rng.random() < 0.8, side_effects=1 if rng.random() < 0.05 else 0,
        ))
    return out
