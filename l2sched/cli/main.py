"""The ``l2sched`` command line: one module per subcommand in this package,
registered here in pipeline order.

Exit codes: 0 clean, 1 errors in the input (``L2sError``), 2 usage errors
(argparse's own, and ``L2sUsageError`` from a handler, printed the same way:
``l2sched COMMAND: error: MESSAGE``). Diagnostics go to stderr as
``path:line:col: message`` with a caret line.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import sys
from typing import Sequence

import l2sched
from l2sched import progress
from l2sched.cli import bench, check, docs, explain, fmt, inventory, lint, profile
from l2sched.cli import compile as compile_command
from l2sched.errors import L2sError, L2sUsageError

#: The subcommand modules, each with ``add_cli(subparsers)``, in the order
#: ``l2sched --help`` lists them.
COMMANDS = (check, fmt, inventory, compile_command, explain, lint, profile, bench, docs)


def build_parser() -> argparse.ArgumentParser:
    """The argparse tree of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="l2sched",
        description="Write, check and ship L2-cache weight-prefetch schedules "
                    "for LLM decode.")
    parser.add_argument("--version", action="version",
                        version=f"l2sched {l2sched.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.add_cli(sub)
    return parser


@contextlib.contextmanager
def _no_cyclic_gc():
    """Pause Python's cyclic garbage collector while a command runs (restored
    after; memory is freed by reference counting as usual). Its full
    collections walk every live object, and a 20,000-window schedule makes
    many: with it on, check/compile/lint grew faster than the schedule
    (benchmarks/scaling.py: 1.6-2x the time per window at 20,000 windows,
    same peak memory). mypy raises its thresholds for the same reason."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``l2sched`` console script and ``python -m
    l2sched``; returns the exit code."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        # argparse would blame the top-level parser and print its usage;
        # the options belong to the subcommand, whose usage says what it takes
        getattr(args, "parser", parser).error(
            f"unrecognized arguments: {' '.join(extra)}")
    try:
        # the GPU benchmarks run long and allocate through torch: leave the
        # collector on there
        gc_pause = _no_cyclic_gc() if not args.prog.startswith("l2sched bench") \
            else contextlib.nullcontext()
        with progress.reporting(args.prog), gc_pause:
            return int(args.handler(args) or 0)
    except L2sUsageError as err:
        print(f"{args.prog}: error: {err}", file=sys.stderr)
        return 2
    except L2sError as err:
        print(str(err), file=sys.stderr)
        return 1
    except BrokenPipeError:  # e.g. piped into head
        return 0
