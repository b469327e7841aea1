"""The ``l2sched`` command line: one module per subcommand in this package,
registered here in pipeline order.

Exit codes: 0 clean, 1 errors in the input (``L2sError``), 2 usage errors
(argparse's own, and ``L2sUsageError`` from a handler, printed the same way:
``l2sched COMMAND: error: MESSAGE``). Diagnostics go to stderr as
``path:line:col: message`` with a caret line.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

import l2sched
from l2sched.cli import bench, check, docs, explain, fit, fmt, inventory, lint, profile
from l2sched.cli import compile as compile_command
from l2sched.errors import L2sError, L2sUsageError

#: The subcommand modules, each with ``add_cli(subparsers)``, in the order
#: ``l2sched --help`` lists them.
COMMANDS = (check, fmt, inventory, compile_command, explain, lint, fit, profile, bench,
            docs)


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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``l2sched`` console script and ``python -m
    l2sched``; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except L2sUsageError as err:
        print(f"{args.prog}: error: {err}", file=sys.stderr)
        return 2
    except L2sError as err:
        print(str(err), file=sys.stderr)
        return 1
    except BrokenPipeError:  # e.g. piped into head
        return 0
