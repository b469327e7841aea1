"""``l2sched check FILE...``: parse, resolve and report every error; a
window table for clean files."""

from __future__ import annotations

import sys

from l2sched import progress
from l2sched.cli.options import (
    add_command,
    add_schedule_args,
    check_device_arg,
    model_config_arg,
    with_device,
)
from l2sched.compiler.compile import schedule_inventory
from l2sched.compiler.plan import layers_by_kind
from l2sched.errors import L2sError
from l2sched.lang.resolve import load_schedule
from l2sched.device import load_device
from l2sched.lint.report import config_line
from l2sched.lint.rules import check_suppressions
from l2sched.model.config import given_config_ref
from l2sched.model.device_ops import check_device_ops
from l2sched.units import format_size, format_table, plural


def default_kernel_label(schedule) -> str:
    """``default (MODE)``: the fill kernel of a window that names none, the
    device profile's ``[fill] default``; plain ``default`` when the profile
    cannot be read (its error is the lint's to report)."""
    try:
        return f"default ({load_device(schedule.device).fill_default})"
    except L2sError:
        return "default"


def window_table(schedule, default: str = "default") -> list[str]:
    """The indented rows ``check`` prints under a clean schedule: window,
    hook point, budget, layers per kind, carry, fill kernel (``default``:
    the label of the device profile's, ``default_kernel_label``); none for a
    schedule without windows."""
    if not schedule.windows:
        return []
    rows = [("window", "hook point", "budget", "layers", "carry", "kernel")]
    for w in schedule.windows:
        # per kind, the layers the window fires in: the count compile's and
        # lint's tables print (compiler.plan.layers_by_kind)
        kinds = layers_by_kind(w.layers, schedule.layer_kinds)
        layer_text = ", ".join(f"{len(v)} {k}" for k, v in sorted(kinds.items()))
        rows.append((w.name, w.hook, format_size(w.budget), layer_text,
                     w.carry or "-", w.kernel or schedule.kernel or default))
    return ["  " + line for line in format_table(rows).splitlines()]


def cmd_check(args) -> int:
    """Parse, resolve extends, apply --set and report every error found
    (and every malformed ``# l2s: ignore`` comment the lint would reject);
    check that the model splits at the schedule's TP/EP (what ``compile``
    will need, reported at the ``tp`` setting). Exit 1 when a file has
    errors."""
    try:
        model_config = model_config_arg(args.model_config)
        config_ref = given_config_ref(args.model_config) if args.model_config else None
    except L2sError as err:
        print(str(err), file=sys.stderr)
        return 1
    check_device_arg(args.device)  # one error naming --device, not one per file
    labels: dict[str, str] = {}  # device -> its default-kernel label, read once
    checked: set[str] = set()
    failed = 0
    for path in args.files:
        try:
            s = with_device(load_schedule(path, args.overrides, model_config, config_ref),
                            args.device)
            progress.stage(f"checking {path}")
            check_suppressions(s.sources)  # the lint's '# l2s: ignore' comments
            schedule_inventory(s, model_config)
            if s.device not in checked:  # the profile's op tables against the model
                check_device_ops(load_device(s.device), s.model)
                checked.add(s.device)
        except L2sError as err:
            print(str(err), file=sys.stderr)
            failed += 1
            continue
        if not args.quiet:
            if s.device not in labels:
                labels[s.device] = default_kernel_label(s)
            default = labels[s.device]
            print(f"{path}: ok: schedule '{s.name}' for {s.model} on {s.device}, "
                  f"TP{s.tp}, EP {'on' if s.ep else 'off'}, policy {s.policy}, "
                  f"prefetch at <= {s.max_tokens} tokens, fill kernel "
                  f"{s.kernel or default}, {plural(len(s.windows), 'window')}")
            print(f"  {config_line(s)}")
            for line in window_table(s, default):
                print(line)
    if failed:
        print(f"{failed} of {plural(len(args.files), 'file')} "
              f"{'has' if failed == 1 else 'have'} errors", file=sys.stderr)
    return 1 if failed else 0


def add_cli(sub) -> None:
    """Register ``l2sched check``."""
    p = add_command(sub, "check", cmd_check,
                    help="parse and resolve schedules, report errors")
    p.add_argument("files", nargs="+", metavar="FILE", help="the .l2s schedules to check")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="print nothing for clean files")
    add_schedule_args(p)
