"""``fleetmon compare``: the offline release report and gate (exit 0 pass, 1 gate failed, 2 bad input)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from monitor.cli.output import EXIT_BAD_INPUT, EXIT_GATE_FAILED, EXIT_OK, dumps


def _parse_ks(text: str) -> list[int]:
    try:
        ks = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--ks must be comma-separated integers >= 1, got {text!r}") from None
    if not ks or any(k < 1 for k in ks):
        raise argparse.ArgumentTypeError(f"--ks must be comma-separated integers >= 1, got {text!r}")
    return ks


def cmd_compare(args: argparse.Namespace) -> int:
    from monitor.offline.compare import compare, group_trials
    from monitor.offline.gate import Gate, GateError, evaluate_gate
    from monitor.offline.loaders import InputError, agent_name_for, parse_mapping, read_traces, select_agent
    from monitor.offline.report import render_compare
    from monitor.pricing import PriceMap, PricingError

    try:
        prices = PriceMap.load(args.price_map)
        gate = Gate.load(args.gate) if args.gate else None
        mapping = parse_mapping(",".join(args.map)) if args.map else None
        agents = []
        for side, path, wanted in (("baseline", args.baseline, args.baseline_agent),
                                   ("candidate", args.candidate, args.candidate_agent)):
            traces = select_agent(read_traces(path, mapping=mapping, default_agent=agent_name_for(path)),
                                  wanted, path)
            names = sorted({t.model_id for t in traces})
            if len(names) > 1:
                raise InputError(f"{path}: holds several agents ({', '.join(names[:5])}"
                                 f"{' ...' if len(names) > 5 else ''}); pick one with --{side}-agent")
            agents.append(group_trials(names[0], traces, prices))
        report = compare(agents[0], agents[1], ks=args.ks, slice_by=args.slice_by or (),
                         confidence=1 - args.alpha, n_resamples=args.resamples, seed=args.seed)
    except (InputError, PricingError, GateError, ValueError) as exc:
        print(f"fleetmon compare: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if gate is not None:
        report["gate"] = evaluate_gate(report, gate)
    print(dumps(report) if args.json else render_compare(report))
    if gate is not None and not report["gate"]["passed"]:
        if args.json:
            for reason in report["gate"]["reasons"]:
                print(f"gate: {reason}", file=sys.stderr)
        return EXIT_GATE_FAILED
    return EXIT_OK


def register(sub: Any) -> None:
    p = sub.add_parser("compare", help="offline release comparison and gate (BASELINE vs CANDIDATE)")
    p.add_argument("baseline", help="baseline traces: .jsonl (either trace form) or .csv with a header")
    p.add_argument("candidate", help="candidate traces, same formats")
    p.add_argument("--price-map", help="TOML price map (default: the bundled map)")
    p.add_argument("--slice-by", action="append", metavar="TAG", help="tag or field to slice by (repeatable)")
    p.add_argument("--ks", type=_parse_ks, default=[1, 2, 4], help="k values for pass@k / pass^k (default 1,2,4)")
    p.add_argument("--json", action="store_true", help="one JSON document instead of text")
    p.add_argument("--gate", help="TOML file of gate thresholds; exit 1 when any vetoes")
    p.add_argument("--map", action="append", metavar="SRC=DST,...",
                   help="rename input columns first, e.g. model=agent,instance_id=task,resolved=ok")
    p.add_argument("--baseline-agent", help="use only this agent's records from BASELINE")
    p.add_argument("--candidate-agent", help="use only this agent's records from CANDIDATE")
    p.add_argument("--alpha", type=float, default=0.05, help="1 - confidence of every interval (default 0.05)")
    p.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples (default 10000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.set_defaults(func=cmd_compare)
