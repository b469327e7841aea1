"""Progress of a long command on stderr.

The pipeline stages say what they are doing with ``stage("compiling 20,000
windows")`` (a string stored in a module global: free when nobody watches).
The CLI runs each command inside ``reporting("l2sched lint")``: when stderr is
a terminal (or ``L2SCHED_PROGRESS=1``), a background thread shows the current
stage once the command has run ``AFTER_S`` seconds (2 s), and again whenever
the stage changes or ``EVERY_S`` seconds pass: with ``rich`` (a status line
with a spinner) when it is installed and stderr is a terminal, else plain
lines ``l2sched lint: compiling 20,000 windows (3.1 s)``. Fast commands print
nothing. ``L2SCHED_PROGRESS=0`` turns it off (any yes/no word of
``l2sched.env``; another value is a usage error, exit 2). Commands with
progress of their own (``fit``'s phases, ``bench``'s runs) ask ``enabled``
too. Imports only ``l2sched.env``.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import TextIO

from l2sched.env import env_flag

#: Seconds a command runs before its progress is shown.
AFTER_S = 2.0
#: Seconds between two plain lines for the same stage.
EVERY_S = 5.0

_stage = ""


def stage(text: str) -> None:
    """Record what the pipeline is doing now (``text``, e.g. ``parsing
    x.l2s``); shown on stderr by ``reporting`` when the command is slow."""
    global _stage
    _stage = text


def current() -> str:
    """The stage last recorded with ``stage``."""
    return _stage


def enabled(stream: TextIO) -> bool:
    """Whether progress is shown on ``stream``: ``L2SCHED_PROGRESS``
    decides when set (``1``/``true``/``yes``/``on`` or ``0``/``false``/
    ``no``/``off``, ``env.env_flag``); unset, only a terminal gets it (so
    captured or piped stderr, CI logs and tests stay as they are). Raises
    ``L2sUsageError`` naming the variable for any other value."""
    tty = bool(getattr(stream, "isatty", lambda: False)())
    return env_flag("L2SCHED_PROGRESS", default=tty)


class Ticker:
    """What to print when: ``line(now)`` returns the plain progress line
    due at time ``now`` (seconds, ``time.monotonic``), or None. Due: the
    command has run ``after`` seconds, and the stage changed since the last
    line or ``every`` seconds passed."""

    def __init__(self, command: str, start: float, after: float = AFTER_S,
                 every: float = EVERY_S):
        self.command, self.start, self.after, self.every = command, start, after, every
        self.shown: tuple[str, float] | None = None

    def line(self, now: float, what: str) -> str | None:
        """The line to print at ``now`` for stage ``what``, or None."""
        elapsed = now - self.start
        if elapsed < self.after or not what:
            return None
        if self.shown and self.shown[0] == what and now - self.shown[1] < self.every:
            return None
        self.shown = (what, now)
        return f"{self.command}: {what} ({elapsed:.1f} s)"


@contextlib.contextmanager
def reporting(command: str, stream: TextIO | None = None) -> Iterator[None]:
    """Run the body with progress shown on ``stream`` (default stderr) as
    the module docstring says; the stage is reset when the body ends."""
    stream = stream if stream is not None else sys.stderr
    stage("")
    if not enabled(stream):
        yield
        return
    done = threading.Event()
    start = time.monotonic()
    thread = threading.Thread(target=_watch, args=(command, stream, start, done),
                              daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=1.0)
        stage("")


def _watch(command: str, stream: TextIO, start: float, done: threading.Event) -> None:
    """The reporting thread: a rich status line on a terminal when rich is
    installed, else plain ``Ticker`` lines."""
    if done.wait(AFTER_S):
        return
    status = _rich_status(stream, command)
    ticker = Ticker(command, start)
    try:
        while not done.is_set():
            what = current()
            if status is not None:
                if what:
                    status.update(f"{command}: {what} "
                                  f"({time.monotonic() - start:.0f} s)")
            else:
                text = ticker.line(time.monotonic(), what)
                if text:
                    print(text, file=stream, flush=True)
            done.wait(0.5)
    finally:
        if status is not None:
            status.stop()


def _rich_status(stream: TextIO, command: str):
    """A started ``rich`` status (spinner and text) on ``stream`` when rich
    is installed and ``stream`` is a terminal, else None."""
    if not getattr(stream, "isatty", lambda: False)():
        return None
    try:
        from rich.console import Console
    except ImportError:
        return None
    status = Console(file=stream).status(f"{command}: {current() or 'working'}")
    status.start()
    return status
