"""The ``l2sched`` command line.

Subcommands: ``check`` (parse + resolve), ``fmt`` (canonical layout),
``inventory`` (model tensors), and the later pipeline stages as they land.
Exit codes: 0 clean, 1 errors in the input, 2 usage errors (argparse).
Diagnostics go to stderr as ``path:line:col: message`` with a caret line.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections import Counter
from typing import Sequence

from .errors import L2sError, L2sUsageError

#: Pipeline modules that register their own subcommands through
#: ``add_cli(subparsers)`` (imported only when present).
_STAGE_COMMANDS = ("l2sched.inventory", "l2sched.lint", "l2sched.compile",
                   "l2sched.bench",
                   "l2sched.explain")


def _print_error(err: L2sError) -> None:
    print(str(err), file=sys.stderr)


def _load_model_config(path: str | None):
    if path is None:
        return None
    from .inventory import load_model_config  # no torch: pure-Python loader

    return load_model_config(path)


class _SetAction(argparse.Action):
    """``--set KEY=VALUE`` (repeatable): a value that is not one line (a
    newline or other control character) is a usage error, exit 2."""

    def __call__(self, parser, namespace, values, option_string=None):
        from .semantic import check_override_arg

        items = list(getattr(namespace, self.dest) or [])
        problem = check_override_arg(values)
        if problem is not None:
            parser.exit(2, f"{parser.prog}: error: --set #{len(items) + 1}: "
                           f"{problem}\n")
        setattr(namespace, self.dest, items + [values])


def add_schedule_args(p: argparse.ArgumentParser) -> None:
    """The options every schedule-reading subcommand takes: ``--set``
    overrides and ``--model-config``."""
    p.add_argument("--set", dest="overrides", action=_SetAction, default=[],
                   metavar="KEY=VALUE",
                   help="override a value, e.g. --set window.B.budget=25MB "
                        "(repeatable; applied after the file's own set lines)")
    p.add_argument("--model-config", metavar="PATH",
                   help="HF config.json or model directory (default: the "
                        "embedded GLM-5.3-Flash config)")


def _window_table(schedule) -> list[str]:
    from .compile import format_table
    from .semantic import format_size

    rows = [("window", "hook point", "budget", "layers", "carry")]
    for w in schedule.windows:
        kinds = Counter(str(schedule.layer_kinds[i]) for i in w.layers)
        layer_text = ", ".join(f"{c} {k}" for k, c in sorted(kinds.items()))
        rows.append((w.name, w.hook, format_size(w.budget), layer_text,
                     w.carry or "-"))
    return ["  " + line for line in format_table(rows).splitlines()]


def _check_layout(schedule, model_config) -> None:
    """Check that the model splits at the schedule's TP/EP degree (what
    ``compile`` will need), reporting at the ``tp`` setting. Pure Python.
    Raises ``L2sSemanticError``."""
    from .compile import schedule_inventory

    schedule_inventory(schedule, model_config)


def cmd_check(args) -> int:
    """``l2sched check FILE...``: parse, resolve extends, apply --set and
    report every error found; print a window table for clean files."""
    from .semantic import load_schedule

    try:
        model_config = _load_model_config(args.model_config)
    except L2sError as err:
        _print_error(err)
        return 1
    failed = 0
    for path in args.files:
        try:
            s = load_schedule(path, args.overrides, model_config)
            _check_layout(s, model_config)
        except L2sError as err:
            _print_error(err)
            failed += 1
            continue
        if not args.quiet:
            print(f"{path}: ok: schedule '{s.name}' for {s.model} on {s.device}, "
                  f"TP{s.tp}, EP {'on' if s.ep else 'off'}, policy {s.policy}, "
                  f"prefetch at <= {s.max_tokens} tokens, "
                  f"{len(s.windows)} windows")
            for line in _window_table(s):
                print(line)
    if failed:
        print(f"{failed} of {len(args.files)} file(s) have errors", file=sys.stderr)
    return 1 if failed else 0


def cmd_fmt(args) -> int:
    """``l2sched fmt FILE... [--check]``: rewrite to the canonical layout, or
    with ``--check`` list the files that would change (exit 1 if any). A file
    with a syntax or input error is never rewritten (semantic errors are
    ``check``'s business, as with gofmt)."""
    from .files import write_text_atomically
    from .formatter import format_text
    from .syntax import read_source

    status = 0
    for path in args.files:
        try:
            text = read_source(path)
            new = format_text(text, path)
            if new == text:
                continue
            if args.check:
                print(f"{path}: would reformat")
                status = 1
                continue
            write_text_atomically(path, new)
            print(f"{path}: reformatted")
        except L2sError as err:
            _print_error(err)
            status = 1
    return status


def build_parser() -> argparse.ArgumentParser:
    """The argparse tree of every subcommand."""
    parser = argparse.ArgumentParser(
        prog="l2sched",
        description="Write, check and ship L2-cache weight-prefetch schedules "
                    "for LLM decode.")
    parser.add_argument("--version", action="version",
                        version=f"l2sched {__import__('l2sched').__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("check", help="parse and resolve schedules, report errors")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="print nothing for clean files")
    add_schedule_args(p)
    p.set_defaults(handler=cmd_check)

    p = sub.add_parser("fmt", help="rewrite schedules to the canonical layout")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--check", action="store_true",
                   help="do not write; exit 1 if a file would change")
    p.set_defaults(handler=cmd_fmt)

    for module in _STAGE_COMMANDS:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name != module:
                raise
            continue
        if hasattr(mod, "add_cli"):
            mod.add_cli(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``l2sched`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except L2sUsageError as err:
        _print_error(err)
        return 2
    except L2sError as err:
        _print_error(err)
        return 1
    except BrokenPipeError:  # e.g. piped into head
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
