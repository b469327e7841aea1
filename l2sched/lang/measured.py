"""Measured results a schedule carries in its header: ``# measured:`` lines.

A schedule that was benchmarked says so in a comment the tools can read::

    # measured: benchmarks/results/h200x2-2026-11-29.md gain M=1:-2.55% M=64:-0.28% -- 2 x H200

``SOURCE`` (the result file, one word) comes first, then the quantity
``gain``: the step-time gain of the schedule over no prefetch in percent of
the no-prefetch step time (positive = faster), as ``python -m lab bench report``
and ``bench tp-report`` write it, then one ``M=TOKENS:GAIN%`` per decode
batch size measured, then optionally `` -- `` and a free note (machine,
how). Only full-line comments of the schedule file itself count (a base's
results describe the base). ``l2sched lint`` prints the result at its
``--tokens`` beside the prediction; ``check`` reports malformed lines.

No result line is dropped silently: besides a ``# measured:`` line that does
not parse, ``check`` (and so ``lint`` and ``compile``) reports, at its
position, a mistyped one (a comment whose first word is ``measured`` spelt
otherwise, ``Measured`` or ``mesured``, or without its colon, and which
carries a result, an ``M=TOKENS:`` value; a prose comment such as
``# Measured there: 85 steps/s`` is left alone), one at the
end of a line of code (only full-line comments are read), and an impossible
gain (``GAIN_RANGE``).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from l2sched.errors import DiagnosticSink, Span, source_lines
from l2sched.lang.schedule import MAX_TOKENS_LIMIT

#: A full-line comment starting ``# measured:`` (spaces allowed around ``#``).
_LINE = re.compile(r"[ \t]*#[ \t]*measured:")
#: One value: ``M=16:-0.73%``.
_VALUE = re.compile(r"M=([0-9]+):([+-]?[0-9]+(?:\.[0-9]+)?)%")
#: The quantities a line may carry (only the step-time gain so far).
QUANTITIES = ("gain",)
#: The gains (percent) a step can have, ``(low, high)``: ``low <= GAIN <
#: high``. The gain is ``100 * (T0 - T) / T0``, ``T0`` the no-prefetch step
#: time and ``T`` the schedule's, so the schedule's step is ``T0 * (1 -
#: GAIN/100)``. At ``+100%`` or more that step would be zero or negative:
#: impossible. Below ``-100%`` it would be more than twice the no-prefetch
#: step, more than prefetch can add: its fills re-read weight bytes that
#: the step reads itself, each at most once per step (the compiler gives
#: every byte to one window issue), so even with no L2 hit and no overlap
#: at all they add at most the step's own weight-read time, which is at
#: most the step. Values outside are a slip of unit or sign (a fraction
#: written as percent; a steps/s or step-time change copied for the gain).
GAIN_RANGE = (-100.0, 100.0)
#: A full-line comment's first word and what follows it (``_mistyped``).
_FIRST_WORD = re.compile(r"[ \t]*#[ \t]*([A-Za-z]+)([ \t]*:)?")
#: What makes a comment a result: an ``M=TOKENS:`` value.
_RESULT_SHAPE = re.compile(r"(?<![A-Za-z0-9_])M=[0-9]+:", re.IGNORECASE)


@dataclass(frozen=True)
class MeasuredResult:
    """One ``# measured:`` line: ``source`` (the result file as written),
    ``gains`` ``((tokens, gain %), ...)`` in the line's order, ``note`` (free
    text, may be empty) and ``span`` (the line's ``measured:`` keyword)."""

    source: str
    gains: tuple[tuple[int, float], ...]
    note: str
    span: Span

    def gain_at(self, tokens: int) -> float | None:
        """The measured gain (percent, positive = faster) at ``tokens``
        decode tokens per step, or None when that M was not measured."""
        return dict(self.gains).get(tokens)


def comment_start(line: str) -> int | None:
    """The index of the ``#`` that starts ``line``'s comment (a ``#``
    outside a string; strings hold no ``"`` and end on their line), or
    None. The comments the tools read (``# measured:`` lines, the lint's
    ``# l2s: ignore``) are found with it."""
    quoted = False
    for i, ch in enumerate(line):
        if ch == '"':
            quoted = not quoted
        elif ch == "#" and not quoted:
            return i
    return None


def _mistyped(line: str, lineno: int, path: str, sink: DiagnosticSink) -> None:
    """Report ``line`` (not a ``# measured:`` line) when its comment is a
    result line mistyped or misplaced (see the module docstring): an error
    at the comment after code, or at the mistyped first word."""
    at = comment_start(line)
    if at is None:
        return
    comment = line[at:]
    first = _FIRST_WORD.match(comment)
    if _LINE.match(comment) is None and (first is None
                                         or not _is_result(first, comment)):
        return
    if line[:at].strip():
        sink.error("a '# measured:' line must be a comment line of its own; at the "
                   "end of a line of code it is not read", Span(
                       path, lineno, at + 1, lineno, at + 1 + len(comment.rstrip())))
        return
    sink.error(f"'{comment[:first.end()].strip()}' is not read as a measured result; "
               "write '# measured:' (lowercase, the colon right after the word): "
               "'# measured: SOURCE gain M=TOKENS:GAIN%'",
               Span(path, lineno, at + first.start(1) + 1, lineno,
                    at + first.end() + 1))


def _is_result(m: re.Match, line: str) -> bool:
    """True when first-word match ``m`` of ``line`` is ``measured`` (any
    case, a letter or two off: difflib ratio >= 0.8, so ``mesured`` and
    ``measure`` but not ``measuring``) and the rest of the line carries a
    result."""
    return (bool(difflib.get_close_matches(m.group(1).lower(), ["measured"], 1, 0.8))
            and _RESULT_SHAPE.search(line, m.end()) is not None)


def measured_results(text: str, path: str, sink: DiagnosticSink
                     ) -> tuple[MeasuredResult, ...]:
    """The ``# measured:`` lines of schedule ``text`` (file ``path``; a
    leading byte-order mark ignored), in file order. A malformed line is an
    error in ``sink`` at the offending word (no result file; no ``gain``; no
    value; a value not ``M=TOKENS:+X%``; an M given twice, below 1 or above
    ``MAX_TOKENS_LIMIT``; a gain outside
    ``GAIN_RANGE``) and is left out; so is a mistyped or misplaced result
    line (``_mistyped``: an error at its first word)."""
    out = []
    for lineno, line in enumerate(source_lines(text.removeprefix("\ufeff")), 1):
        m = _LINE.match(line)
        if m is None:
            _mistyped(line, lineno, path, sink)
            continue
        body = line[m.end():]
        note = ""
        if " -- " in body:
            body, note = body.split(" -- ", 1)
        words = [(w.group(), m.end() + w.start() + 1) for w in re.finditer(r"\S+", body)]

        def error(msg: str, col: int, width: int = 1, lineno: int = lineno) -> None:
            sink.error(msg, Span(path, lineno, col, lineno, col + width))

        keyword = Span(path, lineno, m.end() - len("measured:") + 1, lineno, m.end() + 1)
        if not words:
            error("'# measured:' needs the result file first, e.g. '# measured: "
                  "benchmarks/results/x.md gain M=1:-2.55%'", m.end() + 1)
            continue
        (source, _), rest = words[0], words[1:]
        if not rest or rest[0][0] not in QUANTITIES:
            word, col = rest[0] if rest else ("", m.end() + len(body) + 1)
            error(f"'# measured: {source}' takes 'gain' after the result file (the "
                  f"step-time gain over no prefetch, percent)", col, max(1, len(word)))
            continue
        if len(rest) == 1:
            error(f"'# measured: {source} gain' has no value; write "
                  f"M=TOKENS:GAIN% (e.g. M=1:-2.55%)", m.end() + len(body) + 1)
            continue
        gains: dict[int, float] = {}
        ok = True
        for word, col in rest[1:]:
            v = _VALUE.fullmatch(word)
            if v is None:
                error(f"bad measured value '{word}'; write M=TOKENS:GAIN% (e.g. "
                      f"M=1:-2.55%, the gain in percent, positive = faster)", col,
                      len(word))
                ok = False
                continue
            tokens = int(v.group(1))
            if tokens in gains or not 1 <= tokens <= MAX_TOKENS_LIMIT:
                error(f"M={tokens} is given twice" if tokens in gains else
                      "M must be at least 1" if tokens < 1 else
                      f"M={tokens} is above {MAX_TOKENS_LIMIT:,} tokens per step, the "
                      "most a decode step counts (int32; max_tokens has the same bound)",
                      col, len(word))
                ok = False
                continue
            gain = float(v.group(2))
            low, high = GAIN_RANGE
            if not low <= gain < high:
                why = ("+100% or more would be a step of no time" if gain >= high else
                       "below -100% a step over twice the no-prefetch one, more than "
                       "its fills can add")
                error(f"impossible gain {v.group(2)}% at M={tokens}: the gain is the "
                      "percent of the no-prefetch step time saved (positive = "
                      f"faster); {why}; it lies in {low:+g}% .. under {high:+g}%",
                      col, len(word))
                ok = False
                continue
            gains[tokens] = gain
        if ok:
            out.append(MeasuredResult(source, tuple(gains.items()), note.strip(),
                                      keyword))
    return tuple(out)
