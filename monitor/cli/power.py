"""``fleetmon power``: tasks for the offline paired test and pairs for the live shadow test (exit 0, 2 bad input).

Offline: :func:`monitor.stats.power.tasks_needed` (exact McNemar, the test of
``fleetmon compare``). Live: :func:`alerts.planning.simulate_live_test`, the
engine's success e-process at the level and floor the configured engine uses
(``alerts.alpha`` split by the policy, ``alerts.success_floor``).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from monitor.cli.output import EXIT_BAD_INPUT, EXIT_OK, dumps

DEFAULT_CONFIG = "fleetmon.toml"


def _config(path: str | None) -> tuple[Any, str]:
    """The configuration and where its floor came from: --config, ./fleetmon.toml if present, else defaults."""
    from monitor.config import load

    if path is None and Path(DEFAULT_CONFIG).is_file():
        path = DEFAULT_CONFIG
    config = load(path)
    return config, (f"{path} [alerts] success_floor" if path else "built-in default alerts.success_floor")


def _check_flags(args: argparse.Namespace) -> None:
    """Ranges of the numeric flags, named as the user typed them."""
    checks = (("--baseline-rate", args.baseline_rate, "in (0, 1)", lambda v: 0 < v < 1),
              ("--effect", args.effect, "a drop in (0, --baseline-rate]", lambda v: 0 < v <= args.baseline_rate),
              ("--discordance", args.discordance, "in [--effect, 1]", lambda v: v is None or 0 < v <= 1),
              ("--alpha", args.alpha, "in (0, 1)", lambda v: v is None or 0 < v < 1),
              ("--power", args.power, "in (0, 1)", lambda v: 0 < v < 1),
              ("--floor", args.floor, "in [0, 1)", lambda v: v is None or 0 <= v < 1))
    for flag, value, allowed, ok in checks:
        if not ok(value):  # nan fails every comparison
            raise ValueError(f"{flag} must be {allowed}, got {value!r}")


def plan(args: argparse.Namespace) -> dict[str, Any]:
    """The whole plan as a JSON-able dict (raises ValueError / ConfigError naming the bad value)."""
    _check_flags(args)
    from alerts.planning import live_level, simulate_live_test
    from alerts.wiring import engine_config
    from monitor.stats.power import mcnemar_power, paired_cells, tasks_needed

    p10, p01 = paired_cells(args.baseline_rate, args.effect, args.discordance)
    alpha_offline = 0.05 if args.alpha is None else args.alpha
    n_tasks = tasks_needed(args.baseline_rate, args.effect, args.discordance, alpha_offline, args.power,
                           n_max=args.max_tasks)
    config, floor_source = _config(args.config)
    if args.alpha is not None:
        from dataclasses import replace
        config = replace(config, alerts=replace(config.alerts, alpha=args.alpha))
    policy = engine_config(config).policy
    floor = policy.floors.success_points if args.floor is None else args.floor
    if args.floor is not None:
        floor_source = "--floor"
    level = live_level(policy, args.slices)
    live: dict[str, Any] = {
        "test": "betting e-process on the paired net flip, H0: net flip <= floor (the engine's success_regression)",
        "floor": floor, "floor_source": floor_source, "alpha": policy.alpha,
        "alpha_success": policy.alpha_share("success_regression"), "slices": args.slices, "level": level,
        "runs": args.runs, "seed": args.seed, "max_pairs": args.max_pairs, "look_every": args.look_every,
    }
    if args.effect <= floor:
        live.update(detected_share=None, median_pairs=None, median_ci=None, p80_pairs=None, p80_ci=None,
                    pairs_at_power=None,
                    note=f"the effect {args.effect:g} is not above the floor {floor:g}: the live test pages on it "
                         f"with probability <= {level:.4g} however long it runs (the floor is part of the null)")
    else:
        result = simulate_live_test(p10, p01, floor, level, runs=args.runs, seed=args.seed,
                                    max_pairs=args.max_pairs, look_every=args.look_every, power=args.power)
        live.update(detected_share=result.detected_share, median_pairs=result.median_pairs,
                    median_ci=list(result.median_ci), p80_pairs=result.p80_pairs, p80_ci=list(result.p80_ci),
                    pairs_at_power=result.pairs_at_power,
                    note="pairs at the first look where the e-value reaches 1/level; the engine looks every "
                         "alerts.interval and pages after alerts.hold more")
    return {
        "baseline_rate": args.baseline_rate, "effect": args.effect,
        "candidate_rate": round(args.baseline_rate - args.effect, 12), "discordance": round(p10 + p01, 12),
        "discordance_source": "given" if args.discordance is not None else "independent",
        "cells": {"baseline_only": p10, "candidate_only": p01}, "power": args.power, "trials": args.trials,
        "offline": {"test": "exact two-sided McNemar on tasks (fleetmon compare), power in the effect's direction",
                    "alpha": alpha_offline, "tasks": n_tasks,
                    "power_at_tasks": mcnemar_power(n_tasks, p10, p01, alpha_offline) if n_tasks else None,
                    "trials_per_agent": n_tasks * args.trials if n_tasks else None},
        "live": live,
    }


def _count(value: float | None) -> str:
    if value is None:
        return "-"
    return "never (beyond the horizon)" if math.isinf(value) else f"{value:,.0f}"


def render_plan(p: dict[str, Any]) -> str:
    off, live = p["offline"], p["live"]
    lines = [f"fleetmon power: baseline {p['baseline_rate']:.3f} -> candidate {p['candidate_rate']:.3f} "
             f"(a drop of {100 * p['effect']:.1f} points), discordance {p['discordance']:.3f} "
             f"({'given' if p['discordance_source'] == 'given' else 'independent outcomes; give --discordance'})",
             f"  cells: baseline only {p['cells']['baseline_only']:.4f}, candidate only "
             f"{p['cells']['candidate_only']:.4f}", "",
             f"offline, {off['test']}; alpha {off['alpha']:g}, power {p['power']:g}:"]
    if off["tasks"] is None:
        lines.append("  tasks needed: more than --max-tasks")
    else:
        lines.append(f"  tasks needed: {off['tasks']:,} (power there {off['power_at_tasks']:.3f}); "
                     f"{off['trials_per_agent']:,} trials per agent at {p['trials']} per task")
    lines += ["", f"live shadow test, {live['test']}:",
              f"  floor {live['floor']:g} ({live['floor_source']}); level {live['level']:.4g} = alpha "
              f"{live['alpha']:g} x success share {live['alpha_success'] / live['alpha']:.3f}"
              + (f" / {live['slices']} slices" if live["slices"] > 1 else "")]
    if live["median_pairs"] is None:
        lines.append(f"  {live['note']}")
    else:
        lines.append(f"  pairs until it pages: median {_count(live['median_pairs'])} (95% CI "
                     f"{_count(live['median_ci'][0])}-{_count(live['median_ci'][1])}), 80th percentile "
                     f"{_count(live['p80_pairs'])} ({_count(live['p80_ci'][0])}-{_count(live['p80_ci'][1])})")
        if p["power"] != 0.8:
            lines.append(f"  pairs by which {100 * p['power']:g}% of runs paged: {_count(live['pairs_at_power'])}")
        lines.append(f"  {live['runs']} runs, seed {live['seed']}, look every {live['look_every']} pair(s), "
                     f"{100 * live['detected_share']:.1f}% paged within {live['max_pairs']:,} pairs")
        lines.append(f"  {live['note']}")
    return "\n".join(lines)


def cmd_power(args: argparse.Namespace) -> int:
    from monitor.config import ConfigError

    try:
        result = plan(args)
    except (ValueError, ConfigError) as exc:
        print(f"fleetmon power: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(dumps(result) if args.json else render_plan(result))
    return EXIT_OK


def _positive_int(name: str) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise argparse.ArgumentTypeError(f"{name} must be an integer >= 1, got {text!r}")
        return value
    return parse


def register(sub: Any) -> None:
    p = sub.add_parser("power", help="plan a comparison: tasks for the offline test, pairs for the live one")
    p.add_argument("--baseline-rate", type=float, required=True, metavar="P",
                   help="baseline success rate (share of tasks, or of shadow requests, it solves)")
    p.add_argument("--effect", type=float, required=True, metavar="D",
                   help="the drop to detect, in rate units (0.05 = 5 points); the candidate's rate is P - D")
    p.add_argument("--discordance", type=float, metavar="Q",
                   help="share of tasks/pairs exactly one agent solves (default: independent outcomes)")
    p.add_argument("--alpha", type=float, metavar="A",
                   help="level of the offline test (default 0.05) and of the live comparison "
                        "(default: alerts.alpha; the success test gets its share)")
    p.add_argument("--power", type=float, default=0.8, metavar="W", help="target power (default 0.8)")
    p.add_argument("--trials", type=_positive_int("--trials"), default=1, metavar="N",
                   help="trials per task in the offline eval (multiplies the trial budget; default 1)")
    p.add_argument("--floor", type=float, help="live test floor (default: alerts.success_floor of the config)")
    p.add_argument("--config", help=f"fleetmon.toml to read alerts.* from (default: ./{DEFAULT_CONFIG} if present)")
    p.add_argument("--slices", type=_positive_int("--slices"), default=1,
                   help="slices sharing the success test's alpha by e-BH; worst case alpha/K (default 1)")
    p.add_argument("--runs", type=_positive_int("--runs"), default=200, help="simulated live runs (default 200)")
    p.add_argument("--seed", type=int, default=0, help="simulation seed (default 0)")
    p.add_argument("--max-pairs", type=_positive_int("--max-pairs"), default=1_000_000,
                   help="horizon of each live run in pairs (default 1,000,000)")
    p.add_argument("--look-every", type=_positive_int("--look-every"), default=1,
                   help="pairs between two looks of the live test (default 1)")
    p.add_argument("--max-tasks", type=_positive_int("--max-tasks"), default=10_000_000,
                   help="largest task count searched for the offline test (default 10,000,000)")
    p.add_argument("--json", action="store_true", help="one JSON document instead of text")
    p.set_defaults(func=cmd_power)
