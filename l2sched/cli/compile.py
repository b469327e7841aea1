"""``l2sched compile SCHEDULE [--tp-rank R] [-o plan.json]``: the plan of
one TP rank as JSON, and a per-kind table of what each window fetches."""

from __future__ import annotations

import sys
from collections import defaultdict
from typing import Iterable, Sequence

from l2sched.cli.options import (
    add_command,
    add_schedule_args,
    model_config_arg,
    with_device,
)
from l2sched.compiler.compile import compile_plan, schedule_inventory
from l2sched.compiler.plan import Plan, empty_notes, layers_by_kind
from l2sched.errors import L2sUsageError
from l2sched.files import check_output_path, write_text_atomically
from l2sched.lang.resolve import load_schedule
from l2sched.lang.schedule import Schedule
from l2sched.model.config import given_config_ref
from l2sched.units import format_size, format_table, plural


def summary_rows(plan: Plan, layer_kinds: Sequence) -> list[tuple[str, ...]]:
    """Per layer kind and window: the layers it fires in
    (``Plan.fire_layers``), bytes per layer (min..max; 0 B where it fired
    and fetched nothing), bytes carried in, bytes left over per layer.
    First row is the header."""
    rows = [("layer kind", "window", "layers", "bytes/layer", "carried in/layer",
             "left/layer")]
    got = {(i.window, i.layer): (i.nbytes, i.carried_in) for i in plan.issues}
    left: dict = defaultdict(int)
    for lo in plan.left_over:
        left[(lo.window, lo.fired_in if lo.fired_in >= 0 else lo.layer)] += lo.nbytes
    groups = [((kind, window), layers) for window, fired in plan.fire_layers().items()
              for kind, layers in layers_by_kind(fired, layer_kinds).items()]
    for (kind, window), layers in sorted(groups):
        sizes = [got.get((window, i), (0, 0))[0] for i in layers]
        carried = [got.get((window, i), (0, 0))[1] for i in layers]
        lefts = [left.get((window, i), 0) for i in layers]

        def rng(v: Iterable[int]) -> str:
            v = list(v)
            lo, hi = format_size(min(v)), format_size(max(v))
            return lo if lo == hi else f"{lo}..{hi}"

        rows.append((kind, window, str(len(layers)), rng(sizes), rng(carried),
                     rng(lefts)))
    return rows


def compile_schedule(args) -> tuple[Schedule, Plan]:
    """Load ``args.schedule`` with ``--set``/``--model-config``, build the
    analytical inventory for its TP/EP and compile for ``args.tp_rank``
    (shared by ``compile`` and ``explain``). Raises ``L2sError``
    (``L2sUsageError`` for a ``--tp-rank`` outside the schedule's TP)."""
    config = model_config_arg(args.model_config)
    ref = given_config_ref(args.model_config) if args.model_config else None
    schedule = with_device(load_schedule(args.schedule, args.overrides, config, ref),
                           args.device)
    if not 0 <= args.tp_rank < schedule.tp:
        raise L2sUsageError(f"--tp-rank {args.tp_rank} is outside 0..{schedule.tp - 1} "
                            f"(the schedule's tp is {schedule.tp})")
    inventory = schedule_inventory(schedule, config, args.tp_rank)
    return schedule, compile_plan(schedule, inventory, args.tp_rank)


def cmd_compile(args) -> int:
    """``l2sched compile SCHEDULE [--tp-rank R] -o plan.json``. An unusable
    ``-o`` (empty, a directory) is refused before compiling."""
    if args.output not in (None, "-"):
        check_output_path(args.output)
    schedule, plan = compile_schedule(args)
    text = plan.to_json()
    if args.output in (None, "-"):
        sys.stdout.write(text)
        out = sys.stderr
    else:
        write_text_atomically(args.output, text, protect=schedule.files)
        out = sys.stdout
        print(f"{args.output}: plan for '{plan.schedule}', TP rank {plan.tp_rank}, "
              f"{plural(len(plan.issues), 'issue')}, "
              f"{format_size(sum(i.nbytes for i in plan.issues))} per decode step",
              file=out)
    rows = summary_rows(plan, schedule.layer_kinds)
    print(format_table(rows) if len(rows) > 1 else "no windows: nothing to fill", file=out)
    for line in empty_notes(plan, schedule.layer_kinds):
        print(line, file=out)
    total_left = sum(lo.nbytes for lo in plan.left_over)
    if total_left:
        print(f"left over (no window could take): {format_size(total_left)} in "
              f"{plural(len(plan.left_over), 'piece')}; `l2sched lint` lists the tensors",
              file=out)
    return 0


def add_cli(sub) -> None:
    """Register ``l2sched compile``."""
    p = add_command(sub, "compile", cmd_compile,
                    help="compile a schedule into a plan (JSON)")
    p.add_argument("schedule", metavar="SCHEDULE", help="the .l2s schedule to compile")
    p.add_argument("--tp-rank", type=int, default=0, metavar="R",
                   help="the TP rank whose plan to write, 0..tp-1 (default 0)")
    p.add_argument("-o", "--output", metavar="PLAN.json",
                   help="write the plan here (default: stdout)")
    add_schedule_args(p)
