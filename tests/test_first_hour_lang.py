"""Issue 43, "a new user's first hour": the language, lint and compile
faults, each a test named after its kind (``test_issue43_*``)."""

from __future__ import annotations

import pytest

from l2sched.cli import main
from l2sched.errors import L2sSyntaxError
from l2sched.lang.syntax import parse


def _syntax_error(text: str):
    with pytest.raises(L2sSyntaxError) as info:
        parse(text, "t.l2s")
    (d,) = info.value.diagnostics
    return d


def test_issue43_unterminated_string_is_named_at_its_opening_quote(tmp_path, capsys):
    """``device "profiles/gb10.toml`` with no closing quote was reported as
    ``unexpected character '"'`` with a note that a string was expected."""
    d = _syntax_error('schedule x\nmodel glm5next\ndevice "profiles/gb10.toml\ntp 4\n')
    assert d.message == "unterminated string"
    assert (d.span.line, d.span.column) == (3, 8)  # the opening quote
    assert d.span.end_column == 8 + len('"profiles/gb10.toml')
    assert d.notes == ('add the closing quote: "profiles/gb10.toml"',)
    # the same in a header, an `extends`, a `set` value and a --set
    assert _syntax_error('schedule "abc\n').message == "unterminated string"
    d = _syntax_error('schedule a\nextends "base.l2s  \n')
    assert (d.message, d.span.column, d.notes) == (
        "unterminated string", 9, ('add the closing quote: "base.l2s"',))
    bad = tmp_path / "bad.l2s"
    bad.write_text('schedule x\nmodel glm5next\ndevice h200\ntp 4\nset device = "abc\n')
    assert main(["check", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f'{bad}:5:14: unterminated string\n' in err
    assert 'note: add the closing quote: "abc"' in err
    # where no string can go, closing it is not the fix
    d = _syntax_error('schedule x\nwindow A at "foo budget 1MB\n')
    assert (d.message, d.span.column) == ("unterminated string", 13)
    assert d.notes == ("remove the quote: a string cannot go here", "expected a name")
    # a closed string where none can go is an unexpected string, as before
    assert _syntax_error('schedule x\nwindow A at "foo"\n').message == "unexpected '\"foo\"'"
