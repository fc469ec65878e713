"""Synthetic trial logs for the compare tests: several agents, repeated trials, tags, scores, latency."""

from __future__ import annotations

import json
import random
from pathlib import Path


def trial_records(agent: str, *, tasks: int = 30, trials: int = 4, skill: float = 0.6, seed: int = 0,
                  latency_scale: float = 1.0, cost_scale: float = 1.0, harmful_rate: float = 0.0,
                  refusal_rate: float = 0.0, score: bool = False) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for t in range(tasks):
        difficulty = random.Random(1000 + t).random()  # the same task difficulty for every agent
        for k in range(trials):
            record = {"agent": agent, "task": f"t{t}", "trial": k,
                      "tin": int(rng.randint(1_000, 9_000) * cost_scale), "tout": rng.randint(100, 900),
                      "steps": rng.randint(1, 9), "lat": round(rng.lognormvariate(2.0, 0.5) * latency_scale, 3),
                      "category": f"c{t % 3}"}
            p = max(0.0, min(1.0, skill * (1.3 - difficulty)))
            if score:
                value = round(min(1.0, max(0.0, rng.gauss(p, 0.25))), 2)
                record["score"] = value
            else:
                record["ok"] = rng.random() < p
            if harmful_rate or refusal_rate:
                record["harmful_action"] = rng.random() < harmful_rate
                record["benign"] = True
                record["refused"] = rng.random() < refusal_rate
            out.append(record)
    return out


def write_jsonl(path: Path, records: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)
