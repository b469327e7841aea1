"""Where a key of a TOML file is written: the line and columns of a key
path such as ``("ops", "kda+moe", "kda.in_proj", "hot_us")``, whichever
of TOML's forms wrote it (a ``[table]`` header, a dotted key ``a.b = 1``, a
quoted part ``"kda.in_proj"``, a key inside an inline table ``{ hot_us =
[...] }``).

``tomllib`` gives values without positions, so a problem found in a parsed
value is located again in the text here. Only what the device profiles use
is read: single-line keys and headers; the lines of a multi-line array or
inline table are skipped, and a multi-line string is not understood (a
line inside one may be taken for a key).
"""

from __future__ import annotations

import re

from l2sched.errors import Span, source_lines

_BARE = re.compile(r"[A-Za-z0-9_-]+")
_HEADER = re.compile(r"^\s*\[(\[?)(.*?)\]?\]\s*(?:#.*)?$")


def _after_string(text: str, i: int) -> int:
    """The offset just after the string that opens at ``text[i]`` (``"``
    with backslash escapes, or ``'``); ``len(text) + 1`` when it does not
    close on the line."""
    q, j, n = text[i], i + 1, len(text)
    while j < n and text[j] != q:
        j += 2 if q == '"' and text[j] == "\\" else 1
    return j + 1


def key_parts(text: str, start: int = 0) -> list[tuple[str, int, int]] | None:
    """The parts of the dotted key at the start of ``text[start:]`` (up to
    ``=`` or the end), each ``(name, start, end)`` with offsets into
    ``text`` (a quoted part's offsets are those of its content, without the
    quotes). None when it is not a key (e.g. an unquoted space inside)."""
    parts = []
    i, n = start, len(text)
    while True:
        while i < n and text[i] in " \t":
            i += 1
        if i < n and text[i] in "\"'":
            j = _after_string(text, i)
            if j > n:
                return None
            parts.append((text[i + 1:j - 1], i + 1, j - 1))
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


def _outside_strings(text: str):
    """``(offset, character)`` of ``text`` outside its strings, up to a
    ``#`` comment."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            i = _after_string(text, i)
            continue
        if c == "#":
            return
        yield i, c
        i += 1


def _open_brackets(value: str) -> int:
    """How many ``[``/``{`` of a value stay open at the end of its line."""
    return sum((c in "[{") - (c in "]}") for _, c in _outside_strings(value))


def _entries(text: str):
    """``(line number, full key path, [(part, start, end)] of the key on the
    line, is_header, value start)`` for every header and key line."""
    table: tuple[str, ...] = ()
    depth = 0
    for ln, line in enumerate(source_lines(text), 1):
        if depth > 0:
            depth += _open_brackets(line)
            continue
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        m = _HEADER.match(line) if s.startswith("[") else None
        if m:
            body = m.start(2)
            parts = key_parts(line[:m.end(2)], body)
            if parts is None:
                continue
            table = tuple(p for p, _, _ in parts)
            yield ln, table, parts, True, len(line)
            continue
        eq = _top_level_equals(line)
        if eq < 0:
            continue
        parts = key_parts(line[:eq])
        if parts is None:
            continue
        depth = _open_brackets(line[eq + 1:])
        yield ln, table + tuple(p for p, _, _ in parts), parts, False, eq + 1


def _top_level_equals(line: str) -> int:
    """Offset of the ``=`` after a key (outside quotes), -1 without one."""
    return next((i for i, c in _outside_strings(line) if c == "="), -1)


def key_span(path: str, text: str, want: tuple[str, ...]) -> Span | None:
    """The span in ``text`` (the file ``path``) of the key path ``want``:
    the first line that writes it (its header, its key, or a key below it),
    else the first line of its deepest written ancestor (a table header, or
    an inline table's key, within which a key of ``want`` on the same line
    is pointed at). None when not even ``want[0]`` is written."""
    if not want:
        return None
    best = None  # (depth, line, col, end col)
    lines = source_lines(text)
    for ln, full, parts, header, value_at in _entries(text):
        k = len(want)
        if full[:k] == want:
            if header:
                line = lines[ln - 1]
                col = line.index("[") + 1
                return Span(path, ln, col, ln, col + len(line.split("#")[0].strip()))
            # the part of ``want``'s last name on this line (the key's own parts
            # follow the table's)
            at = len(want) - (len(full) - len(parts)) - 1
            _, a, b = parts[max(0, at)]
            return Span(path, ln, a + 1, ln, b + 1)
        if len(full) < k and want[:len(full)] == full and (best is None or len(full) > best[0]):
            line = lines[ln - 1]
            if header:
                col = line.index("[") + 1
                span = (col, col + len(line.split("#")[0].strip()))
            else:
                span = _inline_key(line, value_at, want[len(full)]) or \
                    (parts[-1][1] + 1, parts[-1][2] + 1)
            best = (len(full), ln, *span)
    if best is None:
        return None
    _, ln, a, b = best
    return Span(path, ln, a, ln, b)


def _inline_key(line: str, value_at: int, name: str) -> tuple[int, int] | None:
    """Columns of key ``name`` inside an inline table written after
    ``value_at`` on ``line`` (``{ m = [...], name = ... }``), if there."""
    pat = re.compile(r'[{,]\s*(?:"(' + re.escape(name) + r')"|(' + re.escape(name)
                     + r'))\s*=')
    m = pat.search(line, value_at)
    if not m:
        return None
    g = 1 if m.group(1) is not None else 2
    return m.start(g) + 1, m.end(g) + 1
