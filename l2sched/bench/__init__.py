"""``l2sched bench``: the H200 stand-in benchmark of a GLM-5.3-Flash TP4 decode step.

``l2sched bench run --out FILE`` (GPU; ``--dry`` runs shapes only on the meta
device) measures the arms (``run.py``); ``l2sched bench report FILE`` lints
every arm on CPU (uncalibrated and calibrated with the measured per-op
durations), compares with the measurements and writes the JSON summary and
markdown (``report.py``). ``l2sched bench tp --world-size N --out FILE``
runs the step with real all-reduces, one process per GPU (``tp.py``);
``l2sched bench tp-report FILE`` writes its markdown and can fit the measured
all-reduces into a device profile (``tp_report.py``). torch is imported
inside functions only.
"""

from __future__ import annotations

import argparse
import sys


def add_arguments(p) -> None:
    """Options of ``bench run``."""
    p.add_argument("--out", default="", help="result JSON path")
    p.add_argument("--tokens", type=lambda s: [int(x) for x in s.split(",")],
                   default=[1, 4, 16, 64], help="decode tokens M per step (list)")
    p.add_argument("--replays", type=int, default=25)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--eager-reps", type=int, default=2)
    p.add_argument("--ideal-reps", type=int, default=5)
    p.add_argument("--expert-pools", type=int, default=3)
    p.add_argument("--schedule", default="schedules/glm53-flash-h200-tp4.l2s")
    p.add_argument("--bench-dir", default="schedules/bench")
    p.add_argument("--variant", action="append", default=[],
                   help="NAME:KEY=VALUE,... extra arm of the schedule with overrides")
    p.add_argument("--load-mode", action="store_true",
                   help="add an arm with the load-mode fill kernel")
    p.add_argument("--dry", action="store_true", help="meta device, no GPU")
    p.add_argument("--per-op", dest="per_op", choices=("graph", "eager"), default="graph",
                   help="per-op times from a timed CUDA-graph variant (default) or the "
                        "host-launch-bound eager pass (fallback, labelled so)")


def cmd_run(args) -> int:
    """``bench run``."""
    from .run import run
    run(args)
    return 0


def cmd_report(args) -> int:
    """``bench report``."""
    from .report import report
    header = ""
    if args.header:
        with open(args.header, encoding="utf-8") as f:
            header = f.read()
    report(args.result, args.json_out, args.md_out, args.command, header,
           args.device_profile)
    return 0


def cmd_tp(args) -> int:
    """``bench tp``: exit 2 on unusable options."""
    from .tp import run_tp
    try:
        run_tp(args)
    except ValueError as e:
        print(f"l2sched bench tp: {e}", file=sys.stderr)
        return 2
    return 0


def cmd_tp_report(args) -> int:
    """``bench tp-report``."""
    from .tp_report import cmd
    return cmd(args)


def add_cli(subparsers) -> None:
    """Register ``l2sched bench`` (``run``/``report``) on ``subparsers``."""
    p = subparsers.add_parser("bench", help="H200 stand-in benchmark of a decode step")
    sub = p.add_subparsers(dest="bench_cmd", required=True)
    r = sub.add_parser("run", help="measure the arms (GPU)")
    add_arguments(r)
    r.set_defaults(func=cmd_run, handler=cmd_run)
    q = sub.add_parser("report", help="lint the arms, compare, write JSON + markdown")
    q.add_argument("result")
    q.add_argument("--json-out", required=True)
    q.add_argument("--md-out", required=True)
    q.add_argument("--command", default="", help="command line to quote in the report")
    q.add_argument("--header", default="", metavar="FILE",
                   help="markdown file put verbatim at the top of --md-out")
    q.add_argument("--device-profile", default="", metavar="NAME_OR_PATH",
                   help="profile to lint with when the result does not record the one "
                        "its idle intervals came from (default: h200 as shipped now)")
    q.set_defaults(func=cmd_report, handler=cmd_report)
    t = sub.add_parser("tp", help="multi-GPU decode step with real all-reduces "
                       "(one process per rank; --dry: CPU, gloo)")
    from .tp import add_arguments as tp_arguments
    tp_arguments(t)
    t.set_defaults(func=cmd_tp, handler=cmd_tp)
    tr = sub.add_parser("tp-report", help="markdown of a `bench tp` result; "
                        "optionally fit the all-reduce model into a device profile")
    from .tp_report import add_arguments as tp_report_arguments
    tp_report_arguments(tr)
    tr.set_defaults(func=cmd_tp_report, handler=cmd_tp_report)


def main(argv=None) -> int:
    """``python -m l2sched.bench ...``."""
    ap = argparse.ArgumentParser(prog="l2sched bench")
    sub = ap.add_subparsers(dest="cmd", required=True)
    add_cli(sub)
    args = ap.parse_args(["bench"] + list(sys.argv[1:] if argv is None else argv))
    return args.func(args)
