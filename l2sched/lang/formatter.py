"""Canonical layout of ``.l2s`` files (``l2sched fmt``).

``format_file(tree)`` prints a ``ScheduleFile`` back as text: one statement
per line, header settings as written, a blank line before each window, four
spaces of indent inside window bodies, sizes with their unit attached,
layer selectors with parentheses only where they change the meaning, and
every comment kept (own-line comments before the statement that follows
them, end-of-line comments after the statement whose last line they share;
a window head with a comment inside keeps its line breaks, each comment
after its clauses' line or on its own line between them, later lines
indented; comments inside another statement written over several lines
move above it).
``parse(format_file(parse(x))) == parse(x)`` for every valid ``x``.
``format_text`` keeps the file's dominant line ending (LF or CRLF, the same
on every line) and a leading UTF-8 byte-order mark.
"""

from __future__ import annotations

import re

from l2sched.lang import nodes as n
from l2sched.lang.syntax import keywords, parse

INDENT = "    "


def _scalar(v: n.Scalar) -> str:
    if isinstance(v, n.StringValue):
        return f'"{v.text}"'
    return v.text


def format_selector(sel) -> str:
    """Text of a selector node, with parentheses only where needed."""
    if isinstance(sel, n.Selector):
        inc = format_selector(sel.include)
        if sel.exclude is None:
            return inc
        return f"{inc} except {format_selector(sel.exclude)}"
    if isinstance(sel, n.SelUnion):  # a group among the operands keeps its ()
        return ", ".join(format_selector(x) if isinstance(x, n.SelInter) else _atom(x)
                         for x in sel.items)
    if isinstance(sel, n.SelInter):
        return " & ".join(_atom(x) for x in sel.items)
    return _atom(sel)


def _atom(sel) -> str:
    if isinstance(sel, n.SelName):
        return sel.name
    if isinstance(sel, n.SelIndex):
        return sel.index
    if isinstance(sel, n.SelRange):
        return f"{sel.lo}..{sel.hi}"
    return f"({format_selector(sel)})"


def _target(t: n.Target) -> str:
    parts = [t.scope] + (["lazy"] if t.lazy else [])
    parts.append(", ".join(p.text for p in t.patterns))
    if t.excludes:
        parts.append("except " + ", ".join(p.text for p in t.excludes))
    return " ".join(parts)


def _window_head(w: n.Window) -> str:
    parts = [f"window {w.name.text}"]
    if w.hook is not None:
        parts.append(f"at {w.hook.text}")
    if w.budget is not None:
        parts.append(f"budget {w.budget.text}")
    if w.layers is not None:
        parts.append(f"layers {format_selector(w.layers)}")
    if w.carry is not None:
        parts.append(f"carry {w.carry.text}")
    if w.kernel is not None:
        parts.append(f"kernel {w.kernel.text}")
    return " ".join(parts)


class _Printer:
    def __init__(self, comments: tuple[n.Comment, ...]):
        self.pending = sorted(comments, key=lambda c: (c.line, c.column))
        self.out: list[str] = []

    def leading(self, line: int, indent: str) -> None:
        """Emit own-line comments that appear before source ``line``."""
        while self.pending and self.pending[0].line < line:
            self.out.append(indent + self.pending.pop(0).text)

    def emit(self, text: str, first: int, last: int, indent: str = "",
             through: int | None = None) -> None:
        """Emit a statement spanning source lines ``first..last``: comments
        before ``last`` (also those inside a statement written over several
        lines) go on their own lines above it, a comment on ``last`` after it
        (``through``: the comments up to that line, for a window head whose
        ``{`` is on a later line)."""
        self.leading(max(first, last), indent)
        trailing = []
        end = last if through is None else through
        while self.pending and self.pending[0].line <= end:
            trailing.append(self.pending.pop(0).text)
        # one comment ends a line (two would read back as one): with
        # ``through``, the earlier ones go on their own lines above it
        for comment in trailing[:-1]:
            self.out.append(indent + comment)
        trailing = trailing[-1:]
        self.out.append(indent + text + ("  " + " ".join(trailing) if trailing else ""))

    def blank(self) -> None:
        if self.out and self.out[-1] != "":
            self.out.append("")


def format_file(tree: n.ScheduleFile) -> str:
    """Canonical text of ``tree`` (ends with one newline)."""
    p = _Printer(tree.comments)
    name = tree.name.text
    head = name if _is_plain_name(name) else f'"{name}"'
    p.emit(f"schedule {head}", tree.name.span.line, tree.name.span.line)
    if tree.extends is not None:
        line = tree.extends.span.line
        p.emit(f'extends "{tree.extends.text}"', line, line)
    previous = None
    for item in tree.items:
        kind = type(item)
        if kind is n.Window or (previous is not None and previous is not kind) \
                or previous is None:
            p.blank()
        if isinstance(item, n.Setting):
            p.emit(f"{item.key.text} {_scalar(item.value)}", item.span.line,
                   item.span.end_line)
        elif isinstance(item, n.Override):
            p.emit(f"set {item.key.text} = {item.value}", item.span.line,
                   item.span.end_line)
        else:
            _window(p, item)
        previous = kind
    p.leading(10**9, "")
    while p.out and p.out[-1] == "":
        p.out.pop()
    return "\n".join(p.out) + "\n"


def _head_lines(w: n.Window) -> list[tuple[int, int, str]]:
    """The window's head as ``(first line, last line, text)`` per source line
    its clauses start on, in line order (clauses of one line in canonical
    order): ``window NAME`` and the clauses on its line first."""
    clauses = [(w.span.line, w.name.span.end_line, f"window {w.name.text}")]
    for keyword, node, text in (
            ("at", w.hook, w.hook and w.hook.text),
            ("budget", w.budget, w.budget and w.budget.text),
            ("layers", w.layers, w.layers and format_selector(w.layers)),
            ("carry", w.carry, w.carry and w.carry.text),
            ("kernel", w.kernel, w.kernel and w.kernel.text)):
        if node is not None:
            clauses.append((node.span.line, node.span.end_line, f"{keyword} {text}"))
    lines: dict[int, list] = {}
    for first, last, text in clauses:
        lines.setdefault(first, []).append((last, text))
    return [(first, max(last for last, _ in got), " ".join(text for _, text in got))
            for first, got in sorted(lines.items())]


def _window(p: _Printer, w: n.Window) -> None:
    # End-of-line comments of the head run to the '{' line; own-line comments
    # after it stay on their own lines inside the body.
    # (or to the line before, when a target starts on the '{' line: its
    # comment belongs to that target).
    head_last = w.body_span.line if w.has_body and w.body_span.line else w.span.end_line
    if w.has_body and w.targets and w.targets[0].span.line == head_last:
        head_last -= 1
    brace = " {" if w.has_body else ""
    lines = _head_lines(w)
    if not any(lines[0][1] <= c.line < lines[-1][1] for c in p.pending):
        # no comment from the end of the head's first line to the end of its
        # last clause: one line (comments before it go above the window),
        # the comments from its end to the '{' after it
        p.emit(_window_head(w) + brace, w.span.line, lines[-1][1], through=head_last)
    else:
        # a comment inside the head stays where it was: the head keeps the
        # source's line breaks (clauses of one line together, later lines
        # indented), each comment after its line (the last line's: up to the
        # '{') or on its own line between lines
        for k, (first, last, text) in enumerate(lines):
            final = k == len(lines) - 1
            p.emit(text + (brace if final else ""), first, last, INDENT if k else "",
                   through=head_last if final else None)
    if not w.has_body:
        return
    for t in w.targets:
        p.emit(_target(t), t.span.line, t.span.end_line, INDENT)
    p.leading(w.span.end_line, INDENT)
    p.emit("}", w.span.end_line, w.span.end_line)


def _is_plain_name(text: str) -> bool:
    return re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\-]*", text) is not None and \
        text not in keywords()


def line_ending(text: str) -> str:
    """The line ending ``fmt`` writes for ``text``: ``\\r\\n`` when more
    of its lines end that way than with a bare ``\\n`` or ``\\r``, else
    ``\\n`` (CR-only files are rewritten with ``\\n``)."""
    crlf = text.count("\r\n")
    others = text.count("\n") + text.count("\r") - 2 * crlf
    return "\r\n" if crlf > others else "\n"


def format_text(text: str, path: str = "<string>") -> str:
    """Parse ``text`` and return its canonical layout, every line ending
    with the file's dominant line ending (``line_ending``) and a leading
    UTF-8 byte-order mark kept. Raises the parser's ``L2sError`` on invalid
    input (nothing is rewritten then)."""
    out = format_file(parse(text, path))
    newline = line_ending(text)
    if newline != "\n":
        out = out.replace("\n", newline)
    return ("\ufeff" if text.startswith("\ufeff") else "") + out
