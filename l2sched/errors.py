"""One error family for every stage of l2sched, printed like a compiler.

``L2sError`` is the only exception the parser, checker, linter and compiler let
escape on bad input. Each carries zero or more ``Diagnostic`` records; each
record has a ``Span`` (file, 1-based line and column, end line and column) and
renders as::

    path:line:col: message
        source line
        ^^^^^

Stages append diagnostics to a ``DiagnosticSink`` so that one run reports every
error of a file, then raise once (see ``DiagnosticSink.raise_if_errors``).
"""

from __future__ import annotations

import bisect
import difflib
import itertools
import re
from dataclasses import dataclass, field
from typing import Iterable, Sequence, Sized


@dataclass(frozen=True, order=True)
class Span:
    """A source region: 1-based ``line``/``column``, end inclusive of ``end_line``
    and exclusive of ``end_column`` (Lark's convention). ``path`` is the file as
    the user named it, or ``<string>`` for text parsed from memory."""

    path: str
    line: int
    column: int
    end_line: int
    end_column: int

    @classmethod
    def point(cls, path: str, line: int = 1, column: int = 1) -> "Span":
        """A one-character span at ``line``:``column``."""
        return cls(path, line, column, line, column + 1)

    @classmethod
    def file(cls, path: str) -> "Span":
        """The whole file ``path``, no line: for a problem with the file
        itself (missing, not UTF-8, not JSON past repair), rendered
        ``path: message``. Machine-readable outputs still know which file
        it is (SARIF locates the result there)."""
        return cls(path, 0, 0, 0, 0)

    @property
    def whole_file(self) -> bool:
        """True for ``Span.file``: a file, no position in it."""
        return self.line == 0

    def __str__(self) -> str:
        if self.whole_file:
            return self.path
        return f"{self.path}:{self.line}:{self.column}"


@dataclass(frozen=True)
class Diagnostic:
    """One message about one span. ``severity`` is ``error``, ``warning`` or
    ``info``; ``code`` is a stable rule code (e.g. ``L2S101``) or empty;
    ``source_line`` is the text of ``span.line`` without its newline, when known."""

    message: str
    span: Span | None = None
    severity: str = "error"
    code: str = ""
    source_line: str | None = None
    notes: tuple[str, ...] = ()

    def render(self, echo: bool = True) -> str:
        """The compiler-style text: location, message, source line, caret,
        notes; without ``echo`` no source line and caret (``render_all``
        shows a source line once for the diagnostics under it)."""
        where = f"{self.span}: " if self.span else ""
        code = f"{self.code} " if self.code else ""
        sev = "" if self.severity == "error" and not self.code else f"{self.severity}: "
        lines = [f"{where}{sev}{code}{self.message}"]
        if echo and self.span is not None and self.source_line is not None \
                and not self.span.whole_file:
            # a tab becomes one blank (expandtabs(1)): the length is kept, so
            # a long line is cut before the tabs are replaced
            text = self.source_line
            start = max(self.span.column - 1, 0)
            if self.span.end_line == self.span.line:
                width = max(self.span.end_column - self.span.column, 1)
            else:
                width = max(len(text) - start, 1)
            width = min(width, max(len(text) - start, 1))
            text, start, width = _clip(text, start, width)
            text = text.expandtabs(1)
            lines.append("    " + text)
            lines.append("    " + " " * start + "^" * width)
        lines.extend(f"    note: {n}" for n in self.notes)
        return "\n".join(lines)


#: Longest source line echoed under a message; longer ones are cut around
#: the caret, with ``...`` where text was left out.
MAX_ECHO = 200


def _clip(text: str, start: int, width: int) -> tuple[str, int, int]:
    """``text`` cut to about ``MAX_ECHO`` characters around the caret at
    ``start`` (``width`` wide), with the caret's new start and width."""
    if len(text) <= MAX_ECHO:
        return text, start, width
    width = min(width, MAX_ECHO // 2)
    lo = max(0, min(start - MAX_ECHO // 4, len(text) - MAX_ECHO))
    hi = min(len(text), lo + MAX_ECHO)
    head = "..." if lo > 0 else ""
    tail = "..." if hi < len(text) else ""
    return head + text[lo:hi] + tail, start - lo + len(head), width


#: How many diagnostics of one kind (``diagnostic_kind``) human output
#: shows in full; the rest are counted in one line (as compilers cap an
#: error flood). Machine outputs (``lint --format json|sarif``) keep all.
MAX_PER_KIND = 20

#: Quoted names and numbers, left out of a message to get its kind.
_VARYING = re.compile(r"'[^']*'|\"[^\"]*\"|\d+(?:[.,]\d+)*")


def diagnostic_kind(d: Diagnostic) -> tuple[str, str]:
    """What makes diagnostics "alike" for ``render_all``: the severity and
    the rule code, or for a diagnostic without a code its message with
    quoted names, numbers and a did-you-mean left out (``unknown hook point
    '…'``)."""
    if d.code:
        return d.severity, d.code
    text = d.message.split("; did you mean", 1)[0]
    return d.severity, _VARYING.sub(
        lambda m: m[0][0] + "…" + m[0][0] if m[0][0] in "'\"" else "…", text)


def render_all(diagnostics: Iterable[Diagnostic], limit: int | None = MAX_PER_KIND,
               hint: str = "") -> str:
    """``diagnostics`` rendered for a person: the first ``limit`` of each
    ``diagnostic_kind`` in full (None: all), a line longer than
    ``MAX_ECHO`` (echoed as a cut) echoed once for the diagnostics that
    follow each other on it (the later ones give only their ``line:col``;
    a shorter line is echoed with each, its caret under it), then one line per capped kind: ``... and
    49,980 more like this (L2S001)`` (``hint`` appended, e.g. ``;
    --format json lists all``). Renders only what it shows: a flood of
    50,000 costs little more than its first 20."""
    out: list[str] = []
    counts: dict[tuple[str, str], int] = {}
    last_line = None
    for d in diagnostics:
        kind = diagnostic_kind(d)
        seen = counts[kind] = counts.get(kind, 0) + 1
        if limit is not None and seen > limit:
            continue
        here = (d.span.path, d.span.line) if d.span is not None and \
            d.source_line is not None and not d.span.whole_file and \
            len(d.source_line) > MAX_ECHO else None
        out.append(d.render(echo=here is None or here != last_line))
        last_line = here
    for (sev, what), n in counts.items():
        if limit is not None and n > limit:
            label = what if what.startswith("L2S") else f"{sev}: {what}"
            out.append(f"... and {n - limit:,} more like this ({label}){hint}")
    return "\n".join(out)


class L2sError(Exception):
    """Base of every error l2sched raises on bad input. ``diagnostics`` holds one
    or more ``Diagnostic``; ``str(err)`` is their rendering (``render_all``:
    a flood of one kind capped at ``MAX_PER_KIND``, made when first asked
    for)."""

    def __init__(self, diagnostics: Diagnostic | Sequence[Diagnostic] | str):
        if isinstance(diagnostics, str):
            diagnostics = [Diagnostic(diagnostics)]
        elif isinstance(diagnostics, Diagnostic):
            diagnostics = [diagnostics]
        self.diagnostics: tuple[Diagnostic, ...] = tuple(diagnostics)
        self._text: str | None = None
        super().__init__(self.diagnostics)

    def __str__(self) -> str:
        if self._text is None:
            self._text = render_all(self.diagnostics)
        return self._text

    def __reduce__(self):
        # subclasses take other arguments (TPSplitError, L2sPluginError):
        # rebuild from the state, not by calling __init__ again
        return _rebuild, (type(self), self.args, self.__dict__)


def _rebuild(cls: type, args: tuple, state: dict) -> "L2sError":
    """An unpickled ``L2sError`` of class ``cls`` (``L2sError.__reduce__``)."""
    err = cls.__new__(cls)
    err.args = args
    err.__dict__.update(state)
    return err

    @property
    def span(self) -> Span | None:
        """The span of the first diagnostic (convenience for tests and tools)."""
        return self.diagnostics[0].span if self.diagnostics else None


class L2sInputError(L2sError):
    """A file cannot be read: missing, a directory, not UTF-8, or empty."""


class L2sSyntaxError(L2sError):
    """The text does not follow the grammar in ``grammar/l2s.lark``."""


class L2sSemanticError(L2sError):
    """The text parses but means nothing valid: unknown names, bad values,
    duplicate windows, a carry to an earlier window, a bad ``--set`` override."""


class L2sModelError(L2sError):
    """A model config (``config.json``) or inventory is unusable: a missing key,
    a wrong type, an unknown architecture."""


class L2sUsageError(L2sError):
    """The command line itself is wrong (an option value out of range, a
    ``--set`` that is not one line): the CLI exits 2, not 1."""


class L2sLintError(L2sError):
    """A lint run found at least one error-severity rule violation."""


class L2sCompileError(L2sError):
    """A schedule cannot be compiled into a plan for the given inventory."""


class L2sInstallError(L2sError):
    """A plan cannot be installed into a module tree: a hook slot is already
    held, a hook point has no site, a site's path does not resolve."""


class L2sPluginError(L2sError):
    """A reason for the vLLM plugin to leave prefetch off on one TP rank,
    logged as one line: ``what`` is the short reason (``bad configuration``,
    ``unsupported hardware``, ``install failed``, ...), ``detail`` the
    specifics (may be empty); ``level``: the line's log level (40, ERROR;
    ``vllm.loss_gate.PredictedLoss``: WARNING, nothing failed)."""

    level = 40

    def __init__(self, what: str, detail: str = ""):
        super().__init__(f"{what}: {detail}" if detail else what)
        self.what = what
        self.detail = detail


#: What ends a line, everywhere l2sched maps text to lines: ``\r\n``, a
#: lone ``\r`` (old Mac files) or ``\n``. Nothing else does: form feeds,
#: ``\x1c``, ``\x85`` or ``\u2028`` inside a line (or a comment) are text,
#: although ``str.splitlines`` would break there.
_LINE_END = re.compile(r"\r\n|\r|\n")


def source_lines(text: str, keepends: bool = False) -> list[str]:
    """``text`` split into lines the way the parser counts them: only
    ``\\r\\n``, ``\\r`` and ``\\n`` end a line (see ``_LINE_END``). With
    ``keepends`` each line keeps its line ending, so ``"".join(result) ==
    text``. The one line splitter of l2sched: diagnostics, suppression
    comments and profile edits all use it, so line numbers agree."""
    if not keepends:
        return _LINE_END.split(text)
    out, start = [], 0
    for m in _LINE_END.finditer(text):
        out.append(text[start:m.end()])
        start = m.end()
    if start < len(text):
        out.append(text[start:])
    return out


def line_col(text: str, offset: int) -> tuple[int, int]:
    """The 1-based ``(line, column)`` of character ``offset`` of ``text``,
    lines ending as in ``source_lines`` (a ``\\r\\n`` counts once). Raises
    ``ValueError`` when ``offset`` is outside ``0..len(text)``."""
    if not 0 <= offset <= len(text):
        raise ValueError(f"offset {offset} outside 0..{len(text)}")
    line, start = 1, 0
    for m in _LINE_END.finditer(text, 0, offset):
        line += 1
        start = m.end()
    return line, offset - start + 1


class LineIndex:
    """``line_col`` for many offsets of one text: the line starts are found
    once and each lookup is a bisection, so locating N places in a text of
    N lines costs N log N, not N^2 (a plan's JSON spans)."""

    def __init__(self, text: str):
        self.text = text
        self.starts = [0] + [m.end() for m in _LINE_END.finditer(text)]

    def line_col(self, offset: int) -> tuple[int, int]:
        """``line_col(text, offset)``. Raises ``ValueError`` when ``offset``
        is outside ``0..len(text)``."""
        text = self.text
        if not 0 <= offset <= len(text):
            raise ValueError(f"offset {offset} outside 0..{len(text)}")
        i = bisect.bisect_right(self.starts, offset) - 1
        if 0 < offset < len(text) and text[offset - 1] == "\r" and text[offset] == "\n":
            return i + 2, 1  # between the halves of a \r\n: past the \r (line_col)
        return i + 1, offset - self.starts[i] + 1


#: Did-you-mean searches over more than ``SPELL_LIST`` names that one
#: stage makes (clang's ``-fspell-checking-limit``): each costs time in
#: the number of names, so 50,000 unknown names among 50,000 windows would
#: take quadratic time. Later ones give no suggestion; searches over
#: shorter lists (hook points, keys, units) are always made. The count
#: restarts with every ``DiagnosticSink`` and every command.
SPELL_CHECK_LIMIT = 50
SPELL_LIST = 200
_spell_checks = 0


def reset_spell_checks() -> None:
    """Give the next stage its ``SPELL_CHECK_LIMIT`` searches again."""
    global _spell_checks
    _spell_checks = 0


def closest(name: str, choices: Iterable[str]) -> str | None:
    """The closest of ``choices`` to ``name``: one equal but for case, else
    the best with difflib ratio >= 0.6; None when none is close, and for
    more than ``SPELL_LIST`` choices once ``SPELL_CHECK_LIMIT`` such
    searches were made (``choices`` may then be a generator: at most
    ``SPELL_LIST + 1`` of it is read)."""
    global _spell_checks
    if _spell_checks >= SPELL_CHECK_LIMIT:
        if not isinstance(choices, Sized):
            choices = list(itertools.islice(choices, SPELL_LIST + 1))
        if len(choices) > SPELL_LIST:
            return None
    choices = list(choices)
    if len(choices) > SPELL_LIST:
        _spell_checks += 1
    folded = [c for c in choices if c.lower() == name.lower()]
    best = folded or difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    return best[0] if best else None


def suggest(name: str, choices: Iterable[str]) -> str:
    """Return ``"; did you mean 'x'?"`` for the ``closest`` of ``choices``
    to ``name``, else the empty string."""
    best = closest(name, choices)
    return f"; did you mean '{best}'?" if best else ""


@dataclass
class DiagnosticSink:
    """Collects diagnostics from one stage so all of them are reported in one
    run. ``sources`` maps a path to its text lines for caret rendering."""

    sources: dict[str, list[str]] = field(default_factory=dict)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    #: (severity, message, span) of every recorded diagnostic: the same
    #: message at the same place is recorded once (errors that follow from
    #: another one, reached twice, are not repeated).
    _seen: set = field(default_factory=set, repr=False)

    def __post_init__(self):
        reset_spell_checks()  # each stage gets its did-you-mean searches

    def add_source(self, path: str, text: str) -> None:
        """Remember ``text`` as the contents of ``path`` for caret lines
        (split the way ``syntax.parse`` reads a schedule: a leading
        byte-order mark dropped, ``\\r\\n`` or a lone ``\\r`` ends a line)."""
        self.sources[path] = source_lines(text.removeprefix("\ufeff"))

    def line_of(self, span: Span | None) -> str | None:
        """The source line under ``span``, if the file was registered."""
        if span is None:
            return None
        lines = self.sources.get(span.path)
        if lines is None or not 1 <= span.line <= len(lines):
            return None
        return lines[span.line - 1]

    def error(self, message: str, span: Span | None, *, code: str = "",
              notes: Sequence[str] = ()) -> None:
        """Record an error-severity diagnostic at ``span``."""
        self.add(Diagnostic(message, span, "error", code, self.line_of(span),
                            tuple(notes)))

    def add(self, diagnostic: Diagnostic) -> None:
        """Record ``diagnostic``, filling in its source line when missing;
        a diagnostic with the severity, message and span of one already
        recorded is dropped."""
        key = (diagnostic.severity, diagnostic.message, diagnostic.span)
        if key in self._seen:
            return
        self._seen.add(key)
        if diagnostic.source_line is None and diagnostic.span is not None:
            line = self.line_of(diagnostic.span)
            if line is not None:
                diagnostic = Diagnostic(diagnostic.message, diagnostic.span,
                                        diagnostic.severity, diagnostic.code, line,
                                        diagnostic.notes)
        self.diagnostics.append(diagnostic)

    @property
    def has_errors(self) -> bool:
        """True when at least one error-severity diagnostic was recorded."""
        return any(d.severity == "error" for d in self.diagnostics)

    def raise_if_errors(self, cls: type[L2sError] = L2sSemanticError) -> None:
        """Raise ``cls`` carrying every diagnostic, sorted by position, when any
        error was recorded. Raises: ``cls``."""
        if self.has_errors:
            ordered = sorted(self.diagnostics,
                             key=lambda d: (d.span is None, d.span or Span("", 0, 0, 0, 0)))
            raise cls(ordered)
