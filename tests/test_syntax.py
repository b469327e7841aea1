"""Parser tests: every construct of docs/language.md parses to the expected
AST, and every syntax/input error has its message and position asserted."""

from __future__ import annotations

import pytest

from l2sched.errors import L2sInputError, L2sSyntaxError
from l2sched.lang import nodes as n
from l2sched.lang.syntax import parse, parse_file, parse_fragment, read_source


def err(text: str, cls=L2sSyntaxError):
    """The single diagnostic ``parse(text)`` raises."""
    with pytest.raises(cls) as info:
        parse(text, "t.l2s")
    (d,) = info.value.diagnostics
    return d


def where(d) -> tuple[int, int]:
    return d.span.line, d.span.column


# -------------------------------------------------------------------------
# constructs


def test_header_name_extends_and_settings():
    tree = parse('schedule "my sched"\nextends "base.l2s"\nmodel glm5next\n'
                 'device h200\ntp 4\nep on\nmax_tokens 128\npolicy evict_first\n'
                 'set_aside max\n', "t.l2s")
    assert tree.name.text == "my sched"
    assert tree.extends.text == "base.l2s"
    assert [(s.key.text, s.value) for s in tree.settings] == [
        ("model", n.Name("glm5next")), ("device", n.Name("h200")),
        ("tp", n.Size("4", "")), ("ep", n.Name("on")),
        ("max_tokens", n.Size("128", "")), ("policy", n.Name("evict_first")),
        ("set_aside", n.Name("max"))]
    assert tree.settings[2].span.line == 5
    assert (tree.name.span.line, tree.name.span.column) == (1, 10)


def test_sizes_keep_number_and_unit():
    tree = parse("schedule s\nset_aside 7.5MiB\nwindow A budget 20MB\n")
    assert tree.settings[0].value == n.Size("7.5", "MiB")
    assert tree.windows[0].budget == n.Size("20", "MB")
    assert tree.windows[0].budget.text == "20MB"
    assert parse("schedule s\nwindow A budget 20\n").windows[0].budget == n.Size("20", "")


def test_window_clauses_any_order_and_body():
    a = parse("schedule s\nwindow B at attn.pre_all_reduce budget 50MB layers moe "
              "carry C {\n this a\n}\n").windows[0]
    b = parse("schedule s\nwindow B carry C layers moe budget 50MB "
              "at attn.pre_all_reduce { this a }\n").windows[0]
    assert a == b
    assert a.hook.text == "attn.pre_all_reduce" and a.carry.text == "C"
    assert a.has_body and not parse("schedule s\nwindow C budget 1MB\n").windows[0].has_body


def test_targets():
    w = parse("schedule s\nwindow B {\n  this post_attention_layernorm, hc_ffn_*\n"
              "  next lazy self_attn.* except self_attn.o_proj, self_attn.kv_b_proj\n"
              "}\n").windows[0]
    t0, t1 = w.targets
    assert (t0.scope, t0.lazy) == ("this", False)
    assert [p.text for p in t0.patterns] == ["post_attention_layernorm", "hc_ffn_*"]
    assert t0.excludes == ()
    assert (t1.scope, t1.lazy) == ("next", True)
    assert [p.text for p in t1.excludes] == ["self_attn.o_proj", "self_attn.kv_b_proj"]
    assert (t1.span.line, t1.span.column) == (4, 3)


def test_selectors_precedence():
    sel = parse("schedule s\nwindow A layers kda & moe, 3..5, (mla, 44) except 4, 0\n"
                ).windows[0].layers
    # a parenthesized union inside a union changes nothing: it is not kept
    assert sel == n.Selector(
        n.SelUnion((n.SelInter((n.SelName("kda"), n.SelName("moe"))),
                    n.SelRange("3", "5"), n.SelName("mla"), n.SelIndex("44"))),
        n.SelUnion((n.SelIndex("4"), n.SelIndex("0"))))
    # one inside an intersection is a group (a nested Selector)
    sel = parse("schedule s\nwindow A layers (mla, 44) & moe\n").windows[0].layers
    assert sel == n.Selector(n.SelUnion((n.SelInter((
        n.Selector(n.SelUnion((n.SelName("mla"), n.SelIndex("44"))), None),
        n.SelName("moe"))),)), None)


def test_set_lines_and_comments():
    tree = parse("# head\nschedule s  # name\nset window.B.budget = 25MB # why\n"
                 "set policy = evict_normal\n")
    assert [(o.key.text, o.value) for o in tree.overrides] == [
        ("window.B.budget", "25MB"), ("policy", "evict_normal")]
    assert (tree.overrides[0].value_span.line, tree.overrides[0].value_span.column) \
        == (3, 23)
    assert [c.text for c in tree.comments] == ["# head", "# name", "# why"]


def test_keywords_are_names_where_only_a_name_fits():
    w = parse("schedule s\nwindow at at at { this except, lazy }\n").windows[0]
    assert w.name.text == "at" and w.hook.text == "at"
    assert [p.text for p in w.targets[0].patterns] == ["except", "lazy"]


def test_equality_ignores_layout_and_spans():
    assert parse("schedule s\ntp 4\n") == parse("schedule   s tp\n\n 4 # c")
    assert parse("schedule s\ntp 4\n") != parse("schedule s\ntp 2\n")


def test_parse_fragment_shifts_spans():
    sel = parse_fragment("kda & moe", "selector_value", "f", 3, 20)
    assert (sel.span.line, sel.span.column) == (3, 20)
    assert parse_fragment("25MB", "size_value", "f") == n.Size("25", "MB")


# -------------------------------------------------------------------------
# syntax errors


def test_unexpected_token():
    d = err("schedule s\nwindow A at { }\n")
    assert d.message == "unexpected '{'"
    assert where(d) == (2, 13)
    assert d.notes == ("expected a name",)
    assert str(d.span) == "t.l2s:2:13"


def test_unexpected_token_named_by_the_grammar():
    d = err("schedule s\ntp 4 4\n")
    assert d.message == "unexpected '4'"
    assert where(d) == (2, 6)


def test_unexpected_character():
    d = err("schedule s\nmodel glm5next $\n")
    assert d.message == "unexpected character '$'"
    assert where(d) == (2, 16)
    assert d.notes == ("expected one of: 'device', 'ep', 'kernel', 'max_tokens', 'model', "
                       "'model_config', 'policy', 'set', 'set_aside', 'tp', 'window', "
                       "end of file",)


def test_unexpected_end_of_file_points_past_last_token():
    d = err("schedule s\nwindow A at")
    assert d.message == "unexpected end of file"
    assert where(d) == (2, 12)
    assert d.notes == ("expected a name",)
    d = err("schedule s\nwindow A {\n this a\n\n")
    assert where(d) == (3, 8)
    assert d.notes == ("expected one of: ',', 'except', 'next', 'this', '}'",)


def test_comment_only_file():
    d = err("# nothing but a comment\n")
    assert d.message == "unexpected end of file"
    assert where(d) == (1, 24)
    assert d.notes == ("expected 'schedule'",)


def test_missing_schedule_header():
    d = err("model glm5next\n")
    assert d.message == "unexpected 'model'"
    assert where(d) == (1, 1)
    assert d.notes == ("expected 'schedule'",)


def test_size_with_a_space():
    d = err("schedule s\nwindow A budget 20 MB\n")
    assert d.message == "unexpected 'MB' (write a size without a space, e.g. 20MB)"
    assert where(d) == (2, 20)
    assert (d.span.end_line, d.span.end_column) == (2, 22)


def test_set_without_value_on_its_line():
    d = err("schedule s\nset tp =\nwindow C budget 1MB\n")
    assert d.message == "'set tp =' has no value on its line"
    assert where(d) == (2, 9)
    assert d.source_line == "set tp ="
    d = err("schedule s\nset tp =\n")
    assert d.message == "unexpected end of file"
    assert where(d) == (2, 9)
    assert d.notes == ("expected a value",)


def test_error_rendering_has_caret_and_notes():
    with pytest.raises(L2sSyntaxError) as info:
        parse("schedule s\nwindow A budget 20 MB\n", "t.l2s")
    assert str(info.value).splitlines() == [
        "t.l2s:2:20: unexpected 'MB' (write a size without a space, e.g. 20MB)",
        "    window A budget 20 MB",
        "                       ^^",
        "    note: expected one of: 'at', 'budget', 'carry', 'device', 'ep', "
        "'kernel', 'layers', 'max_tokens', 'model', 'model_config', 'policy', 'set', "
        "'set_aside', 'tp', 'window', '{', end of file"]


def test_line_numbers_count_newlines_only():
    # a form feed is whitespace, not a line break: the caret line is right
    d = err("schedule s\ntp\x0c4\nmodel $\n")
    assert where(d) == (3, 7)
    assert d.source_line == "model $"


def test_fragment_errors():
    with pytest.raises(L2sSyntaxError) as info:
        parse_fragment("20 MB", "size_value", "f", 2, 10)
    (d,) = info.value.diagnostics
    assert d.message == "unexpected 'MB' (write a size without a space, e.g. 20MB)"
    assert where(d) == (2, 13)
    assert d.notes == ("expected the end of the value",)
    with pytest.raises(L2sSyntaxError) as info:
        parse_fragment("kda $", "selector_value", "f")
    assert info.value.diagnostics[0].notes == (
        "expected one of: '&', ',', 'except', the end of the value",)
    with pytest.raises(L2sSyntaxError, match="missing value"):
        parse_fragment("  ", "size_value", "f")


# -------------------------------------------------------------------------
# input errors (one line each, no traceback)


def test_empty_text():
    d = err(" \n\n", L2sInputError)
    assert d.message == "empty schedule file"
    assert str(d.span) == "t.l2s:1:1"


@pytest.mark.parametrize("content,message,pos", [
    (None, "no such file", (1, 1)),
    ("dir", "is a directory, not a schedule file", (1, 1)),
    (b"schedule s\nmodel gl\xffm\n", "not UTF-8 text (byte 0xff at offset 19)", (2, 9)),
    (b"  \n", "empty schedule file", (1, 1)),
    (b"", "empty schedule file", (1, 1)),
])
def test_read_source_errors(tmp_path, content, message, pos):
    path = tmp_path / "x.l2s"
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises(L2sInputError) as info:
        read_source(path)
    (d,) = info.value.diagnostics
    assert d.message == message
    assert (d.span.line, d.span.column) == pos
    assert str(info.value) == f"{path}:{pos[0]}:{pos[1]}: {message}"
    with pytest.raises(L2sInputError):
        parse_file(path)


# -------------------------------------------------------------------------
# keywords are whole words (found by a new-user trial: `thiss`, `tp4` and
# `exceptb` used to lex as keyword + name and parse silently)


@pytest.mark.parametrize("text, pos, message", [
    ("schedule s\nwindow A at h budget 1MB { thiss }\n", (2, 28),
     "unexpected 'thiss'; did you mean 'this'?"),
    ("schedule s\nwindow A at h budget 1MB { nextself_attn.o_proj }\n", (2, 28),
     "unexpected 'nextself_attn.o_proj'; did you mean 'next self_attn.o_proj'?"),
    ("schedule s\ntp4\n", (2, 1), "unexpected 'tp4'; did you mean 'tp 4'?"),
    ("schedule s\nmodelglm5next\n", (2, 1),
     "unexpected 'modelglm5next'; did you mean 'model glm5next'?"),
    ("schedule s\nwindow A at h budget 1MB { this a exceptb }\n", (2, 35),
     "unexpected 'exceptb'; did you mean 'except'?"),
    ("schedule s\npolcy evict_last\n", (2, 1), "unexpected 'polcy'; did you mean 'policy'?"),
    ("schedule s\nwindw A\n", (2, 1), "unexpected 'windw'; did you mean 'window'?"),
])
def test_keywords_are_whole_words(text, pos, message):
    d = err(text)
    assert (where(d), d.message) == (pos, message)


def test_keyword_prefixed_names_still_parse():
    tree = parse("schedule s\nset window.B.budget = 2MB\nwindow thisA at next_hook "
                 "budget 1MB { this this_x, nextish except exception }\n")
    (ov, w) = tree.items
    assert ov.key.text == "window.B.budget"
    assert (w.name.text, w.hook.text) == ("thisA", "next_hook")
    (t,) = w.targets
    assert [p.text for p in t.patterns] == ["this_x", "nextish"]
    assert [p.text for p in t.excludes] == ["exception"]


# -------------------------------------------------------------------------
# line endings, byte-order marks, long lines (attacker findings)

_CR_TEXT = ("# a comment\nschedule s  # name\nmodel glm5next\ndevice h200\n"
            "tp 4\nset tp = 4  # trailing\nwindow B at attn.pre_all_reduce "
            "budget 20MB layers all {\n    this a\n}\n")


@pytest.mark.parametrize("newline", ["\r\n", "\r"])
def test_crlf_and_cr_only_line_endings_parse_like_lf(newline):
    """A CR-only file was one line whose first '#' commented out the rest:
    '1:...: unexpected end of file, expected schedule'."""
    want = parse(_CR_TEXT)
    got = parse(_CR_TEXT.replace("\n", newline))
    assert got == want
    assert [(c.text, c.line, c.column) for c in got.comments] == \
        [(c.text, c.line, c.column) for c in want.comments]
    assert all("\r" not in c.text for c in got.comments)
    assert got.items[-2].value == "4"


@pytest.mark.parametrize("newline", ["\r\n", "\r"])
def test_syntax_error_in_a_cr_file_is_on_its_line(newline):
    text = "schedule s\nmodel glm5next\n  tp @\n".replace("\n", newline)
    d = err(text)
    assert where(d) == (3, 6)
    assert d.render().splitlines()[1] == "      tp @"


def test_check_cr_only_file_reports_the_right_line(tmp_path, capsys):
    from l2sched.cli import main

    p = tmp_path / "cr.l2s"
    p.write_bytes(b"# old Mac file\rschedule s\rmodel glm5next\rdevice h200\r"
                  b"tp 4\rmax_tokens zz\r")
    assert main(["check", str(p)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{p}:6:12: ") and "\n    max_tokens zz\n" in err
    assert "old Mac" not in err


def test_byte_order_mark_is_kept_by_read_source_and_ignored_by_parse(tmp_path):
    p = tmp_path / "bom.l2s"
    p.write_bytes(b"\xef\xbb\xbf" + _CR_TEXT.encode())
    text = read_source(p)
    assert text.startswith("\ufeff")
    assert parse(text) == parse(_CR_TEXT)
    assert where(err("\ufeffschedule s\n  @\n")) == (2, 3)
    with pytest.raises(L2sInputError):
        read_source(_write(tmp_path / "e.l2s", b"\xef\xbb\xbf \n"))


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


def test_a_very_long_source_line_is_cut_around_the_caret():
    """A 400 KB line was echoed in full under the message."""
    text = "schedule s\nmodel " + "a" * 200_000 + " @ " + "b" * 200_000 + "\n"
    d = err(text)
    assert where(d) == (2, 200_008)
    lines = d.render().splitlines()
    echo, caret = lines[1], lines[2]
    assert len(echo) < 220 and echo.startswith("    ...") and echo.endswith("...")
    assert echo[caret.index("^")] == "@"
    short = err("schedule s\nmodel x @\n").render().splitlines()
    assert short[1] == "    model x @" and short[2].index("^") == 12


@pytest.mark.parametrize("column,head,tail", [(1, False, True), (500, True, True),
                                              (1000, True, False)])
def test_long_line_clipping_at_both_ends(column, head, tail):
    from l2sched.errors import Diagnostic, Span

    line = "".join(chr(ord("a") + i % 26) for i in range(1000))
    d = Diagnostic("m", Span("f", 1, column, 1, column + 3), source_line=line)
    _, echo, caret = d.render().splitlines()
    assert echo.startswith("    ...") == head and echo.endswith("...") == tail
    at = caret.index("^")
    assert echo[at:at + 3] == line[column - 1:column + 2]
    assert caret.count("^") == min(3, 1001 - column)


def test_schedule_code_drops_comments_and_blank_lines_but_not_strings():
    from l2sched.lang.syntax import schedule_code
    a = 'schedule "a#b"  # the name\n\n# a note\ntp 4\r\nwindow A at x budget 1MB # y\n'
    b = 'schedule "a#b"\n  tp 4\nwindow A at x budget 1MB'
    assert schedule_code(a) == schedule_code(b) == 'schedule "a#b"\ntp 4\nwindow A at x budget 1MB'
    assert schedule_code(a) != schedule_code(b.replace("1MB", "2MB"))
