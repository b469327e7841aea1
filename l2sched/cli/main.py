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
import errno
import gc
import importlib
import os
import signal
import sys
import threading
from typing import Sequence

import l2sched
from l2sched import progress
from l2sched.cli.bench import moved_to_lab
from l2sched.errors import L2sError, L2sUsageError, reset_spell_checks
from l2sched.files import command_inputs

#: Subcommand -> the module of this package that registers it
#: (``add_cli(subparsers)``), in the order ``l2sched --help`` lists them.
COMMANDS = {"check": "check", "fmt": "fmt", "inventory": "inventory",
            "compile": "compile", "explain": "explain", "lint": "lint",
            "timeline": "lint", "fit": "fit", "profile": "profile", "bench": "bench",
            "verify": "verify", "docs": "docs"}


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The argparse tree: only the module of the subcommand ``argv`` starts
    with when it names one (``l2sched lint`` then imports none of the
    others: start-up time is most of a lint's), else every subcommand (for
    ``--help``, ``--version`` and a misspelt command's error)."""
    parser = argparse.ArgumentParser(
        prog="l2sched",
        description="Write, check and ship L2-cache weight-prefetch schedules "
                    "for LLM decode.")
    parser.add_argument("--version", action="version",
                        version=f"l2sched {l2sched.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    first = argv[0] if argv else None
    modules = [COMMANDS[first]] if first in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    for name in modules:
        importlib.import_module(f"l2sched.cli.{name}").add_cli(sub)
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
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:
        moved = moved_to_lab(argv[1:])
        if moved:
            print(f"l2sched bench: error: {moved}", file=sys.stderr)
            return 2
    return dispatch(build_parser(argv), argv)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread like Ctrl-C's KeyboardInterrupt,
    so that the same clean-up runs: worker pools shut down (``fit``'s
    forkserver workers were left running without a parent), temporary
    files removed, no output half-written."""


@contextlib.contextmanager
def _sigterm_as_interrupt():
    """While the command runs in the main thread, SIGTERM raises
    ``Terminated``; the previous handler comes back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class StdoutError(OSError):
    """Writing to standard output failed (a full disk behind ``> file``, a
    closed descriptor): the command's report is lost, so the exit code is 1,
    with one line on stderr instead of a traceback."""


class _GuardedStdout:
    """``sys.stdout`` while a command runs: writes and flushes that fail
    raise ``StdoutError`` (a broken pipe stays ``BrokenPipeError``: a reader
    such as ``head`` may stop early); ``None`` (started with stdout closed)
    fails at the first write. Everything else is the wrapped stream's."""

    def __init__(self, stream):
        self._stream = stream

    def __getattr__(self, name):
        return getattr(self._stream, name)

    def _guarded(self, call, *a):
        if self._stream is None:
            raise StdoutError(errno.EBADF, "standard output is closed")
        try:
            return call(*a)
        except BrokenPipeError:
            raise
        except OSError as e:
            raise StdoutError(e.errno, e.strerror) from None

    def write(self, text):
        return self._guarded(lambda t: self._stream.write(t), text)

    def flush(self):
        return self._guarded(lambda: self._stream.flush())


@contextlib.contextmanager
def _guarded_stdout():
    """``sys.stdout`` guarded (``_GuardedStdout``) while the command runs."""
    before = sys.stdout
    sys.stdout = _GuardedStdout(before)
    try:
        yield
    finally:
        if sys.stdout.__class__ is _GuardedStdout:
            sys.stdout = before


def dispatch(parser: argparse.ArgumentParser, argv: Sequence[str]) -> int:
    """Parse ``argv`` with ``parser`` (subcommands registered with
    ``cli.options.add_command``), run the chosen handler and return its exit
    code: 2 for usage errors (an output that is one of the command's input
    files among them, ``files.command_inputs``), 1 for ``L2sError`` and for
    a standard output that cannot be written (``StdoutError``), 130 on
    Ctrl-C, 143 on SIGTERM (``Terminated``; the lab's command line runs
    through it too)."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        # argparse would blame the top-level parser and print its usage;
        # the options belong to the subcommand, whose usage says what it takes
        getattr(args, "parser", parser).error(
            f"unrecognized arguments: {' '.join(extra)}")
    reset_spell_checks()
    try:
        # the GPU benchmarks and verify's engine run long and allocate
        # through torch: leave the collector on there
        gc_pause = _no_cyclic_gc() if not any(
            w in args.prog for w in (" bench", " verify")) else contextlib.nullcontext()
        args.argv = list(argv)
        # no output of the command may replace a file it reads (files.py)
        with _sigterm_as_interrupt(), progress.reporting(args.prog), gc_pause, \
                command_inputs(), _guarded_stdout():
            code = int(args.handler(args) or 0)
            sys.stdout.flush()  # a failing flush is this command's error, not the exit's
            return code
    except L2sUsageError as err:
        print(f"{args.prog}: error: {err}", file=sys.stderr)
        return 2
    except L2sError as err:
        print(str(err), file=sys.stderr)
        return 1
    except BrokenPipeError:  # e.g. piped into head
        return 0
    except StdoutError as err:
        print(f"{args.prog}: error: cannot write to standard output: {err.strerror}",
              file=sys.stderr)
        # what is left in the buffer would fail again at the interpreter's exit
        sys.stdout = open(os.devnull, "w", encoding="utf-8")
        return 1
    except Terminated:  # SIGTERM: the same clean-up as Ctrl-C
        print(f"{args.prog}: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:  # Ctrl-C: outputs are written atomically, none half-done
        print(f"{args.prog}: interrupted", file=sys.stderr)
        return 130
