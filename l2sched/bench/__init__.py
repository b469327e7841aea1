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


def shipped_path(path: str) -> str:
    """``path`` as given when it exists; else, for a path under
    ``schedules/`` (the benchmark defaults and the arm paths results
    record), the shipped copy of that file or folder, so the benchmark and
    its reports work from any directory. Unchanged otherwise (the caller
    reports a missing file)."""
    from pathlib import Path

    from ..syntax import packaged_dir
    p = Path(path)
    if p.exists() or p.is_absolute() or not p.parts or p.parts[0] != "schedules":
        return path
    shipped = packaged_dir("l2sched.schedules", "schedules").joinpath(*p.parts[1:])
    return str(shipped) if shipped.exists() else path


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


def _usage(cmd: str, message: str) -> int:
    print(f"l2sched bench {cmd}: {message}", file=sys.stderr)
    return 2


def _torch_missing(cmd: str) -> bool:
    """True (after printing the one-line usage error) when torch cannot be
    imported: ``bench run`` and ``bench tp`` need it."""
    try:
        import torch  # noqa: F401
    except ModuleNotFoundError as e:
        if e.name != "torch":
            raise
        _usage(cmd, "needs torch (pip install -e '.[vllm]' or a torch wheel)")
        return True
    return False


def _bad_tokens(tokens) -> str | None:
    if not tokens:
        return "--tokens is empty"
    low = min(tokens)
    return f"--tokens must be >= 1, got {low}" if low < 1 else None


def read_text_file(path: str, what: str = "file") -> str:
    """The UTF-8 text of ``path``; ``L2sInputError`` (one line, naming the
    file) when it is missing, not a regular file, unreadable or not UTF-8
    (``files.read_input_text``)."""
    from ..files import read_input_text
    return read_input_text(path, what)


def read_json_file(path: str, what: str = "result file"):
    """``read_text_file`` + JSON; ``L2sInputError`` when it is not JSON."""
    import json

    from ..errors import L2sInputError
    text = read_text_file(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise L2sInputError(f"{path}: not valid JSON: {e}") from None


def cmd_run(args) -> int:
    """``bench run``: exit 2 on unusable options or without torch."""
    bad = _bad_tokens(args.tokens)
    if bad:
        return _usage("run", bad)
    if _torch_missing("run"):
        return 2
    from .run import run
    run(args)
    return 0


def cmd_report(args) -> int:
    """``bench report``: exit 1 when the result or header file is unusable."""
    from ..errors import L2sError
    from .report import report
    try:
        header = read_text_file(args.header, "header file") if args.header else ""
        report(args.result, args.json_out, args.md_out, args.command, header,
               args.device_profile)
    except L2sError as e:
        print(f"l2sched bench report: {e}", file=sys.stderr)
        return 1
    except (KeyError, TypeError, IndexError, AttributeError, ValueError) as e:
        # a result JSON with missing or mistyped fields
        why = str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}"
        print(f"l2sched bench report: {args.result}: not a usable `l2sched bench run` "
              f"result ({why})", file=sys.stderr)
        return 1
    return 0


def cmd_tp(args) -> int:
    """``bench tp``: exit 2 on unusable options or without torch."""
    bad = _bad_tokens(args.tokens)
    if not bad and args.world_size and args.world_size < 2:
        bad = f"--world-size must be >= 2, got {args.world_size}"
    if bad:
        return _usage("tp", bad)
    if _torch_missing("tp"):
        return 2
    from ..errors import L2sError
    from .tp import run_tp
    try:
        run_tp(args)
    except L2sError as e:  # the schedule, --set or the device profile
        print(f"l2sched bench tp: {e}", file=sys.stderr)
        return 1
    except ValueError as e:
        return _usage("tp", str(e))
    return 0


def cmd_tp_report(args) -> int:
    """``bench tp-report``: exit 1 when a result file is unusable."""
    from ..errors import L2sError
    from .tp_report import cmd
    try:
        return cmd(args)
    except L2sError as e:
        print(f"l2sched bench tp-report: {e}", file=sys.stderr)
        return 1


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
    from .options import tp_arguments
    tp_arguments(t)
    t.set_defaults(func=cmd_tp, handler=cmd_tp)
    tr = sub.add_parser("tp-report", help="markdown of a `bench tp` result; "
                        "optionally fit the all-reduce model into a device profile")
    from .options import tp_report_arguments
    tp_report_arguments(tr)
    tr.set_defaults(func=cmd_tp_report, handler=cmd_tp_report)


def main(argv=None) -> int:
    """``python -m l2sched.bench ...``."""
    ap = argparse.ArgumentParser(prog="l2sched bench")
    sub = ap.add_subparsers(dest="cmd", required=True)
    add_cli(sub)
    args = ap.parse_args(["bench"] + list(sys.argv[1:] if argv is None else argv))
    return args.func(args)
