"""``l2sched explain``: the order of fills in one decode step, from the
dry-run backend (``runtime.dry_run``), so a reviewer can read what the side
stream would see without a GPU."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from l2sched.cli.compile import compile_schedule
from l2sched.cli.options import (
    add_command,
    add_schedule_args,
    check_token_counts,
    model_config_arg,
)
from l2sched.compiler.plan import Plan
from l2sched.errors import L2sUsageError
from l2sched.lang.syntax import read_source
from l2sched.runtime.gate import StepInfo
if TYPE_CHECKING:
    from l2sched.runtime.dry_run import DryRunEvent
from l2sched.units import GRAPH_MODES, format_size


def format_events(events: Sequence[DryRunEvent]) -> str:
    """A fixed-width table of ``events`` (one line each), bytes in MB (10^6)
    and exact bytes, for ``l2sched explain``; one line saying so for no
    events."""
    if not events:
        return "no fills: nothing is launched or joined in a step"
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


def left_over_line(plan: Plan) -> str:
    """The line under ``explain``'s table: the bytes no window could take in
    one decode step (all layers), per window with (up to three of) the
    tensor names; ``l2sched lint`` (L2S201) names them all."""
    if not plan.left_over:
        return "left over (no window could take), per decode step: 0 B"
    windows: dict[str, list] = {}
    for lo in plan.left_over:
        entry = windows.setdefault(lo.window, [0, set()])
        entry[0] += lo.nbytes
        entry[1].add(lo.tensor)
    total = sum(n for n, _ in windows.values())
    def names(tensors) -> str:
        shown = sorted(tensors)
        more = f", +{len(shown) - 3} more" if len(shown) > 3 else ""
        return ", ".join(shown[:3]) + more

    parts = "; ".join(f"{w} {n:,} B ({names(t)})" for w, (n, t) in windows.items())
    return (f"left over (no window could take), per decode step: {total:,} B "
            f"({format_size(total)}): {parts}")


def _load_plan(args) -> Plan:
    """The plan.json ``args.schedule`` names, checked against its schema and
    its model (``--model-config``: the config it was compiled with) and
    against the options that only apply to a .l2s schedule. Raises
    ``L2sUsageError``, ``L2sInputError`` (every problem of the file, each at
    the line and column of its value)."""
    # A plan is compiled already: schedule options would be ignored.
    given = [opt for opt, value in (("--set", args.overrides),
                                    ("--device", args.device))
             if value]
    if given:
        raise L2sUsageError(f"{' and '.join(given)} applies to a .l2s schedule, "
                            f"not to a plan ({args.schedule})")
    plan = Plan.from_json(read_source(args.schedule).removeprefix("\ufeff"),
                          args.schedule, model_config_arg(args.model_config))
    if args.tp_rank is not None and args.tp_rank != plan.tp_rank:
        raise L2sUsageError(f"--tp-rank {args.tp_rank}: {args.schedule} is a plan "
                            f"compiled for TP rank {plan.tp_rank}; compile the "
                            f"schedule for another rank")
    return plan


def cmd_explain(args) -> int:
    """Compile the schedule for one TP rank (or read a plan.json) and print
    one step's issue order (window, layer, hook point, bytes, join) as the
    runtime's gates decide it for a step of ``--tokens`` tokens in
    ``--graph-mode`` (captured with ``--capturing``), then the step's
    left-over bytes. Raises
    ``L2sUsageError`` for options out of range."""
    if args.schedule.endswith(".json"):
        plan = _load_plan(args)
    else:
        if args.tp_rank is None:
            args.tp_rank = 0
        _, plan = compile_schedule(args)
    if args.layer is not None and not 0 <= args.layer < plan.num_layers:
        raise L2sUsageError(f"--layer {args.layer} is outside 0..{plan.num_layers - 1}")
    check_token_counts("--tokens", [args.tokens])
    # the runtime is loaded by this command only: `l2sched lint` starts faster
    from l2sched.runtime.dry_run import explain_step

    step = StepInfo(num_tokens=args.tokens, graph_mode=args.graph_mode,
                    capturing=args.capturing)
    events = explain_step(plan, step)
    if args.layer is not None:
        events = [e for e in events if e.layer in (args.layer, -1)]
    print(format_events(events))
    print(left_over_line(plan))
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
    p.add_argument("--graph-mode", choices=GRAPH_MODES, default="eager",
                   help="CUDA-graph mode of the step (default eager)")
    p.add_argument("--capturing", action="store_true",
                   help="the step is being captured into a CUDA graph")
    add_schedule_args(p)
