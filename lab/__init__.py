"""The lab: research instruments over l2sched, outside the installed package.

It imports ``l2sched`` and is never imported by it (``lint-imports``: the
contracts in ``pyproject.toml``). Runs from a checkout: ``python -m lab
bench --help`` for the decode-step research commands (``lab/bench/``), and
``python lab/experiments/NAME.py`` for the one-off experiments; README.md
says what each asked and found.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence


def build_parser() -> argparse.ArgumentParser:
    """The lab's argparse tree (``bench`` and its subcommands)."""
    from lab import cli
    parser = argparse.ArgumentParser(prog="python -m lab",
                                     description="l2sched's research instruments")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    cli.add_cli(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m lab``; returns the exit code."""
    from l2sched.cli.main import dispatch
    argv = list(sys.argv[1:] if argv is None else argv)
    return dispatch(build_parser(), argv)
