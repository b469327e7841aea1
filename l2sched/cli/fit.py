"""``l2sched fit --device PROFILE [-o fitted.l2s]``: search the schedule the
lint's model predicts fastest on a device profile (``l2sched.fit``) and
write it, or a schedule without windows when no candidate's lower-bound
gain beats the noise floor."""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import sys
import time

from l2sched.cli.options import (
    add_command,
    check_device_arg,
    model_config_arg,
    numbers as _numbers,
)
from l2sched.device import DeviceProfile, device_names
from l2sched.errors import L2sUsageError
from l2sched.files import check_output_path, write_texts_atomically
from l2sched.fit import FitOptions, Search, fit_text
from l2sched.model.config import given_config_ref, model_config_help
from l2sched.model.device_ops import check_device_ops
from l2sched.model.inventory import TPSplitError
from l2sched.progress import enabled as progress_enabled
from l2sched.units import FILL_MODES


def parse_options(args):
    """``FitOptions`` from the parsed arguments. Raises ``L2sUsageError``
    naming the option for a bad ``--tokens``, ``--weights``,
    ``--noise-floor-us``, ``--tp`` or ``--jobs``."""
    tokens = _numbers("--tokens", args.tokens, int)
    if min(tokens) < 1 or tokens != sorted(set(tokens)):
        raise L2sUsageError(f"--tokens must be increasing whole numbers >= 1, got "
                            f"{args.tokens!r}")
    if max(tokens) > FitOptions.max_tokens:
        raise L2sUsageError(f"--tokens {max(tokens)}: above the fitted schedule's "
                            f"max_tokens {FitOptions.max_tokens} (no fill runs there)")
    weights = None
    if args.weights is not None:
        weights = _numbers("--weights", args.weights)
        if len(weights) != len(tokens) or min(weights) < 0 or sum(weights) <= 0:
            raise L2sUsageError(f"--weights takes one number >= 0 per --tokens value "
                                f"({len(tokens)}), not all 0; got {args.weights!r}")
    floors = None
    if args.noise_floor_us is not None:
        got = _numbers("--noise-floor-us", args.noise_floor_us)
        if len(got) == 1:
            got = got * len(tokens)
        if len(got) != len(tokens) or min(got) < 0:
            raise L2sUsageError(f"--noise-floor-us takes one number >= 0, or one per "
                                f"--tokens value ({len(tokens)}); got "
                                f"{args.noise_floor_us!r}")
        floors = dict(zip(tokens, got))
    for opt, v in (("--tp", args.tp), ("--jobs", args.jobs)):
        if v < 1:
            raise L2sUsageError(f"{opt} must be at least 1, got {v}")
    return FitOptions(tp=args.tp, tokens=tuple(tokens),
                      weights=tuple(weights) if weights else None, kernel=args.kernel,
                      noise_floor=floors, quick=args.quick, jobs=args.jobs,
                      model_config=model_config_arg(args.model_config),
                      set_aside=args.set_aside, allow_unmeasured=args.allow_unmeasured)


def load_profile(arg: str, kernel: str | None):
    """The device profile ``--device`` names (a shipped name or a ``.toml``
    path) and the fitted schedule's ``device`` value: None for a shipped
    name, else the profile file's absolute path (the schedule then names
    that file, not the shipped profile of the same name). Raises
    ``L2sUsageError`` for a ``--kernel`` the profile has no numbers for;
    ``L2sInputError`` for a value that names no profile, a missing file or
    a profile file with errors (its op tables checked against the model
    adapters), as every command's ``--device`` (``check_device_arg``)."""

    device_profile = check_device_arg(arg)  # every command's --device reader
    check_device_ops(device_profile)
    if kernel is not None and kernel not in device_profile.fill_modes:
        raise L2sUsageError(f"--kernel {kernel}: device profile {device_profile.name} has "
                            f"numbers for {', '.join(sorted(device_profile.fill_modes))} only")
    ref = None if arg in device_names() else os.path.abspath(device_profile.path)
    return device_profile, ref


def written_config_ref(arg: str, output: str | None) -> str:
    """The fitted schedule's ``model_config`` value for ``--model-config
    ARG``: a shipped config's name, else the file's path relative to the
    output's directory (absolute when the schedule goes to stdout)."""
    ref = given_config_ref(arg)
    if ref.shipped_name is not None:
        return ref.shipped_name
    path = os.path.abspath(ref.path)
    return os.path.relpath(path, os.path.dirname(os.path.abspath(output))) \
        if output is not None else path


def command_line(args, opts) -> str:
    """The ``l2sched fit`` command that reproduces the output (every
    option that changes it written out)."""
    parts = ["l2sched", "fit", "--device", args.device, "--tp", str(opts.tp),
             "--tokens", ",".join(map(str, opts.tokens))]
    if args.weights is not None:
        parts += ["--weights", args.weights]
    if args.kernel:
        parts += ["--kernel", args.kernel]
    if args.noise_floor_us is not None:
        parts += ["--noise-floor-us", args.noise_floor_us]
    if args.model_config:
        # a shipped config by its name: its path exists only in a checkout
        parts += ["--model-config",
                  given_config_ref(args.model_config).shipped_name or args.model_config]
    if args.set_aside != "0":
        parts += ["--set-aside", args.set_aside]
    if args.quick:
        parts.append("--quick")
    if args.allow_unmeasured:
        parts.append("--allow-unmeasured")
    if args.output:
        parts += ["-o", args.output]
    return shlex.join(parts)


class _Progress:
    """Progress on stderr where ``l2sched.progress.enabled`` says so (a
    terminal, or ``L2SCHED_PROGRESS=1``; never with ``-q``): a ``rich``
    status line on a terminal when rich is installed, else one plain line
    per phase."""

    def __init__(self, quiet: bool):
        self.quiet = quiet or not progress_enabled(sys.stderr)
        self.t0 = time.monotonic()
        self.phase = ""
        self.status = None
        if self.quiet or not sys.stderr.isatty():
            return
        try:
            from rich.console import Console
        except ModuleNotFoundError:
            return
        self.status = Console(stderr=True).status("l2sched fit: starting")
        self.status.start()

    def __call__(self, phase: str, done: int, total: int) -> None:
        if self.quiet:
            return
        text = f"l2sched fit: {phase} ({done} evaluation{'' if done == 1 else 's'}, " \
               f"{time.monotonic() - self.t0:.0f} s)"
        if self.status is not None:
            self.status.update(text)
        elif phase.split(":")[0] != self.phase:
            print(text, file=sys.stderr, flush=True)
        self.phase = phase.split(":")[0]

    def stop(self) -> None:
        if self.status is not None:
            self.status.stop()


def _name(output: str | None, device_profile: DeviceProfile, tp: int) -> str:
    """The schedule name: the output file's stem, else fit-DEVICE-tpN."""
    stem = os.path.splitext(os.path.basename(output))[0] if output else ""
    stem = re.sub(r"[^A-Za-z0-9_.\-]", "-", stem).strip("-.")
    return stem if stem and stem[0].isalpha() else f"fit-{device_profile.name}-tp{tp}"


def cmd_fit(args) -> int:
    """Fit, write the schedule (``-o``, atomically; else stdout) and print
    the per-M prediction on stderr."""
    opts = parse_options(args)
    device_profile, ref = load_profile(args.device, args.kernel)
    if args.output is not None:
        # before the search, not after it; after reading the device profile
        # and model config, which it may not replace (files.check_output_path)
        check_output_path(args.output)



    progress = _Progress(args.quiet)
    t0 = time.monotonic()
    try:
        search = Search(device_profile, dataclasses.replace(opts, device_ref=ref), progress)
        result = search.run()
    except TPSplitError as e:  # --tp is an option: a usage error, exit 2
        raise L2sUsageError(str(e.diagnostics[0].message)) from None
    finally:
        progress.stop()
    if ref is not None and args.output is not None:
        # the written file names the profile relative to itself
        search.opts = dataclasses.replace(search.opts, device_ref=os.path.relpath(
            ref, os.path.dirname(os.path.abspath(args.output))))
    text = fit_text(result, search, device_arg=args.device,
                    command=command_line(args, opts),
                    name=_name(args.output, device_profile, opts.tp),
                    # the config it was fitted for, so lint reads it
                    model_config=written_config_ref(args.model_config, args.output)
                    if args.model_config else None)
    if args.output is not None:
        write_texts_atomically([(args.output, text)])
    else:
        sys.stdout.write(text)
    _warn_unmeasured(result, opts.tp)
    if not args.quiet:
        if result.withheld is not None:
            what = "NO PREFETCH (windows withheld: unmeasured terms, above)"
        elif result.candidate is None:
            best = ("no candidate had a lower bound" if result.best_rejected is None else
                    f"best lower bound {result.best_rejected:+.1f} us (weighted)")
            what = f"NO PREFETCH; {best}"
        else:
            what = (f"{sum(len(c.links) for c in result.candidate.chains)} windows; "
                    f"objective {result.objective:+.1f} us (lower bound, weighted)")
        print(f"l2sched fit: {what} vs noise floor {result.floor:.1f} us; "
              f"{time.monotonic() - t0:.1f} s"
              + (f"; wrote {args.output}" if args.output else ""), file=sys.stderr)
    return 0


def _warn_unmeasured(result, tp: int) -> None:
    """Lines on stderr (also with ``-q``) when the answer rests on a term
    not measured on the box (``fit.unmeasured``): windows withheld, or
    written UNVERIFIED with ``--allow-unmeasured``."""
    w = result.withheld
    if w is not None:
        n = sum(len(c.links) for c in w.candidate.chains)
        print(f"l2sched fit: UNMEASURED: no windows written at TP{tp}: the best candidate "
              f"({n} windows, objective {w.objective:+.1f} us) rests on terms not "
              "measured on this box (--allow-unmeasured writes it):", file=sys.stderr)
    elif result.unmeasured_blocking:
        print(f"l2sched fit: UNVERIFIED: the windows written at TP{tp} rest on terms not "
              "measured on this box:", file=sys.stderr)
    for why in result.unmeasured_blocking:
        print(f"l2sched fit:   {why}", file=sys.stderr)


def add_cli(sub) -> None:
    """Register ``l2sched fit``."""
    p = add_command(sub, "fit", cmd_fit,
                    help="search the prefetch schedule the lint predicts fastest on a "
                         "device profile (docs/fit.md)")
    p.add_argument("--device", required=True, metavar="PROFILE",
                   help="device profile name or .toml path")
    p.add_argument("--tp", type=int, default=4, help="tensor-parallel degree (default 4)")
    p.add_argument("--tokens", default="1,4,16,64", metavar="M,...",
                   help="decode tokens per step to fit for (default 1,4,16,64)")
    p.add_argument("--weights", metavar="W,...",
                   help="weight of each --tokens value in the objective (default 1 each)")
    p.add_argument("--kernel", choices=FILL_MODES,
                   help="fill kernel of every window (default: search the profile's)")
    p.add_argument("--noise-floor-us", metavar="US[,...]",
                   help="noise floor per --tokens value, or one for all (default: the "
                        "A/A floors of benchmarks/results/h200-2026-12-01-validation-2.md)")
    p.add_argument("--set-aside", choices=("0", "max", "search"), default="0",
                   help="persisting-L2 set-aside of the fitted schedule: 0 (default: "
                        "the model charges one only its measured expert-stream slowdown, "
                        "and one in force measured slower, docs/fit.md#caveats), max, or search (fit chooses)")
    p.add_argument("--model-config", metavar="PATH",
                   help=model_config_help() + "; the fitted schedule names it in "
                        "a model_config line")
    p.add_argument("--quick", action="store_true",
                   help="a smaller search (about a third of the default's time)")
    p.add_argument("--allow-unmeasured", action="store_true",
                   help="write the windows even when their gain rests on a term not "
                        "measured on this box (at TP > 1 a fill-vs-all-reduce slowdown; a "
                        "--quick profile); the header says UNVERIFIED")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                   help="worker processes (the output does not depend on it; default: "
                        "up to 2)")
    p.add_argument("-o", "--output", metavar="FILE.l2s",
                   help="write the fitted schedule here (default: stdout)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress or summary on stderr")
