"""Overrides: ``set KEY = VALUE`` lines of a schedule and the CLI's
``--set KEY=VALUE`` arguments, which take the same code path.

A value is parsed with the grammar entry point its key takes (a size, a
layer selector or a scalar), so an override can never mean something the
file could not have said. ``--set`` arguments get spans of their own
(``--set #N``, line 1, columns into the argument).
"""

from __future__ import annotations

import dataclasses
from typing import Iterator

from l2sched.errors import DiagnosticSink, L2sSyntaxError, L2sUsageError, Span, suggest
from l2sched.lang import nodes as n
from l2sched.lang.schedule import SETTING_KEYS, WINDOW_KEYS
from l2sched.lang.syntax import parse_fragment

#: ``set window.NAME.KEY`` key -> the field of the merged window it sets.
_FIELD = {"at": "hook", "budget": "budget", "layers": "layers", "carry": "carry",
          "kernel": "kernel"}


def parse_override_arg(arg: str, index: int = 1) -> n.Override:
    """A CLI ``--set KEY=VALUE`` argument as an ``Override`` whose spans point
    into the argument (path ``--set #index``, line 1). Raises
    ``L2sSemanticError`` when there is no ``=`` or the value holds a ``#``
    (a file would read a comment there), ``L2sUsageError`` for a newline or
    other control character (it would split the value)."""
    path = f"--set #{index}"
    problem = check_override_arg(arg)
    if problem is not None:
        raise L2sUsageError(f"{path}: {problem}")
    key, eq, value = arg.partition("=")
    if not eq or not key.strip():
        sink = DiagnosticSink()
        sink.add_source(path, arg)
        sink.error("--set takes KEY=VALUE, e.g. --set window.B.budget=25MB",
                   Span(path, 1, 1, 1, len(arg) + 1))
        sink.raise_if_errors()
    kcol = len(key) - len(key.lstrip()) + 1
    vcol = len(key) + 2 + len(value) - len(value.lstrip())
    if "#" in value:
        # in a file '#' would start a comment; nothing a --set value names
        # (a size, a selector, a name) contains one
        at = len(key) + 2 + value.index("#")
        sink = DiagnosticSink()
        sink.add_source(path, arg)
        sink.error("a --set value has no comments: '#' cannot appear in it "
                   "(in a schedule file it would start a comment)",
                   Span(path, 1, at, 1, len(arg) + 1))
        sink.raise_if_errors()
    key, value = key.strip(), value.strip()
    return n.Override(
        n.Name(key, span=Span(path, 1, kcol, 1, kcol + len(key))), value,
        value_span=Span(path, 1, vcol, 1, vcol + max(len(value), 1)),
        span=Span(path, 1, 1, 1, len(arg) + 1))


def _is_control(ch: str) -> bool:
    """A control character (C0, DEL, C1) other than a tab."""
    return ch != "\t" and (ord(ch) < 0x20 or 0x7f <= ord(ch) < 0xa0)


def override_control_message(ch: str) -> str:
    """The error text for a control character ``ch`` in a ``--set`` value."""
    what = {"\n": "a newline", "\r": "a carriage return"}.get(ch, "a control character")
    return (f"the value contains {what} (U+{ord(ch):04X}); give one KEY=VALUE "
            f"per --set")


def check_override_arg(arg: str) -> str | None:
    """The usage-error text for a ``--set`` argument that cannot be one
    line of a schedule (a newline or other control character), else None."""
    bad = next((c for c in arg if _is_control(c)), None)
    return None if bad is None else override_control_message(bad)


def override_keys(windows) -> list[str]:
    """Every key a ``set`` line may name, given the merged ``windows``."""
    return list(iter_override_keys(windows))


def iter_override_keys(windows) -> Iterator[str]:
    """``override_keys`` one at a time (a did-you-mean that gives up on
    many names reads only a few: ``errors.closest``)."""
    yield from SETTING_KEYS
    for name in windows:
        for k in WINDOW_KEYS:
            yield f"window.{name}.{k}"


def apply_override(ov: n.Override, settings: dict, windows: dict,
                   sink: DiagnosticSink, base_failed: bool = False) -> None:
    """Apply one ``set`` line or ``--set`` argument ``ov`` to the merged
    ``settings`` (key -> value node) and ``windows`` (name -> field dict),
    parsing its value with the grammar entry point the key takes. Problems
    are recorded in ``sink``. ``base_failed``: a base file of the chain could
    not be loaded, so an unknown window name is not reported (it may live
    there)."""
    key = ov.key.text
    vs = ov.value_span

    def fragment(start: str):
        try:
            return parse_fragment(ov.value, start, vs.path, vs.line, vs.column)
        except L2sSyntaxError as e:
            for d in e.diagnostics:  # show the file's line, not the value's
                sink.add(dataclasses.replace(d, source_line=None))
            return None

    if key in SETTING_KEYS:
        value = fragment("scalar_value")
        if value is not None:
            settings[key] = value
        return
    parts = key.split(".")
    if len(parts) == 3 and parts[0] == "window" and parts[2] in WINDOW_KEYS:
        _, wname, wkey = parts
        if wname not in windows:
            if base_failed:  # the window may live in the missing base
                return
            sink.error(f"unknown window '{wname}'{suggest(wname, windows)}",
                       ov.key.span)
            return
        win = windows[wname]
        if wkey == "budget":
            value = fragment("size_value")
        elif wkey == "layers":
            value = fragment("selector_value")
        else:
            value = fragment("scalar_value")
            if value is not None and not isinstance(value, n.Name):
                sink.error(f"window.{wname}.{wkey} takes a name, got '{value.text}'",
                           value.span)
                return
            if wkey in ("carry", "kernel") and value is not None and value.text == "none":
                win[wkey] = None  # no carry / the schedule's fill kernel
                return
        if value is not None:
            win[_FIELD[wkey]] = value
        return
    sink.error(f"unknown setting '{key}'{suggest(key, iter_override_keys(windows))}",
               ov.key.span)
