"""``l2sched fmt FILE... [--check]``: rewrite schedules to the canonical
layout (``lang.formatter``), or list the files that would change."""

from __future__ import annotations

import sys

from l2sched.cli.options import add_command
from l2sched.errors import L2sError
from l2sched.files import write_text_atomically
from l2sched.lang.formatter import format_text
from l2sched.lang.syntax import read_source


def cmd_fmt(args) -> int:
    """Rewrite each file to the canonical layout, or with ``--check`` list
    the files that would change (exit 1 if any). A file with a syntax or
    input error is never rewritten (semantic errors are ``check``'s
    business, as with gofmt)."""
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
            print(str(err), file=sys.stderr)
            status = 1
    return status


def add_cli(sub) -> None:
    """Register ``l2sched fmt``."""
    p = add_command(sub, "fmt", cmd_fmt,
                    help="rewrite schedules to the canonical layout")
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="the .l2s schedules to rewrite in place (--check: only report)")
    p.add_argument("--check", action="store_true",
                   help="do not write; exit 1 if a file would change")
