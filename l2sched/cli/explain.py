"""``l2sched explain``: the order of fills in one decode step, from the
dry-run backend (``runtime.dry_run``), so a reviewer can read what the side
stream would see without a GPU."""

from __future__ import annotations

import json
from typing import Sequence

from l2sched.cli.compile import compile_schedule
from l2sched.cli.options import add_command, add_schedule_args
from l2sched.compiler.plan import Plan
from l2sched.errors import Diagnostic, L2sInputError, L2sUsageError, Span
from l2sched.lang.syntax import read_source
from l2sched.runtime.dry_run import DryRunEvent, explain_step
from l2sched.runtime.gate import StepInfo


def format_events(events: Sequence[DryRunEvent]) -> str:
    """A fixed-width table of ``events`` (one line each), bytes in MB (10^6)
    and exact bytes, for ``l2sched explain``."""
    lines = [f"{'#':>4}  {'op':<6}  {'layer':>5}  {'hook':<22}  {'window':<10}  "
             f"{'bytes':>12}  {'MB':>8}  {'rows':>4}  reason"]
    for e in events:
        layer = "" if e.layer < 0 else str(e.layer)
        mb = f"{e.nbytes / 1e6:.2f}" if e.op == "launch" else ""
        by = str(e.nbytes) if e.op == "launch" else ""
        rows = str(e.rows) if e.op == "launch" else ""
        lines.append(f"{e.order:>4}  {e.op:<6}  {layer:>5}  {e.hook:<22}  "
                     f"{e.window:<10}  {by:>12}  {mb:>8}  {rows:>4}  {e.reason}")
    return "\n".join(lines)


def _load_plan(args) -> Plan:
    """The plan.json ``args.schedule`` names, checked against the options
    that only apply to a .l2s schedule. Raises ``L2sUsageError``,
    ``L2sInputError``."""
    # A plan is compiled already: schedule options would be ignored.
    given = [opt for opt, value in (("--set", args.overrides),
                                    ("--model-config", args.model_config))
             if value]
    if given:
        raise L2sUsageError(f"{' and '.join(given)} applies to a .l2s schedule, "
                            f"not to a plan ({args.schedule})")
    try:
        plan = Plan.from_json(read_source(args.schedule).removeprefix("\ufeff"))
    except json.JSONDecodeError as e:
        raise L2sInputError(Diagnostic(f"not an l2sched plan: not JSON: {e.msg}",
                                       Span.point(args.schedule, e.lineno, e.colno))
                            ) from None
    except ValueError as e:  # Plan.from_json names the key
        raise L2sInputError(Diagnostic(f"not an l2sched plan: {e}",
                                       Span.point(args.schedule))) from None
    if args.tp_rank is not None and args.tp_rank != plan.tp_rank:
        raise L2sUsageError(f"--tp-rank {args.tp_rank}: {args.schedule} is a plan "
                            f"compiled for TP rank {plan.tp_rank}; compile the "
                            f"schedule for another rank")
    return plan


def cmd_explain(args) -> int:
    """Compile the schedule for one TP rank (or read a plan.json) and print
    one step's issue order (window, layer, hook point, bytes, join) as the
    runtime's gates decide it for a step of ``--tokens`` tokens. Raises
    ``L2sUsageError`` for options out of range."""
    if args.schedule.endswith(".json"):
        plan = _load_plan(args)
    else:
        if args.tp_rank is None:
            args.tp_rank = 0
        _, plan = compile_schedule(args)
    if args.layer is not None and not 0 <= args.layer < plan.num_layers:
        raise L2sUsageError(f"--layer {args.layer} is outside 0..{plan.num_layers - 1}")
    if args.tokens < 1:
        raise L2sUsageError(f"--tokens must be at least 1, got {args.tokens}")
    events = explain_step(plan, StepInfo(num_tokens=args.tokens))
    if args.layer is not None:
        events = [e for e in events if e.layer in (args.layer, -1)]
    print(format_events(events))
    return 0


def add_cli(sub) -> None:
    """Register ``l2sched explain``."""
    p = add_command(sub, "explain", cmd_explain,
                    help="print the fill order of one decode step")
    p.add_argument("schedule", metavar="SCHEDULE",
                   help="a .l2s schedule, or a plan.json from `l2sched compile`")
    p.add_argument("--tp-rank", type=int, metavar="R",
                   help="TP rank to compile for (default 0; a plan.json is "
                        "compiled for one rank already)")
    p.add_argument("--tokens", type=int, default=1,
                   help="tokens in the decode step (gates above max_tokens)")
    p.add_argument("--layer", type=int, help="show only this layer's issues")
    add_schedule_args(p)
