"""``l2sched bench run|report|kernel|tp|tp-report|calibrate``: the H200 stand-in benchmark of
a GLM-5.3-Flash decode step (``l2sched.bench``). Options are validated
before torch is imported or ranks are spawned."""

from __future__ import annotations

import os
import sys

from l2sched import progress
from l2sched.bench import read_json_file, read_text_file
from l2sched.bench.options import (
    kernel_arguments,
    run_arguments,
    tp_arguments,
    tp_report_arguments,
)
from l2sched.cli.options import add_command
from l2sched.errors import L2sError, L2sUsageError
from l2sched.files import check_output_path


def _require_torch(gpu: bool = False, dry_hint: bool = False) -> None:
    """Raise ``L2sUsageError`` when torch cannot be imported (``bench run``,
    ``bench kernel`` and ``bench tp`` need it) or, with ``gpu``, when torch
    sees no CUDA device (``dry_hint``: say that ``--dry`` runs without)."""
    try:
        import torch
    except ModuleNotFoundError as e:
        if e.name != "torch":
            raise
        raise L2sUsageError("needs torch (pip install -e '.[vllm]' or a torch "
                            "wheel)") from None
    if gpu and not torch.cuda.is_available():
        raise L2sUsageError("needs a CUDA GPU (compute capability >= 9.0)"
                            + ("; --dry runs the shapes on the CPU" if dry_hint else ""))


def _check_outputs(*paths) -> None:
    """``files.check_output_path`` for every output option given (None =
    not given): one line and exit 1 before any work for an empty path or a
    directory."""
    for path in paths:
        if path is not None:
            check_output_path(path)


def _bad_tokens(tokens) -> str | None:
    if not tokens:
        return "--tokens is empty"
    low = min(tokens)
    return f"--tokens must be >= 1, got {low}" if low < 1 else None


def cmd_run(args) -> int:
    """``bench run``: exit 2 on unusable options or without torch; exit 1
    for an unusable ``--out`` (before anything runs)."""
    _check_outputs(args.out)
    bad = _bad_tokens(args.tokens)
    if bad:
        raise L2sUsageError(bad)
    from l2sched.bench.arms import check_variants
    try:
        check_variants(args.variant, args.schedule)
    except ValueError as e:
        raise L2sUsageError(str(e)) from None
    if args.controls and not (args.validation or args.perturbations):
        raise L2sUsageError("--controls needs the A/A arm of --validation or --perturbations "
                            "(a controls run without it cannot be scored)")
    if args.trace_dir and not args.dry:
        try:  # made now, so a bad path fails before any measurement
            os.makedirs(args.trace_dir, exist_ok=True)
        except OSError as e:
            raise L2sUsageError(f"--trace-dir {args.trace_dir}: cannot make it: "
                                f"{e.strerror or e}") from None
    _require_torch(gpu=not args.dry, dry_hint=True)
    from l2sched.bench.run import run  # imports torch

    run(args)
    return 0


def cmd_kernel(args) -> int:
    """``bench kernel``: exit 2 on unusable options or without torch; exit 1
    for an unusable ``--out``/``--md-out`` (before anything runs)."""
    _check_outputs(args.out, args.md_out or None)
    if args.reps < 3:
        raise L2sUsageError(f"--reps must be at least 3, got {args.reps}")
    if args.consumer_rounds < 10:
        raise L2sUsageError(f"--consumer-rounds must be at least 10, got "
                            f"{args.consumer_rounds}")
    from l2sched.bench.kernel import parse_shapes, parse_sizes, parse_variants

    try:
        if args.variants:
            parse_variants(args.variants)
        parse_sizes(args.sizes)
        parse_shapes(args.shapes)
    except ValueError as e:
        raise L2sUsageError(str(e)) from None
    _require_torch(gpu=True)
    from l2sched.bench.kernel import run_kernel_bench

    run_kernel_bench(args)
    return 0


def cmd_report(args) -> int:
    """``bench report``: exit 1 when the result or header file or an output
    path is unusable."""
    _check_outputs(args.json_out, args.md_out)
    # the benchmark modules load only when their command runs: every other
    # l2sched command (lint above all) starts faster without them
    from l2sched.bench.report import report

    try:
        header = read_text_file(args.header, "header file") if args.header else ""
        report(args.result, args.json_out, args.md_out, args.command, header,
               args.device_profile, args.controls)
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
    """``bench tp``: exit 2 on unusable options or without torch; exit 1
    for an unusable ``--out`` (before any rank is spawned)."""
    _check_outputs(args.out)
    bad = _bad_tokens(args.tokens)
    if not bad and args.world_size and args.world_size < 2:
        bad = f"--world-size must be >= 2, got {args.world_size}"
    if bad:
        raise L2sUsageError(bad)
    _require_torch()
    from l2sched.bench.tp import run_tp  # imports torch

    try:
        run_tp(args)
    except L2sError as e:  # the schedule, --set or the device profile
        print(f"l2sched bench tp: {e}", file=sys.stderr)
        return 1
    except ValueError as e:
        raise L2sUsageError(str(e)) from None
    return 0


def cmd_tp_report(args) -> int:
    """``bench tp-report``: exit 1 when a result file or an output path is
    unusable."""
    _check_outputs(args.md_out)
    profile = args.update_profile
    if profile is not None and (profile in ("", ".", "..") or os.sep in profile
                                or profile.endswith(".toml")):
        # a path, not a shipped profile's name (devices.profile_path)
        _check_outputs(profile)
    from l2sched.bench.tp_report import cmd as tp_report_cmd

    try:
        return tp_report_cmd(args)
    except L2sError as e:
        print(f"l2sched bench tp-report: {e}", file=sys.stderr)
        return 1


def cmd_calibrate(args) -> int:
    """``bench calibrate``: fit the two decode-step terms from one result and
    write the calibrated profile (atomically); exit 1 for an unusable result,
    profile or output path."""
    # the input result is never the output (nor is a named starting profile)
    check_output_path(args.out, protect=[args.result] + (
        [args.profile] if args.profile and args.profile.endswith(".toml") else []))
    from l2sched.bench import calibrate_model as cm
    from l2sched.files import write_text_atomically

    try:
        d = read_json_file(args.result)
        text, source = cm.profile_text(d, args.profile, where=args.result)
        cal = cm.calibrate(d, args.profile, progress=progress.stage, where=args.result)
        out = cm.calibrated_profile_text(text, source, cal, args.result)
    except L2sError as e:
        print(f"l2sched bench calibrate: {e}", file=sys.stderr)
        return 1
    except (KeyError, TypeError, IndexError, AttributeError, ValueError) as e:
        print(f"l2sched bench calibrate: {args.result}: not a usable `l2sched bench run "
              f"--perturbations` or `bench tp --validation` result "
              f"({type(e).__name__}: {e})", file=sys.stderr)
        return 1
    write_text_atomically(args.out, out, protect=[args.result])
    aside = cal["set_aside"]
    print(f"fill_slowdown_scale = {cal['scale']:g} (least median |error| on the grid "
          f"{cal['scan'][0][0]:g}..{cal['scan'][-1][0]:g})")
    print("median |error| per scale: " + ", ".join(f"{x:g}: {e:.1f} us" for x, e in cal["scan"]))
    print("set_aside_stream_slowdown = " + (
        f"{aside[0]:.4g} (arm {aside[1]})" if aside
        else "unchanged (measured by the profile's set_aside probe)" if cal["set_aside_probed"]
        else "unchanged (no arm with a set-aside)"))
    if not cal["gemm_slowdown_measured"]:
        print("note: the starting profile has no fill.MODE.gemm_slowdown (it predates that "
              "probe); --profile h200 starts from the shipped profile instead")
    for label in ("before", "after"):
        v = cal[label]
        print(f"{label}: agreement {v['verdict_agreement']:.0%}, median |error| "
              f"{v['median_abs_gain_err_us']:.1f} us, Spearman {v['spearman']:.2f} "
              f"({v['n']} arm x M pairs; in sample: judge it on another run)")
    print(f"wrote {args.out}")
    return 0


def add_cli(subparsers) -> None:
    """Register ``l2sched bench`` (``run``/``report``) on ``subparsers``."""
    p = subparsers.add_parser("bench", help="H200 stand-in benchmark of a decode step")
    sub = p.add_subparsers(dest="bench_cmd", required=True)
    r = add_command(sub, "run", cmd_run, help="measure the arms (GPU)")
    run_arguments(r)
    q = add_command(sub, "report", cmd_report,
                    help="lint the arms, compare, write JSON + markdown")
    q.add_argument("result")
    q.add_argument("--json-out", required=True)
    q.add_argument("--md-out", required=True)
    q.add_argument("--command", default="", help="command line to quote in the report")
    q.add_argument("--header", default="", metavar="FILE",
                   help="markdown file put verbatim at the top of --md-out")
    q.add_argument("--device-profile", default="", metavar="NAME_OR_PATH",
                   help="profile to lint with when the result does not record the one "
                        "its idle intervals came from (default: h200 as shipped now)")
    q.add_argument("--controls", action="append", default=[], metavar="RESULT",
                   help="a `bench run --controls` result of another run with the same "
                        "arms and M: add each arm's dispatch-control residual to its "
                        "predicted gain (docs/bench.md#dispatch-controls); given more than "
                        "once, the mean residual over those runs")
    k = add_command(sub, "kernel", cmd_kernel,
                    help="the fill kernels by effect: landed bandwidth, the consumer "
                         "GEMM, cost to concurrent work (GPU)")
    kernel_arguments(k)
    t = add_command(sub, "tp", cmd_tp,
                    help="multi-GPU decode step with real all-reduces (one process "
                         "per rank; --dry: CPU, gloo)")
    tp_arguments(t)
    tr = add_command(sub, "tp-report", cmd_tp_report,
                     help="markdown of a `bench tp` result; optionally fit the "
                          "all-reduce model into a device profile")
    tp_report_arguments(tr)
    c = add_command(sub, "calibrate", cmd_calibrate,
                    help="fit latency.fill_slowdown_scale and l2.set_aside_stream_slowdown "
                         "of a device profile from one `bench run --perturbations` result")
    c.add_argument("result", help="`bench run` result JSON (.gz allowed)")
    c.add_argument("--profile", default="", metavar="NAME_OR_PATH",
                   help="profile to start from (default: the one the result recorded)")
    c.add_argument("--out", required=True, metavar="PROFILE.toml",
                   help="the calibrated profile (written atomically)")
