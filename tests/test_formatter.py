"""Formatter tests: the canonical layout, comments kept, meaning kept, and the
shipped schedules already canonical."""

from __future__ import annotations

from pathlib import Path

import pytest

from l2sched.errors import L2sSyntaxError
from l2sched.lang.formatter import format_file, format_selector, format_text
from l2sched.lang.syntax import parse

SHIPPED = sorted((Path(__file__).resolve().parent.parent / "schedules").glob("*.l2s"))

MESSY = """\
# top comment
schedule   s   # name
model glm5next
device   h200
tp
   4
set window.B.budget =   25MB   # cut
window B carry C layers kda&moe,(mla except 3)   at attn.pre_all_reduce budget 50MB{
this a,b # first
  # own line
next lazy self_attn.* except self_attn.o_proj}
window C at moe.pre_all_reduce budget 15MB layers moe
"""

CANONICAL = """\
# top comment
schedule s  # name

model glm5next
device h200
tp 4

set window.B.budget = 25MB  # cut

window B at attn.pre_all_reduce budget 50MB layers kda & moe, (mla except 3) carry C {
    this a, b  # first
    # own line
    next lazy self_attn.* except self_attn.o_proj
}

window C at moe.pre_all_reduce budget 15MB layers moe
"""


def test_canonical_layout():
    assert format_text(MESSY) == CANONICAL
    assert parse(CANONICAL) == parse(MESSY)


def test_idempotent():
    assert format_text(CANONICAL) == CANONICAL


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_schedules_are_canonical(path):
    text = path.read_text("utf-8")
    assert format_text(text) == text
    assert parse(format_text(text)) == parse(text)


def test_schedule_name_quoted_only_when_needed():
    assert format_text('schedule "plain-name.v2"\n') == "schedule plain-name.v2\n"
    assert format_text('schedule "a b"\n') == 'schedule "a b"\n'
    assert format_text('schedule "window"\n') == 'schedule "window"\n'


def test_selector_parentheses_kept_where_needed():
    """Only where they change the meaning (issue 43: ``layers (moe)`` kept
    its parentheses): ``(5, 6)`` in a union and ``except (7)`` are not."""
    tree = parse("schedule s\nwindow A layers (kda except 3), 4, (5, 6) except (7)\n")
    assert format_selector(tree.windows[0].layers) == "(kda except 3), 4, 5, 6 except 7"
    out = format_file(tree)
    assert parse(out) == tree


def test_comments_inside_a_window_head_stay_on_their_line():
    """Issue 43: a comment inside a window head written over several lines
    stays after its clause (the head keeps its line breaks); one inside
    another statement written over several lines moves above it."""
    assert format_text("schedule s\nwindow A at x # h\n budget 1MB { # b\n this a\n} # c\n") \
        == "schedule s\n\nwindow A at x  # h\n    budget 1MB {  # b\n    this a\n}  # c\n"
    assert format_text("schedule s\nset_aside # s\n 40MB\n") == \
        "schedule s\n\n# s\nset_aside 40MB\n"


def test_own_line_comments_in_body_stay():
    text = "schedule s\nwindow A at x budget 1MB {\n  # c1\n  # c2\n  this a\n}\n"
    assert format_text(text) == ("schedule s\n\nwindow A at x budget 1MB {\n"
                                 "    # c1\n    # c2\n    this a\n}\n")


def test_empty_body_and_no_body():
    assert format_text("schedule s\nwindow A {}\nwindow B\n") == \
        "schedule s\n\nwindow A {\n}\n\nwindow B\n"


def test_refuses_invalid_input():
    with pytest.raises(L2sSyntaxError):
        format_text("schedule s\nwindow A budget 20 MB\n")


# -------------------------------------------------------------------------
# line endings and byte-order marks (attacker findings)


def test_crlf_file_stays_crlf_on_every_line():
    """A CRLF file came out with comment lines ending in \\r\\n, statement
    lines in \\n and a trailing comment keeping its \\r."""
    text = MESSY.replace("\n", "\r\n")
    out = format_text(text)
    assert out == CANONICAL.replace("\n", "\r\n")
    assert "\r\r" not in out and out.count("\n") == out.count("\r\n")
    assert format_text(out) == out


def test_mixed_line_endings_take_the_dominant_one():
    lf_mostly = CANONICAL.replace("\n", "\r\n", 2)
    assert format_text(lf_mostly) == CANONICAL
    crlf_mostly = CANONICAL.replace("\n", "\r\n").replace("\r\n", "\n", 2)
    assert format_text(crlf_mostly) == CANONICAL.replace("\n", "\r\n")


def test_cr_only_file_is_rewritten_with_lf():
    assert format_text(CANONICAL.replace("\n", "\r")) == CANONICAL


def test_byte_order_mark_is_kept():
    assert format_text("\ufeff" + MESSY) == "\ufeff" + CANONICAL
    assert format_text("\ufeff" + CANONICAL) == "\ufeff" + CANONICAL


def test_fmt_check_flags_a_file_whose_line_endings_would_change(tmp_path, capsys):
    from l2sched.cli import main

    mixed = tmp_path / "mixed.l2s"
    mixed.write_bytes(CANONICAL.replace("\n", "\r\n").replace("\r\n", "\n", 3)
                      .encode())
    assert main(["fmt", "--check", str(mixed)]) == 1
    assert "would reformat" in capsys.readouterr().out
    assert main(["fmt", str(mixed)]) == 0
    assert mixed.read_bytes() == CANONICAL.replace("\n", "\r\n").encode()
    assert main(["fmt", "--check", str(mixed)]) == 0
    bom = tmp_path / "bom.l2s"
    bom.write_bytes(b"\xef\xbb\xbf" + MESSY.encode())
    assert main(["fmt", str(bom)]) == 0
    assert bom.read_bytes() == b"\xef\xbb\xbf" + CANONICAL.encode()
    assert main(["fmt", "--check", str(bom)]) == 0
    assert main(["check", str(bom)]) == 0
