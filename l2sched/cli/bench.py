"""``l2sched bench run|report|kernel|tp|tp-report|calibrate``: the H200 stand-in benchmark of
a GLM-5.3-Flash decode step (``l2sched.bench``). Options are validated
before torch is imported or ranks are spawned."""

from __future__ import annotations

import contextlib
import os
import sys

from l2sched.bench import shipped_path
from l2sched.bench.arms import check_variants
from l2sched.bench.options import run_arguments, tp_arguments
from l2sched.cli.options import add_command, check_token_counts
from l2sched.device import profile_path
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
        raise L2sUsageError("needs torch: pip install 'l2sched[vllm]' (in a checkout: "
                            "pip install -e '.[vllm]') or a torch wheel") from None
    if gpu and not torch.cuda.is_available():
        raise L2sUsageError("needs a CUDA GPU (compute capability >= 9.0)"
                            + ("; --dry runs the shapes on the CPU" if dry_hint else ""))


def _check_outputs(*paths, inputs=()) -> None:
    """``files.check_output_path`` for every output option given (None =
    not given), before any work: one line and exit 1 for an empty path or a
    directory, exit 2 for one of ``inputs`` (``_run_inputs``)."""
    for path in paths:
        if path is not None:
            check_output_path(path, protect=inputs)


def _run_inputs(args) -> list[str]:
    """The files a ``bench run``/``bench tp`` reads after the output check
    (``bench tp``: in the ranks): its schedule and ``bench tp``'s device
    profile (an unknown name is left to the run to report)."""
    inputs = [shipped_path(args.schedule)]
    if getattr(args, "device_profile", None):
        with contextlib.suppress(L2sError):
            inputs.append(str(profile_path(args.device_profile)))
    return inputs


def _bad_tokens(tokens) -> str | None:
    """Why ``--tokens`` is unusable (``check_token_counts``), or None."""
    if not tokens:
        return "--tokens is empty"
    try:
        check_token_counts("--tokens", tokens)
    except L2sUsageError as err:
        return str(err)
    return None


def cmd_run(args) -> int:
    """``bench run``: exit 2 on unusable options or without torch; exit 1
    for an unusable ``--output`` (before anything runs)."""
    _check_outputs(args.out, inputs=_run_inputs(args))
    bad = _bad_tokens(args.tokens)
    if not bad and args.replays < 1:
        bad = f"--replays must be at least 1, got {args.replays}"
    if bad:
        raise L2sUsageError(bad)
    try:
        check_variants(args.variant, args.schedule)
    except ValueError as e:
        raise L2sUsageError(str(e)) from None
    if getattr(args, "controls", "") and not args.aa:
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


def cmd_tp(args) -> int:
    """``bench tp``: exit 2 on unusable options or without torch; exit 1
    for an unusable ``--output`` (before any rank is spawned)."""
    _check_outputs(args.out, inputs=_run_inputs(args))
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


#: The research commands and options that left ``l2sched bench`` for the lab.
LAB_COMMANDS = ("report", "tp-report", "calibrate", "kernel")
LAB_OPTIONS = ("--validation", "--perturbations", "--controls", "--bench-dir")
LAB_NOTE = ("the research commands and arm sets are the lab's, run from a checkout of "
            "the repository: python -m lab bench --help (lab/README.md)")


def moved_to_lab(argv) -> str | None:
    """The usage error for ``l2sched bench ARGV`` when it asks for a command
    or option that moved to the lab (``python -m lab bench ...``), else
    None."""
    if argv and argv[0] in LAB_COMMANDS:
        return f"'bench {argv[0]}' moved to the lab: python -m lab bench {argv[0]} ...; {LAB_NOTE}"
    flags = [a.split("=")[0] for a in argv[1:] if a.split("=")[0] in LAB_OPTIONS]
    if argv and argv[0] in ("run", "tp") and flags:
        return (f"{', '.join(dict.fromkeys(flags))}: an option of the lab's "
                f"'python -m lab bench {argv[0]}'; {LAB_NOTE}")
    return None


def add_cli(subparsers) -> None:
    """Register ``l2sched bench`` (``run``, ``tp``) on ``subparsers``."""
    p = subparsers.add_parser("bench", help="A/B timing of a schedule on a "
                              "GLM-5.3-Flash-shaped decode step (GPU)", epilog=LAB_NOTE)
    sub = p.add_subparsers(dest="bench_cmd", required=True)
    r = add_command(sub, "run", cmd_run, help="time the schedule against no prefetch "
                    "on one GPU (all-reduces as idle intervals)", epilog=LAB_NOTE)
    run_arguments(r)
    t = add_command(sub, "tp", cmd_tp,
                    help="multi-GPU decode step with real all-reduces (one process "
                         "per rank; --dry: CPU, gloo)", epilog=LAB_NOTE)
    tp_arguments(t)
