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
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from l2sched.errors import DiagnosticSink, Span, source_lines

#: A full-line comment starting ``# measured:`` (spaces allowed around ``#``).
_LINE = re.compile(r"[ \t]*#[ \t]*measured:")
#: One value: ``M=16:-0.73%``.
_VALUE = re.compile(r"M=([0-9]+):([+-]?[0-9]+(?:\.[0-9]+)?)%")
#: The quantities a line may carry (only the step-time gain so far).
QUANTITIES = ("gain",)


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


def measured_results(text: str, path: str, sink: DiagnosticSink
                     ) -> tuple[MeasuredResult, ...]:
    """The ``# measured:`` lines of schedule ``text`` (file ``path``; a
    leading byte-order mark ignored), in file order. A malformed line is an
    error in ``sink`` at the offending word (no result file; no ``gain``; no
    value; a value not ``M=TOKENS:+X%``; an M given twice) and is left out."""
    out = []
    for lineno, line in enumerate(source_lines(text.removeprefix("\ufeff")), 1):
        m = _LINE.match(line)
        if m is None:
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
            if tokens in gains or tokens < 1:
                error(f"M={tokens} is given twice" if tokens in gains else
                      "M must be at least 1", col, len(word))
                ok = False
                continue
            gains[tokens] = float(v.group(2))
        if ok:
            out.append(MeasuredResult(source, tuple(gains.items()), note.strip(),
                                      keyword))
    return tuple(out)
