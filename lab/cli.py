"""``python -m lab bench ...``: the research commands over the product's
decode-step measurement (``l2sched bench run|tp`` with the validation,
perturbation and control arm sets; ``report``, ``tp-report``,
``calibrate``, ``kernel``). Run from a checkout (the repository root on
``sys.path``); exit codes as ``l2sched``'s."""

from __future__ import annotations

import os
import sys

from l2sched import progress
from l2sched.cli import bench as product
from l2sched.cli.bench import _check_outputs, _require_torch
from l2sched.cli.options import add_command
from l2sched.errors import L2sError, L2sUsageError
from l2sched.files import check_output_path
from l2sched.bench import read_json_file, read_text_file

from lab.bench.options import (kernel_arguments, lab_run_arguments, lab_tp_arguments,
                               tp_report_arguments)


def _research_arms(args) -> None:
    """Turn ``--validation``/``--perturbations`` into the A/A arm and the
    variants ``l2sched.bench.arms.arm_specs`` takes (``args.aa``,
    ``args.arm_variants``)."""
    from lab.bench.arms import perturbation_variants, validation_variants
    from l2sched.bench import shipped_path
    variants = []
    if getattr(args, "validation", False):
        variants += validation_variants(shipped_path(args.schedule))
    if getattr(args, "perturbations", False):
        variants += perturbation_variants(shipped_path(args.schedule))
    # both sets may name the same arm (another fill kernel): measure it once
    firsts = {}
    for v in variants:
        firsts.setdefault(v.partition(":")[0], v)
    args.arm_variants = list(firsts.values())
    if getattr(args, "validation", False) or getattr(args, "perturbations", False):
        args.aa = True


def _with_research_arms(product_cmd):
    """A handler that runs ``product_cmd`` (``l2sched bench run|tp``'s)
    after ``_research_arms``; a schedule that does not resolve is a usage
    error, as in the product command."""
    def cmd(args) -> int:
        try:
            _research_arms(args)
        except L2sError as e:
            raise L2sUsageError(str(e)) from None
        return product_cmd(args)
    cmd.__doc__ = f"``lab {product_cmd.__doc__.strip('`').split('`')[0]}`` with the research arm sets."
    return cmd


#: ``lab bench run`` / ``lab bench tp``: the product's with the research arm sets.
cmd_run = _with_research_arms(product.cmd_run)
cmd_tp = _with_research_arms(product.cmd_tp)


def cmd_kernel(args) -> int:
    """``bench kernel``: exit 2 on unusable options or without torch; exit 1
    for an unusable ``--out``/``--md-out`` (before anything runs)."""
    _check_outputs(args.out, args.md_out or None)
    if args.reps < 3:
        raise L2sUsageError(f"--reps must be at least 3, got {args.reps}")
    if args.consumer_rounds < 10:
        raise L2sUsageError(f"--consumer-rounds must be at least 10, got "
                            f"{args.consumer_rounds}")
    from lab.bench.kernel import parse_shapes, parse_sizes, parse_variants

    try:
        if args.variants:
            parse_variants(args.variants)
        parse_sizes(args.sizes)
        parse_shapes(args.shapes)
    except ValueError as e:
        raise L2sUsageError(str(e)) from None
    _require_torch(gpu=True)
    from lab.bench.kernel import run_kernel_bench

    run_kernel_bench(args)
    return 0



def cmd_report(args) -> int:
    """``bench report``: exit 1 when the result or header file or an output
    path is unusable."""
    _check_outputs(args.json_out, args.md_out)
    # the benchmark modules load only when their command runs: every other
    # l2sched command (lint above all) starts faster without them
    from lab.bench.report import report

    try:
        header = read_text_file(args.header, "header file") if args.header else ""
        report(args.result, args.json_out, args.md_out, args.command, header,
               args.device_profile, args.controls)
    except L2sError as e:
        print(f"{args.prog}: {e}", file=sys.stderr)
        return 1
    except (KeyError, TypeError, IndexError, AttributeError, ValueError) as e:
        # a result JSON with missing or mistyped fields
        why = str(e) if isinstance(e, ValueError) else f"{type(e).__name__}: {e}"
        print(f"{args.prog}: {args.result}: not a usable `l2sched bench run` "
              f"result ({why})", file=sys.stderr)
        return 1
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
    from lab.bench.tp_report import cmd as tp_report_cmd

    try:
        return tp_report_cmd(args)
    except L2sError as e:
        print(f"{args.prog}: {e}", file=sys.stderr)
        return 1



def cmd_calibrate(args) -> int:
    """``bench calibrate``: fit the two decode-step terms from one result and
    write the calibrated profile (atomically); exit 1 for an unusable result,
    profile or output path, 2 for an output that is one of its inputs."""
    # the input result is never the output (nor is a named starting profile)
    check_output_path(args.out, protect=[args.result] + (
        [args.profile] if args.profile and args.profile.endswith(".toml") else []))
    from lab.bench import calibrate_model as cm
    from l2sched.files import write_text_atomically

    try:
        d = read_json_file(args.result)
        text, source = cm.profile_text(d, args.profile, where=args.result)
        cal = cm.calibrate(d, args.profile, progress=progress.stage, where=args.result,
                           objective=args.objective)
        out = cm.calibrated_profile_text(text, source, cal, args.result)
    except L2sError as e:
        print(f"{args.prog}: {e}", file=sys.stderr)
        return 1
    except (KeyError, TypeError, IndexError, AttributeError, ValueError) as e:
        print(f"{args.prog}: {args.result}: not a usable `l2sched bench run "
              f"--perturbations` or `bench tp --validation` result "
              f"({type(e).__name__}: {e})", file=sys.stderr)
        return 1
    write_text_atomically(args.out, out, protect=[args.result])
    aside = cal["set_aside"]
    rule = cm.OBJECTIVE_RULES[args.objective].replace("|gain error|", "|error|")
    print(f"fill_slowdown_scale = {cal['scale']:g} ({rule} on the grid "
          f"{cal['scan'][0][0]:g}..{cal['scan'][-1][0]:g})")
    print("median |error| / wrong-way pairs per scale: " + ", ".join(
        f"{x:g}: {e:.1f} us / {w}" for x, e, w in cal["scan"]))
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
    """Register ``bench`` (``run``, ``tp``, ``report``, ``tp-report``,
    ``calibrate``, ``kernel``) on ``subparsers``."""
    p = subparsers.add_parser("bench", help="the decode-step research benchmarks")
    sub = p.add_subparsers(dest="bench_cmd", required=True)
    r = add_command(sub, "run", cmd_run, help="measure the arms (GPU)")
    lab_run_arguments(r)
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
    lab_tp_arguments(t)
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
    c.add_argument("--objective", choices=("error", "wrong-way-first"), default="error",
                   help="how the scale is chosen on the grid: least median |error| "
                        "(default), or fewest pairs predicted faster and measured slower "
                        "beyond the floor first, then least median |error|")
