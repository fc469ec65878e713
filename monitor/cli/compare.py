"""``fleetmon compare``: the offline release report and gate (exit 0 pass, 1 gate failed, 2 bad input).

Two forms. The two-file form ``compare BASELINE CANDIDATE`` (each file one
agent, ``--baseline-agent`` / ``--candidate-agent`` to pick one out of a file
that holds several) is the original command, and its JSON keys are unchanged.
The many-agent form ``compare INPUT [INPUT ...] [--agent NAME ...]
[--baseline NAME]`` takes every agent in the inputs (named by the records'
``agent`` field, else the file name), or those ``--agent`` picks in that
order; the baseline is ``--baseline`` or the first agent. Two inputs without
``--agent`` / ``--baseline`` take the two-file form.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from monitor.cli.output import EXIT_BAD_INPUT, EXIT_GATE_FAILED, EXIT_OK, dumps

FORMATS = ("text", "json", "markdown", "html")
ADJUST = ("bh", "holm", "none")


def _parse_ks(text: str) -> list[int]:
    try:
        ks = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--ks must be comma-separated integers >= 1, got {text!r}") from None
    if not ks or any(k < 1 for k in ks):
        raise argparse.ArgumentTypeError(f"--ks must be comma-separated integers >= 1, got {text!r}")
    return ks


def _parse_threshold(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"--success-threshold must be a number in [0, 1], got {text!r}")
    return value


def _parse_fields(text: str) -> tuple[str, ...]:
    fields = tuple(part.strip() for part in text.split(",") if part.strip())
    if not fields:
        raise argparse.ArgumentTypeError(f"--task-key must be comma-separated field names, got {text!r}")
    return fields


def _two_file_form(args: argparse.Namespace) -> bool:
    return len(args.inputs) == 2 and not args.agent and args.baseline is None


def _load_agents(args: argparse.Namespace, mapping: dict[str, str] | None, prices: Any) -> list[Any]:
    from monitor.offline.loaders import InputError, agent_name_for, read_trials
    from monitor.offline.trials import group_trials

    if args.baseline_agent or args.candidate_agent:
        if not _two_file_form(args):
            raise InputError("--baseline-agent / --candidate-agent go with exactly two inputs (BASELINE CANDIDATE); "
                             "with more, pick agents with --agent and the reference with --baseline")
    agents = []
    if _two_file_form(args):
        for side, path, wanted in (("baseline", args.inputs[0], args.baseline_agent),
                                   ("candidate", args.inputs[1], args.candidate_agent)):
            traces, scores = read_trials(path, mapping=mapping, default_agent=agent_name_for(path),
                                         success_threshold=args.success_threshold)
            names = list(dict.fromkeys(t.model_id for t in traces))
            if wanted is not None:
                if wanted not in names:
                    shown = ", ".join(sorted(names)[:10]) + (" ..." if len(names) > 10 else "")
                    raise InputError(f"{path}: no records for agent {wanted!r}; agents in the file: {shown}")
                keep = [i for i, t in enumerate(traces) if t.model_id == wanted]
                traces, scores, names = [traces[i] for i in keep], [scores[i] for i in keep], [wanted]
            if len(names) > 1:
                ordered = sorted(names)
                raise InputError(f"{path}: holds several agents ({', '.join(ordered[:5])}"
                                 f"{' ...' if len(ordered) > 5 else ''}); pick one with --{side}-agent "
                                 "(or compare them all: add --baseline NAME)")
            agents.append(group_trials(names[0], traces, prices, scores))
        return agents
    if len(set(args.inputs)) != len(args.inputs):
        raise InputError("an input is given twice; each file's trials would count twice")
    by_agent: dict[str, tuple[list[Any], list[float | None]]] = {}
    for path in args.inputs:
        traces, scores = read_trials(path, mapping=mapping, default_agent=agent_name_for(path),
                                     success_threshold=args.success_threshold)
        for trace, score in zip(traces, scores):
            rows = by_agent.setdefault(trace.model_id, ([], []))
            rows[0].append(trace)
            rows[1].append(score)
    names = list(by_agent)
    shown = ", ".join(names[:10]) + (" ..." if len(names) > 10 else "")
    if args.agent:
        missing = [n for n in args.agent if n not in by_agent]
        if missing:
            raise InputError(f"--agent {missing[0]!r} is not in the inputs; agents found: {shown}")
        names = list(dict.fromkeys(args.agent))
    if args.baseline is not None:
        if args.baseline not in by_agent:
            raise InputError(f"--baseline {args.baseline!r} is not in the inputs; agents found: {shown}")
        names = [args.baseline] + [n for n in names if n != args.baseline]
    if len(names) < 2:
        raise InputError(f"compare needs at least two agents; found {len(names)} ({shown})")
    return [group_trials(n, by_agent[n][0], prices, by_agent[n][1]) for n in names]


def cmd_compare(args: argparse.Namespace) -> int:
    from monitor.offline.compare import compare_many
    from monitor.offline.gate import Gate, GateError, evaluate_gate
    from monitor.offline.loaders import InputError, parse_mapping
    from monitor.offline.report import render_compare
    from monitor.pricing import PriceMap, PricingError

    fmt = "json" if args.json else args.format
    try:
        prices = PriceMap.load(args.price_map)
        gate = Gate.load(args.gate) if args.gate else None
        mapping = parse_mapping(",".join(args.map)) if args.map else None
        agents = _load_agents(args, mapping, prices)
        ks = list(args.ks)
        if gate is not None and gate.min_pass_hat_k is not None and gate.min_pass_hat_k[0] not in ks:
            ks.append(gate.min_pass_hat_k[0])  # the gate needs pass^k at its k
        report = compare_many(agents, ks=ks, slice_by=args.slice_by or (), confidence=1 - args.alpha,
                              n_resamples=args.resamples, seed=args.seed, adjust=args.adjust,
                              success_threshold=args.success_threshold)
        if gate is not None:
            report["gate"] = evaluate_gate(report, gate)
    except (InputError, PricingError, GateError, ValueError) as exc:
        print(f"fleetmon compare: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    for cand, block in report["comparisons"].items():
        changed = block.get("changed") or []
        if len(changed) > 1:  # a regression cannot be attributed to one change
            print(f"fleetmon compare: {cand} vs {report['baseline']}: confounded: {len(changed)} components "
                  f"differ ({', '.join(changed)})", file=sys.stderr)
    if fmt == "json":
        print(dumps(report))
    elif fmt == "text":
        print(render_compare(report))
    else:
        try:
            from monitor.offline.render import render  # written by the report-rendering work (issue 14 item 7)
        except ImportError:
            print(f"fleetmon compare: --format {fmt} needs monitor.offline.render, which is not installed",
                  file=sys.stderr)
            return EXIT_BAD_INPUT
        print(render(report, fmt))
    if gate is not None and not report["gate"]["passed"]:
        if fmt != "text":
            for reason in report["gate"]["reasons"]:
                print(f"gate: {reason}", file=sys.stderr)
        return EXIT_GATE_FAILED
    return EXIT_OK


def register(sub: Any) -> None:
    p = sub.add_parser("compare", help="offline release comparison and gate (BASELINE CANDIDATE, or many agents)",
                       description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="trace files: .jsonl (either trace form) or .csv with a header (two-file form: "
                        "BASELINE CANDIDATE)")
    p.add_argument("--agent", action="append", metavar="NAME", help="compare only this agent (repeatable, in order)")
    p.add_argument("--baseline", metavar="NAME", help="the reference agent (default: the first agent)")
    p.add_argument("--adjust", choices=ADJUST, default="bh",
                   help="multiple-comparison correction across comparisons and slices (default bh)")
    p.add_argument("--success-threshold", type=_parse_threshold, default=1.0, metavar="S",
                   help="a trial with a score succeeds when score >= S (default 1.0)")
    p.add_argument("--task-key", type=_parse_fields, default=(), metavar="FIELD,...",
                   help="the task is these fields joined by '/' (after --map), e.g. domain,task")
    p.add_argument("--price-map", help="TOML price map (default: the bundled map)")
    p.add_argument("--slice-by", action="append", metavar="TAG", help="tag or field to slice by (repeatable)")
    p.add_argument("--ks", type=_parse_ks, default=[1, 2, 4], help="k values for pass@k / pass^k (default 1,2,4)")
    p.add_argument("--format", choices=FORMATS, default="text", help="output format (default text)")
    p.add_argument("--json", action="store_true", help="same as --format json")
    p.add_argument("--gate", help="TOML file of gate thresholds; exit 1 when any vetoes")
    p.add_argument("--map", action="append", metavar="SRC=DST,...",
                   help="rename input columns first, e.g. model=agent,instance_id=task,resolved=ok,reward=score")
    p.add_argument("--baseline-agent", help="two-file form: use only this agent's records from BASELINE")
    p.add_argument("--candidate-agent", help="two-file form: use only this agent's records from CANDIDATE")
    p.add_argument("--alpha", type=float, default=0.05, help="1 - confidence of every interval (default 0.05)")
    p.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples (default 10000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.set_defaults(func=cmd_compare)
