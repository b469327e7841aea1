"""Syntax stage: ``.l2s`` text -> typed AST (``l2sched.nodes``).

One LALR(1) Lark parser over ``grammar/l2s.lark`` (built once per process),
one Transformer to frozen nodes with spans, and syntax errors turned into
``L2sSyntaxError`` with ``path:line:col``, the source line, a caret and the
tokens that were expected. ``read_source`` gives one-line ``L2sInputError``s
for files that are missing, directories, not UTF-8 or empty.

Long module: the parser, the transformer of every grammar rule to its node and
the translation of every Lark error into one message are one unit; split,
each half would need the other's private tables.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import os
import re
import stat
from pathlib import Path

from lark import Lark, Token, Transformer, Tree, v_args
from lark.exceptions import (
    UnexpectedCharacters,
    UnexpectedEOF,
    UnexpectedInput,
    UnexpectedToken,
    VisitError,
)

from l2sched.errors import (
    Diagnostic,
    L2sError,
    L2sInputError,
    L2sSyntaxError,
    Span,
    line_col,
    source_lines,
    suggest,
)
from l2sched.files import packaged_dir
from l2sched.lang import nodes as n
from l2sched.units import UNITS

_SIZE_RE = re.compile(r"([0-9]+(?:\.[0-9]+)?)([A-Za-z]*)")
#: A number glued to an ``e``, right before an unexpected token (``1e30MB``).
_EXPONENT_RE = re.compile(r"(?<![A-Za-z0-9_.])[0-9]+(?:\.[0-9]+)?[eE]\Z")

#: Deepest nesting of parentheses in a layer selector. Deeper selectors
#: are an error: every stage walks selectors recursively.
MAX_SELECTOR_DEPTH = 32

#: How the parser's terminal names read in "expected ..." lists.
_TERMINAL_TEXT = {
    "NAME": "a name",
    "NUMBER": "a number",
    "SIZE": "a size (e.g. 20MB)",
    "STRING": 'a "string"',
    "SET_VALUE": "a value",
    "LAZY": "'lazy'",
    "LBRACE": "'{'",
    "RBRACE": "'}'",
    "LPAR": "'('",
    "RPAR": "')'",
    "COMMA": "','",
    "AMPERSAND": "'&'",
    "SET_EQ": "'='",
    "__ANON_0": "'..'",
    "$END": "end of file",
}


def grammar_text() -> str:
    """The Lark grammar ``l2s.lark`` (see ``packaged_dir``)."""
    return (packaged_dir("l2sched.grammar", "grammar") / "l2s.lark").read_text("utf-8")


class _WholeWords:
    """Lark post-lexer that keeps NAME acceptable in every lexer state, so a
    word is always lexed whole and only then recognised as a keyword
    (``thiss`` is an unexpected name, not ``this`` + ``s``)."""

    always_accept = ("NAME",)

    def process(self, stream):
        return stream


#: The comment tokens of the ``parse`` in progress (``_on_comment`` appends
#: to it; None outside ``parse``, e.g. in ``parse_fragment``).
_COMMENTS: contextvars.ContextVar[list | None] = contextvars.ContextVar(
    "l2s_comments", default=None)


def _on_comment(token: Token) -> Token:
    """Lexer callback of ``COMMENT`` tokens: collect them for ``parse``. The
    parse's own lexer says what a comment is (a ``#`` inside a string is
    not one; in a ``set`` value it is), in the same pass."""
    found = _COMMENTS.get()
    if found is not None:
        found.append(token)
    return token


@functools.lru_cache(maxsize=1)
def _parser() -> Lark:
    return Lark(
        grammar_text(),
        parser="lalr",
        lexer="contextual",
        start=["start", "size_value", "selector_value", "scalar_value"],
        propagate_positions=True,
        maybe_placeholders=False,
        postlex=_WholeWords(),
        lexer_callbacks={"COMMENT": _on_comment},
        # The LALR tables are pickled to the temp dir, keyed by a hash of the
        # grammar and options: a warm start of `l2sched lint` skips ~0.1 s.
        cache=True,
    )


@functools.lru_cache(maxsize=1)
def keywords() -> tuple[str, ...]:
    """The language's keywords, sorted: every word ``grammar/l2s.lark``
    spells out (``window``, ``at``, ``this``, ``lazy``, the setting keys
    ``model``, ``model_config``, ``kernel`` ...), read from the parser, so
    the formatter and docs/language.md's list cannot miss one."""
    return tuple(sorted(t.pattern.value for t in _parser().terminals
                        if t.pattern.type == "str" and t.pattern.value[:1].isalpha()))


def _terminal_text(name: str) -> str:
    if name in _TERMINAL_TEXT:
        return _TERMINAL_TEXT[name]
    try:
        pattern = _parser().get_terminal(name).pattern
    except KeyError:
        return name
    if pattern.type == "str":
        return f"'{pattern.value}'"
    return name.lower()


def read_source(path: str | os.PathLike) -> str:
    """Read a schedule file as UTF-8 text.

    Raises ``L2sInputError`` (one line, no traceback) when ``path`` is missing,
    is a directory or another non-regular file (a FIFO), is not UTF-8, or
    holds nothing but whitespace. A leading byte-order mark and ``\\r``
    line endings are kept as they are (``fmt`` writes them back; ``parse``
    reads through them)."""
    p = Path(path)
    shown = str(path)
    if "\0" in shown:  # the OS cannot even look such a name up
        raise L2sInputError(Diagnostic("no such file (the name contains a NUL "
                                       "character)", Span.point(shown)))
    try:  # stat fails for a name too long or in a directory the user cannot enter
        mode = p.stat().st_mode
        if stat.S_ISDIR(mode):
            raise L2sInputError(Diagnostic("is a directory, not a schedule file",
                                           Span.point(shown)))
        if not stat.S_ISREG(mode):  # a FIFO or a device would block the read
            raise L2sInputError(Diagnostic("not a regular file", Span.point(shown)))
        data = p.read_bytes()
    except FileNotFoundError:
        raise L2sInputError(Diagnostic("no such file", Span.point(shown))) from None
    except OSError as e:
        raise L2sInputError(Diagnostic(f"cannot read: {e.strerror}",
                                       Span.point(shown))) from None
    try:
        # An editor's UTF-8 byte-order mark is kept (``fmt`` writes it back);
        # ``parse`` ignores it.
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        # the bytes before the bad one decode: count lines in that text;
        # the column counts bytes, as the message's offset does
        prefix = data[: e.start].decode("utf-8")
        line, _ = line_col(prefix, len(prefix))
        col = len(source_lines(prefix)[-1].encode("utf-8")) + 1
        raise L2sInputError(Diagnostic(
            f"not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})",
            Span.point(shown, line, col))) from None
    if not text.removeprefix("\ufeff").strip():
        raise L2sInputError(Diagnostic("empty schedule file", Span.point(shown)))
    return text


#: A comment or a string of the grammar (``COMMENT``, ``STRING``), matched in
#: one scan so a ``#`` inside a string is not taken for a comment.
_COMMENT_OR_STRING = re.compile(r'"[^"\n]*"|#[^\n]*')


def schedule_code(text: str) -> str:
    """``text`` without its comments and blank lines, each line stripped:
    two schedules with the same code parse to the same schedule (what a
    result that recorded a schedule's text can be compared by)."""
    code = _COMMENT_OR_STRING.sub(lambda m: m.group(0) if m.group(0).startswith('"') else "",
                                  normalize_newlines(text))
    return "\n".join(ln.strip() for ln in code.split("\n") if ln.strip())


def normalize_newlines(text: str) -> str:
    """``text`` without a leading UTF-8 byte-order mark and with every line
    break (``\\r\\n``, or a lone ``\\r`` as old Mac files have) written
    as ``\\n``. Columns do not move: a ``\\r`` only ever ends a line."""
    text = text.removeprefix("\ufeff")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


def _span(path: str, meta_or_token) -> Span:
    m = meta_or_token
    return Span(path, m.line, m.column, m.end_line, m.end_column)


class _ToAst(Transformer):
    """Lark tree -> ``l2sched.nodes``; ``path`` goes into every span."""

    def __init__(self, path: str):
        super().__init__(visit_tokens=False)
        self.path = path

    def _name(self, tok: Token) -> n.Name:
        return n.Name(str(tok), span=_span(self.path, tok))

    # header ---------------------------------------------------------------
    @v_args(meta=True)
    def schedule_decl(self, meta, items):
        tok = items[0]
        text = str(tok)[1:-1] if tok.type == "STRING" else str(tok)
        return n.Name(text, span=_span(self.path, tok))

    @v_args(meta=True)
    def extends_decl(self, meta, items):
        return n.StringValue(str(items[0])[1:-1], span=_span(self.path, items[0]))

    @v_args(meta=True)
    def setting_key(self, meta, items):
        return self._name(items[0])

    @v_args(meta=True)
    def setting(self, meta, items):
        return n.Setting(items[0], items[1], span=_span(self.path, meta))

    @v_args(meta=True)
    def size(self, meta, items):
        m = _SIZE_RE.fullmatch(str(items[0]))
        return n.Size(m.group(1), m.group(2), span=_span(self.path, meta))

    def name_value(self, items):
        return self._name(items[0])

    def string_value(self, items):
        return n.StringValue(str(items[0])[1:-1], span=_span(self.path, items[0]))

    # selectors ------------------------------------------------------------
    def sel_name(self, items):
        return n.SelName(str(items[0]), span=_span(self.path, items[0]))

    @v_args(meta=True)
    def sel_range(self, meta, items):
        return n.SelRange(str(items[0]), str(items[1]), span=_span(self.path, meta))

    def sel_index(self, items):
        return n.SelIndex(str(items[0]), span=_span(self.path, items[0]))

    # Parentheses that change nothing are not kept: ``(moe)`` is ``moe``,
    # ``(a & b) & c`` is ``a & b & c``, ``(a, b), c`` is ``a, b, c``, a whole
    # selector in parentheses is that selector. What is left as a nested
    # ``Selector`` (a group) needs its parentheses: a union inside ``&``, an
    # ``except`` inside ``&`` or ``,``. So ``fmt`` prints the canonical form
    # and ``parse(fmt(x)) == parse(x)`` still holds.
    @v_args(meta=True)
    def sel_inter(self, meta, items):
        flat: list = []
        for x in items:
            x = _ungrouped(x)
            flat.extend(x.items if isinstance(x, n.SelInter) else (x,))
        if len(flat) == 1:
            return flat[0]
        return n.SelInter(tuple(flat), span=_span(self.path, meta))

    @v_args(meta=True)
    def sel_union(self, meta, items):
        flat: list = []
        for x in items:
            plain = isinstance(x, n.Selector) and x.exclude is None
            flat.extend(x.include.items if plain else (x,))
        return n.SelUnion(tuple(flat), span=_span(self.path, meta))

    @v_args(meta=True)
    def selector(self, meta, items):
        exclude = items[1] if len(items) > 1 else None
        include = items[0]
        if exclude is None and len(include.items) == 1 and \
                isinstance(include.items[0], n.Selector):
            return include.items[0]  # (a except b) as a whole selector
        return n.Selector(include, exclude, span=_span(self.path, meta))

    # windows --------------------------------------------------------------
    def excepts(self, items):
        return tuple(self._name(t) for t in items)

    @v_args(meta=True)
    def target(self, meta, items):
        # scope token, LAZY?, NAME..., the excepts' names (a tuple)?
        scope = str(items[0])
        rest = items[1:]
        lazy = bool(rest) and rest[0].type == "LAZY"
        if lazy:
            rest = rest[1:]
        excludes = rest.pop() if rest and isinstance(rest[-1], tuple) else ()
        patterns = tuple(self._name(t) for t in rest)
        return n.Target(scope, lazy, patterns, excludes, span=_span(self.path, meta))

    @v_args(meta=True)
    def body(self, meta, items):
        return ("body", (tuple(items), _span(self.path, meta)))

    def at_clause(self, items):
        return ("hook", self._name(items[0]))

    def budget_clause(self, items):
        return ("budget", items[0])

    def layers_clause(self, items):
        return ("layers", items[0])

    def carry_clause(self, items):
        return ("carry", self._name(items[0]))

    def kernel_clause(self, items):
        return ("kernel", self._name(items[0]))

    @v_args(meta=True)
    def window(self, meta, items):
        name = self._name(items[0])
        clauses = {"hook": None, "budget": None, "layers": None, "carry": None,
                   "kernel": None}
        duplicates = []
        targets: tuple = ()
        has_body = False
        body_span = n.Window.__dataclass_fields__["body_span"].default
        for kind, value in items[1:]:
            if kind == "body":
                (targets, body_span), has_body = value, True
            elif clauses[kind] is not None:
                duplicates.append(n.Name(kind, span=value.span))
            else:
                clauses[kind] = value
        return n.Window(name, clauses["hook"], clauses["budget"], clauses["layers"],
                        clauses["carry"], targets, has_body=has_body,
                        kernel=clauses["kernel"], duplicates=tuple(duplicates),
                        body_span=body_span, span=_span(self.path, meta))

    # overrides ------------------------------------------------------------
    @v_args(meta=True)
    def override(self, meta, items):
        key = items[0] if isinstance(items[0], n.Name) else self._name(items[0])
        eq, tok = items[1], items[2]
        if tok.line != eq.line:
            # Whitespace skipping carried the lexer past the end of the line:
            # the "value" is the next statement.
            raise L2sSyntaxError(Diagnostic(
                f"'set {key.text} =' has no value on its line",
                Span(self.path, eq.line, eq.end_column, eq.line, eq.end_column + 1),
                notes=("write the value after '=' on the same line",)))
        raw = str(tok)
        lead = len(raw) - len(raw.lstrip())
        value = raw.strip()
        vspan = Span(self.path, tok.line, tok.column + lead, tok.line,
                     tok.column + lead + max(len(value), 1))
        return n.Override(key, value, value_span=vspan, span=_span(self.path, meta))

    # entry points -----------------------------------------------------------
    def size_value(self, items):
        return items[0]

    def selector_value(self, items):
        return items[0]

    def scalar_value(self, items):
        return items[0]


def _ungrouped(sel):
    """``sel`` without parentheses that change nothing: a group (a nested
    ``Selector``) of one operand and no ``except`` is that operand."""
    if isinstance(sel, n.Selector) and sel.exclude is None and len(sel.include.items) == 1:
        return sel.include.items[0]
    return sel


def _accepted(text: str, err: UnexpectedInput, start: str) -> set[str] | None:
    """The terminals the parser can really take where ``err`` happened: the
    text before the offending token is replayed in an interactive parser and
    each candidate is tried (Lark's ``err.expected`` is the LALR state's
    lookahead set, which merges contexts: after a size inside a ``set`` value
    it listed window clauses). ``None`` when the replay is not possible."""
    token = getattr(err, "token", None)
    pos = getattr(token, "start_pos", None)
    if getattr(token, "type", "") == "$END" or isinstance(err, UnexpectedEOF):
        pos = len(text)
    elif not isinstance(pos, int):
        pos = getattr(err, "pos_in_stream", None)
    if not isinstance(pos, int):
        return None
    try:
        ip = _parser().parse_interactive(text[:pos], start=start)
        ip.exhaust_lexer()
        return set(ip.accepts())
    except UnexpectedInput:  # pragma: no cover - the prefix parsed before
        return None


def _real_token(text: str, pos: int) -> str:
    """The longest token of the grammar, other than a ``set`` value, that
    starts at ``pos`` in ``text`` ("" when none does)."""
    best = ""
    for term in _parser().terminals:
        if term.name in ("SET_VALUE", "WS", "COMMENT"):
            continue
        m = re.compile(term.pattern.to_regexp()).match(text, pos)
        if m and len(m.group()) > len(best):
            best = m.group()
    return best


def _keyword_hint(word: str, expected) -> str:
    """``; did you mean 'policy'?`` for a misspelt keyword, or a hint to put
    a space after a keyword glued to the next word (``tp4``)."""
    keywords = []
    for name in expected:
        try:
            pattern = _parser().get_terminal(name).pattern
        except KeyError:
            continue
        if pattern.type == "str" and pattern.value[:1].isalpha():
            keywords.append(pattern.value)
    glued = [k for k in keywords if word.startswith(k) and len(word) > len(k)
             and (word[len(k)].isdigit() or len(word) - len(k) >= 3)]
    if glued:
        k = max(glued, key=len)
        return f"; did you mean '{k} {word[len(k):]}'?"
    return suggest(word, keywords)


def _unterminated_string(err: UnexpectedInput, text: str) -> str | None:
    """The text from the opening quote to the end of its line when ``err``
    stops at a ``"`` that no quote on its line closes (a string cannot span
    lines); ``None`` for any other error. The lexer reports such a quote as
    an unexpected character, or, where only the whole-grammar lexer matches
    it, as a stray ``set`` value."""
    token = getattr(err, "token", None)
    if isinstance(err, UnexpectedCharacters):
        pos = err.pos_in_stream
    elif isinstance(err, UnexpectedToken) and token.type == "SET_VALUE":
        pos = token.start_pos
    else:
        return None
    if not isinstance(pos, int) or text[pos:pos + 1] != '"':
        return None
    rest = text[pos:].split("\n", 1)[0]
    return None if '"' in rest[1:] else rest.rstrip()


def _unexpected_character(ch: str) -> str:
    """The message for a character no token starts with; a ``-`` is the sign
    of a negative number, which no value of a schedule takes."""
    return f"unexpected character {ch!r}" + (" (a negative number)" if ch == "-" else "")


def _syntax_error(err: UnexpectedInput, text: str, path: str,
                  line_offset: int = 0, col_offset: int = 0,
                  start: str = "start") -> L2sSyntaxError:
    lines = source_lines(text)
    line = getattr(err, "line", None)
    col = getattr(err, "column", None)
    at_end = isinstance(err, UnexpectedEOF) or (
        isinstance(err, UnexpectedToken) and err.token.type == "$END")
    if at_end:
        # Lark places $END on the last token; point just past it instead (or
        # past the last text when there is no token, e.g. only comments).
        end_line = getattr(getattr(err, "token", None), "end_line", None)
        if isinstance(end_line, int) and end_line >= 1:
            line, col = end_line, err.token.end_column
        else:
            body = text.rstrip()
            line, col = line_col(body, len(body))
    elif not isinstance(line, int) or line < 1:  # pragma: no cover - defensive
        line, col = 1, 1
    source = lines[line - 1] if line <= len(lines) else ""
    unterminated = _unterminated_string(err, text)
    if unterminated is not None:
        message = "unterminated string"
        expected = getattr(err, "allowed", None) or getattr(err, "expected", set())
        width = len(unterminated)
    elif isinstance(err, UnexpectedCharacters):
        ch = text[err.pos_in_stream] if err.pos_in_stream < len(text) else ""
        message = _unexpected_character(ch)
        expected = err.allowed or set()
        width = 1
    elif isinstance(err, UnexpectedToken) and err.token.type == "$END":
        message = "unexpected end of file"
        expected = err.expected
        width = 1
    elif isinstance(err, UnexpectedToken) and err.token.type == "SET_VALUE":
        # Only `set KEY =` takes free text: Lark's whole-grammar lexer found
        # this "value" because it matches almost anything. Name the real
        # token there ('{', 'window', ...) or the stray character.
        real = _real_token(text, err.token.start_pos)
        message = (f"unexpected {real!r}" if real
                   else _unexpected_character(str(err.token)[0]))
        expected = err.expected
        width = max(len(real), 1)
    elif isinstance(err, UnexpectedToken):
        message = f"unexpected {str(err.token)!r}"
        expected = err.expected
        width = max(len(str(err.token)), 1)
        prev = text[: err.token.start_pos].rstrip(" \t")
        if str(err.token) in UNITS and prev[-1:].isdigit():
            message += " (write a size without a space, e.g. 20MB)"

        elif err.token.type == "NAME":
            message += _keyword_hint(str(err.token), expected)
    elif isinstance(err, UnexpectedEOF):
        message = "unexpected end of file"
        expected = err.expected
        width = 1
    else:  # pragma: no cover - Lark has no other UnexpectedInput kinds
        message, expected, width = str(err), set(), 1
    pos = getattr(getattr(err, "token", None), "start_pos", None)
    if not isinstance(pos, int):
        pos = getattr(err, "pos_in_stream", None)
    if isinstance(pos, int) and not at_end and _EXPONENT_RE.search(text, 0, pos):
        message += (" (sizes are plain numbers with a unit, e.g. 20MB or 1.5GB; "
                    "there is no exponent notation like 1e30)")
    accepted = _accepted(text, err, start)
    if accepted is not None:
        expected = accepted
    end = "end of file" if start == "start" else "the end of the value"
    names = sorted({end if e == "$END" else _terminal_text(e) for e in expected
                    if not e.startswith("__ANON") or e in _TERMINAL_TEXT})
    notes = ((f"expected {names[0]}",) if len(names) == 1 else
             (f"expected one of: {', '.join(names)}",) if names else ())
    if unterminated is not None:
        # The fix: close it where a string is taken, else drop the quote.
        notes = ((f"add the closing quote: {unterminated}\"",) if "STRING" in expected
                 else ("remove the quote: a string cannot go here",) + notes)
    span = Span(path, line + line_offset, col + col_offset, line + line_offset,
                col + col_offset + width)
    return L2sSyntaxError(Diagnostic(message, span, "error", "", source, notes))


def _check_nesting(tree, text: str, path: str, line_offset: int = 0,
                   col_offset: int = 0) -> None:
    """Raise ``L2sSyntaxError`` at the first layer selector nested more than
    ``MAX_SELECTOR_DEPTH`` parentheses deep (walked without recursion: the
    AST builder, formatter and checker recurse once per level)."""
    stack = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, Tree) or node.data == "body":
            continue  # a window's body holds targets, no selector
        if node.data == "selector":
            depth += 1
            if depth > MAX_SELECTOR_DEPTH + 1:
                m = node.meta
                line = m.line + line_offset
                col = m.column + (col_offset if m.line == 1 else 0)
                # point at the '(' that opens this level
                col = max(col - 1, 1)
                lines = source_lines(text)
                source = lines[m.line - 1] if m.line <= len(lines) else None
                raise L2sSyntaxError(Diagnostic(
                    f"layer selector nested deeper than {MAX_SELECTOR_DEPTH} "
                    f"parentheses", Span(path, line, col, line, col + 1),
                    source_line=source))
        stack.extend((c, depth) for c in reversed(node.children))


def parse(text: str, path: str = "<string>") -> n.ScheduleFile:
    """Parse ``.l2s`` source ``text`` into a ``ScheduleFile``.

    ``path`` names the source in spans and messages. Comments are kept on
    the result for the formatter. Raises ``L2sSyntaxError`` (first syntax
    error, with expected tokens) or ``L2sInputError`` for empty text.
    A leading byte-order mark is ignored; ``\\r\\n`` and a lone ``\\r``
    end a line like ``\\n`` (see ``normalize_newlines``)."""
    text = normalize_newlines(text)
    if not text.strip():
        raise L2sInputError(Diagnostic("empty schedule file", Span.point(path)))
    found: list = []
    reset = _COMMENTS.set(found)  # the parse collects the comments it skips
    try:
        tree = _parser().parse(text, start="start")
    except UnexpectedInput as err:
        raise _syntax_error(err, text, path, start="start") from None
    finally:
        _COMMENTS.reset(reset)
    _check_nesting(tree, text, path)
    comments = tuple(n.Comment(str(t), t.line, t.column) for t in found)
    try:
        result = _ToAst(path).transform(tree)
    except VisitError as err:
        orig = err.orig_exc
        if isinstance(orig, L2sError):  # a check made while building nodes
            lines = source_lines(text)
            raise type(orig)([
                dataclasses.replace(d, source_line=lines[d.span.line - 1])
                if d.span is not None and d.source_line is None
                and 1 <= d.span.line <= len(lines) else d
                for d in orig.diagnostics]) from None
        raise  # pragma: no cover - transformer bugs only
    return _finish(result, path, comments)


def _finish(tree, path: str, comments: tuple) -> n.ScheduleFile:
    children = tree.children
    name = children[0]
    rest = children[1:]
    extends = None
    if rest and isinstance(rest[0], n.StringValue):
        extends, rest = rest[0], rest[1:]
    return n.ScheduleFile(name, extends, tuple(rest), comments, path,
                          span=name.span)


def parse_fragment(text: str, start: str, path: str, line: int = 1,
                   column: int = 1):
    """Parse ``text`` with one of the grammar's value entry points
    (``size_value``, ``selector_value``, ``scalar_value``), as found at
    ``path:line:column`` (spans are shifted there). Raises ``L2sSyntaxError``
    whose source line is the fragment's text; callers that know the real
    line replace it (``semantic`` does, through its sink)."""
    if not text.strip():
        raise L2sSyntaxError(Diagnostic("missing value",
                                        Span(path, line, column, line, column + 1)))
    try:
        tree = _parser().parse(text, start=start)
    except UnexpectedInput as err:
        raise _syntax_error(err, text, path, line - 1, column - 1, start) from None
    _check_nesting(tree, text, path, line - 1, column - 1)
    node = _ToAst(path).transform(tree)
    return _shift(node, line - 1, column - 1)


def _shift(node, dline: int, dcol: int):
    """Move every span inside ``node`` by ``dline`` lines / ``dcol`` columns
    (columns only on the first line, where a fragment starts)."""

    if isinstance(node, tuple):
        return tuple(_shift(x, dline, dcol) for x in node)
    if not dataclasses.is_dataclass(node):
        return node
    changes = {}
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if isinstance(value, Span):
            changes[f.name] = Span(
                value.path, value.line + dline,
                value.column + (dcol if value.line == 1 else 0),
                value.end_line + dline,
                value.end_column + (dcol if value.end_line == 1 else 0))
        elif dataclasses.is_dataclass(value) or isinstance(value, tuple):
            changes[f.name] = _shift(value, dline, dcol)
    return dataclasses.replace(node, **changes)


def parse_file(path: str | os.PathLike) -> n.ScheduleFile:
    """``read_source`` + ``parse``. Raises ``L2sInputError``/``L2sSyntaxError``."""
    return parse(read_source(path), str(path))
