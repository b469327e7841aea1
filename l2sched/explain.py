"""``l2sched explain``: the order of fills in one decode step, from the
dry-run backend (``l2sched.runtime.DryRunRuntime``), so a reviewer can read
what the side stream would see without a GPU."""

from __future__ import annotations

import sys


def _usage(message: str) -> int:
    """Print ``l2sched explain: error: MESSAGE`` to stderr; exit code 2."""
    print(f"l2sched explain: error: {message}", file=sys.stderr)
    return 2


def cmd_explain(args) -> int:
    """Compile the schedule for one TP rank and print one step's issue order
    (window, layer, hook point, bytes, join) as the runtime's gates decide it
    for a step of ``--tokens`` tokens."""
    from .compile import compile_from_args
    from .plan import Plan
    from .runtime import StepInfo, explain_step, format_events

    if args.schedule.endswith(".json"):
        from .syntax import read_source

        # A plan is compiled already: schedule options would be ignored.
        given = [opt for opt, value in (("--set", args.overrides),
                                        ("--model-config", args.model_config))
                 if value]
        if given:
            return _usage(f"{' and '.join(given)} applies to a .l2s schedule, "
                          f"not to a plan ({args.schedule})")
        try:
            plan = Plan.from_json(read_source(args.schedule).removeprefix("\ufeff"))
        except (ValueError, KeyError, TypeError) as e:
            from .errors import Diagnostic, L2sInputError, Span

            raise L2sInputError(Diagnostic(f"not an l2sched plan: {e}",
                                           Span.point(args.schedule))) from None
        if args.tp_rank is not None and args.tp_rank != plan.tp_rank:
            return _usage(f"--tp-rank {args.tp_rank}: {args.schedule} is a plan "
                          f"compiled for TP rank {plan.tp_rank}; compile the "
                          f"schedule for another rank")
    else:
        from .errors import L2sUsageError

        if args.tp_rank is None:
            args.tp_rank = 0
        try:
            _, plan = compile_from_args(args)
        except L2sUsageError as err:
            return _usage(str(err))
    if args.layer is not None and not 0 <= args.layer < plan.num_layers:
        return _usage(f"--layer {args.layer} is outside 0..{plan.num_layers - 1}")
    if args.tokens < 1:
        return _usage(f"--tokens must be at least 1, got {args.tokens}")
    events = explain_step(plan, StepInfo(num_tokens=args.tokens))
    if args.layer is not None:
        events = [e for e in events if e.layer in (args.layer, -1)]
    print(format_events(events))
    return 0


def add_cli(sub) -> None:
    """Register ``l2sched explain``."""
    from .cli import add_schedule_args

    p = sub.add_parser("explain", help="print the fill order of one decode step")
    p.add_argument("schedule", metavar="SCHEDULE",
                   help="a .l2s schedule, or a plan.json from `l2sched compile`")
    p.add_argument("--tp-rank", type=int, metavar="R",
                   help="TP rank to compile for (default 0; a plan.json is "
                        "compiled for one rank already)")
    p.add_argument("--tokens", type=int, default=1,
                   help="tokens in the decode step (gates above max_tokens)")
    p.add_argument("--layer", type=int, help="show only this layer's issues")
    add_schedule_args(p)
    p.set_defaults(handler=cmd_explain)
