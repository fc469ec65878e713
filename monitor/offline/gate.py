"""Release gate: a vector of thresholds over a comparison report, any of which vetoes.

A check fails only when the candidate is worse beyond its threshold AND the
difference is significant where a test applies (the report's paired
bootstrap over tasks, at the report's confidence): success drop and
cost-per-solved increase are tested; the p95 latency increase is judged on
the point estimate (a quantile of pooled trials has no paired test here, and
the reason says so); the safety check fails on a significant rise of the
harmful-action rate, whatever its size.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GATE_KEYS = ("max_success_drop", "max_cost_per_solved_increase", "max_p95_latency_increase",
             "block_safety_regression")


class GateError(ValueError):
    """A gate file that cannot be used; names the key and value."""


@dataclass(frozen=True)
class Gate:
    max_success_drop: float | None = None
    max_cost_per_solved_increase: float | None = None
    max_p95_latency_increase: float | None = None
    block_safety_regression: bool = False

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], source: str = "gate") -> Gate:
        table = data.get("gate", data)
        unknown = set(table) - set(GATE_KEYS)
        if unknown:
            raise GateError(f"{source}: unknown keys {sorted(unknown)}; allowed: {', '.join(GATE_KEYS)}")
        values: dict[str, Any] = {}
        for key in GATE_KEYS[:3]:
            if key in table:
                value = table[key]
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value:
                    raise GateError(f"{source}: {key} must be a number >= 0 "
                                    f"({'absolute' if key == 'max_success_drop' else 'relative'}), got {value!r}")
                values[key] = float(value)
        if "block_safety_regression" in table:
            value = table["block_safety_regression"]
            if not isinstance(value, bool):
                raise GateError(f"{source}: block_safety_regression must be true or false, got {value!r}")
            values["block_safety_regression"] = value
        return cls(**values)

    @classmethod
    def load(cls, path: str | Path) -> Gate:
        try:
            data = tomllib.loads(Path(path).read_text())
        except OSError as exc:
            raise GateError(f"cannot read gate file {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise GateError(f"{path}: not valid TOML: {exc}") from None
        return cls.from_mapping(data, str(path))


def evaluate_gate(report: Mapping[str, Any], gate: Gate) -> dict[str, Any]:
    """``{"passed": bool, "reasons": [...], "checks": [...]}`` for a compare report."""
    base = report["agents"][report["baseline"]]
    cand = report["agents"][report["candidate"]]
    boot = report.get("bootstrap") or {}
    checks: list[dict[str, Any]] = []

    def check(name: str, failed: bool, detail: str) -> None:
        checks.append({"check": name, "failed": failed, "detail": detail})

    if gate.max_success_drop is not None:
        diff = boot.get("success_diff")
        if diff is None:
            check("max_success_drop", True, "no common tasks to compare success on")
        else:
            drop = -diff["point"]
            significant = diff["ci"][1] < 0
            failed = drop > gate.max_success_drop and significant
            check("max_success_drop", failed,
                  f"success drop {drop:+.3f} vs allowed {gate.max_success_drop:.3f}; "
                  f"difference CI [{diff['ci'][0]:+.3f}, {diff['ci'][1]:+.3f}], p={diff['p']:.3g} "
                  f"({'significant' if significant else 'not significant'})")
    if gate.max_cost_per_solved_increase is not None:
        ratio = boot.get("cost_per_solved_ratio")
        if ratio is None or not math.isfinite(ratio["point"]):
            failed = not math.isfinite(cand["cost_per_solved_usd"]) and math.isfinite(base["cost_per_solved_usd"])
            check("max_cost_per_solved_increase", failed,
                  "cost per solved cannot be compared: "
                  f"baseline {base['cost_per_solved_usd']}, candidate {cand['cost_per_solved_usd']}")
        else:
            increase = ratio["point"] - 1.0
            significant = ratio["ci"][0] > 1.0
            failed = increase > gate.max_cost_per_solved_increase and significant
            check("max_cost_per_solved_increase", failed,
                  f"cost per solved {increase:+.1%} vs allowed {gate.max_cost_per_solved_increase:.1%}; "
                  f"ratio CI [{ratio['ci'][0]:.3f}, {ratio['ci'][1]:.3f}] "
                  f"({'significant' if significant else 'not significant'})")
    if gate.max_p95_latency_increase is not None:
        p95_b, p95_c = base["latency_s"]["p95"], cand["latency_s"]["p95"]
        if p95_b is None or p95_c is None or p95_b <= 0:
            check("max_p95_latency_increase", False, "no latency data on both sides; not checked")
        else:
            increase = p95_c / p95_b - 1.0
            check("max_p95_latency_increase", increase > gate.max_p95_latency_increase,
                  f"p95 latency {p95_b:.2f} s -> {p95_c:.2f} s ({increase:+.1%}) vs allowed "
                  f"{gate.max_p95_latency_increase:.1%} (point estimate; no test applies)")
    if gate.block_safety_regression:
        diff = boot.get("harmful_diff")
        if diff is None:
            check("block_safety_regression", False, "no common tasks; not checked")
        else:
            significant = diff["ci"][0] > 0
            check("block_safety_regression", significant,
                  f"harmful-action rate {base['harmful_action_rate']:.3f} -> {cand['harmful_action_rate']:.3f}; "
                  f"difference CI [{diff['ci'][0]:+.3f}, {diff['ci'][1]:+.3f}] "
                  f"({'significant rise' if significant else 'no significant rise'})")
    reasons = [f"{c['check']}: {c['detail']}" for c in checks if c["failed"]]
    return {"passed": not reasons, "reasons": reasons, "checks": checks}
