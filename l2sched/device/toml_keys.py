"""Where a key of a TOML file is written: the line and columns of a key
path such as ``("ops", "kda+moe", "kda.in_proj", "hot_us")``, whichever
of TOML's forms wrote it (a ``[table]`` header, a dotted key ``a.b = 1``, a
quoted part ``"kda.in_proj"`` with or without escapes, a key inside an
inline table ``{ hot_us = [...] }``, nested or not).

``tomllib`` gives values without positions, so a problem found in a parsed
value is located again in the text here (``KeyIndex``: the file is read
once, then each problem is a lookup). Strings, multi-line ones included,
are skipped; a multi-line array or inline table is followed to its end,
but the keys inside its continuation lines are not indexed (a problem
there is located at the key that opens the value).
"""

from __future__ import annotations

import re
from typing import NamedTuple

try:  # Python >= 3.11
    import tomllib as _toml
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as _toml  # type: ignore[no-redef]

from l2sched.errors import Span, source_lines

_BARE = re.compile(r"[A-Za-z0-9_-]+")


def _after_string(text: str, i: int) -> int:
    """The offset just after the one-line string that opens at ``text[i]``
    (``"`` with backslash escapes, or ``'``); ``len(text) + 1`` when it does
    not close on the line."""
    q, j, n = text[i], i + 1, len(text)
    while j < n and text[j] != q:
        j += 2 if q == '"' and text[j] == "\\" else 1
    return j + 1


def _key_name(raw: str) -> str:
    """A quoted key's name: a basic string's escapes (``\\u002B``) decoded
    by the TOML reader itself, a literal string as written."""
    if raw.startswith('"') and "\\" in raw:
        try:
            return _toml.loads(f"k = {raw}")["k"]
        except (_toml.TOMLDecodeError, ValueError):
            pass
    return raw[1:-1]


def key_parts(text: str, start: int = 0) -> list[tuple[str, int, int]] | None:
    """The parts of the dotted key at ``text[start:]`` (up to ``=`` or the
    end), each ``(name, start, end)`` with offsets into ``text`` (a quoted
    part's name is decoded, its offsets are those of its content without
    the quotes). None when it is not a key (e.g. an unquoted space inside)."""
    parts = []
    i, n = start, len(text)
    while True:
        while i < n and text[i] in " \t":
            i += 1
        if i < n and text[i] in "\"'":
            j = _after_string(text, i)
            if j > n:
                return None
            parts.append((_key_name(text[i:j]), i + 1, j - 1))
            i = j
        else:
            m = _BARE.match(text, i)
            if not m:
                return None
            parts.append((m.group(), m.start(), m.end()))
            i = m.end()
        while i < n and text[i] in " \t":
            i += 1
        if i >= n or text[i] == "=":
            return parts
        if text[i] != ".":
            return None
        i += 1


class _Scanner:
    """Characters of a TOML text outside its strings and comments, line by
    line, carrying an open multi-line string (``\"\"\"`` or ``'''``) and the
    depth of open ``[``/``{`` from one line to the next."""

    def __init__(self):
        self.in_string = ""  # the delimiter of an open multi-line string
        self.depth = 0

    def outside(self, line: str, start: int = 0):
        """``(offset, character)`` of ``line[start:]`` outside strings, up to
        a ``#`` comment; brackets update ``depth``."""
        i, n = start, len(line)
        while i < n:
            if self.in_string:
                end = line.find(self.in_string, i)
                if end < 0:
                    return
                i = end + 3
                for _ in range(2):  # up to two quotes of the string's own before the end
                    if i < n and line[i] == self.in_string[0]:
                        i += 1
                self.in_string = ""
                continue
            c = line[i]
            if line.startswith(('"""', "'''"), i):
                self.in_string = line[i:i + 3]
                i += 3
                continue
            if c in "\"'":
                i = _after_string(line, i)
                continue
            if c == "#":
                return
            self.depth += (c in "[{") - (c in "]}")
            yield i, c
            i += 1


class _Entry(NamedTuple):
    """One header or key line: its number, the full key path it writes, the
    key's parts on the line (``key_parts``), and for a header the columns
    of its ``[...]``, for a key the offset where its value starts."""

    line: int
    path: tuple[str, ...]
    parts: list
    header: bool
    header_cols: tuple[int, int] = (0, 0)
    value_at: int = 0


class KeyIndex:
    """Every header and key line of a TOML ``text``, read once:
    ``span(path, want)`` locates a key path in it."""

    def __init__(self, text: str):
        self.lines = source_lines(text)
        self.entries: list[_Entry] = []
        scan = _Scanner()
        table: tuple[str, ...] = ()
        for ln, line in enumerate(self.lines, 1):
            if scan.in_string or scan.depth > 0:
                for _ in scan.outside(line):
                    pass
                continue
            s = line.lstrip()
            if not s or s.startswith("#"):
                continue
            if s.startswith("["):
                header = _header(line, scan)
                if header is not None:
                    table = tuple(p for p, _, _ in header[0])
                    self.entries.append(_Entry(ln, table, header[0], True, header[1]))
                continue
            eq = next((i for i, c in scan.outside(line) if c == "="), -1)
            if eq < 0:
                scan.depth = 0
                continue
            parts = key_parts(line[:eq])
            scan.depth = 0
            for _ in scan.outside(line, eq + 1):  # the value: strings, brackets left open
                pass
            if parts is not None:
                self.entries.append(_Entry(ln, table + tuple(p for p, _, _ in parts), parts,
                                           False, value_at=eq + 1))

    def span(self, path: str, want: tuple[str, ...]) -> Span | None:
        """The span (in the file ``path``) of the key path ``want``: the
        first line that writes it (its header, its key, or a key below it),
        else the first line of its deepest written ancestor (a table header,
        or a key whose inline table holds ``want``'s next names, pointed at
        as deep as they go on that line). None when not even ``want[0]`` is
        written."""
        if not want:
            return None
        best = None  # (depth, line, col, end col)
        k = len(want)
        for e in self.entries:
            full, parts = e.path, e.parts
            if full[:k] == want:
                if e.header:
                    return Span(path, e.line, e.header_cols[0], e.line, e.header_cols[1])
                # want's last name among the key's own parts (they follow the table's)
                _, a, b = parts[max(0, k - (len(full) - len(parts)) - 1)]
                return Span(path, e.line, a + 1, e.line, b + 1)
            if len(full) < k and want[:len(full)] == full and (best is None or
                                                               len(full) > best[0]):
                if e.header:
                    a, b = e.header_cols
                else:
                    a, b = _inline_key(self.lines[e.line - 1], e.value_at, want[len(full):]) \
                        or (parts[-1][1] + 1, parts[-1][2] + 1)
                best = (len(full), e.line, a, b)
        if best is None:
            return None
        _, ln, a, b = best
        return Span(path, ln, a, ln, b)


def _header(line: str, scan: _Scanner) -> tuple[list, tuple[int, int]] | None:
    """The key parts of a ``[table]`` or ``[[array]]`` header line and the
    columns of its brackets (a comment after them left out), or None when
    the line is not one."""
    first = line.index("[")
    inner = first + (2 if line.startswith("[[", first) else 1)
    close = next((i for i, c in scan.outside(line, inner) if c == "]"), -1)
    scan.depth = 0
    parts = key_parts(line[:close], inner) if close >= 0 else None
    if parts is None:
        return None
    end = close + (2 if line.startswith("]]", close) else 1)
    return parts, (first + 1, end + 1)


def _inline_key(line: str, value_at: int, names: tuple[str, ...]) -> tuple[int, int] | None:
    """Columns of the deepest of ``names`` (a key path into the inline
    table written after ``value_at`` on ``line``: ``{ m = [...], hot_us =
    ... }``, nested or dotted) found there, each looked for after the one
    before; None when not even the first is there."""
    found = None
    at, left = value_at, list(names)
    while left:
        hit = None
        for i, c in _Scanner().outside(line, at):
            if c in "{,":
                parts = key_parts(line, i + 1)
                if parts and [p for p, _, _ in parts] == left[:len(parts)]:
                    hit = parts
                    break
        if hit is None:
            break
        found = (hit[-1][1] + 1, hit[-1][2] + 1)
        end = hit[-1][2]
        at = end + 1 if end < len(line) and line[end] in "\"'" else end  # past a closing quote
        left = left[len(hit):]
    return found
