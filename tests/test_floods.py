"""Issue 34 item 3: error floods. Human output shows the first
``MAX_PER_KIND`` diagnostics of a kind and counts the rest in one line;
``--format json|sarif`` keep every finding; a long source line is echoed
once for the diagnostics on it; did-you-mean searches over long name lists
stop after ``SPELL_CHECK_LIMIT``. Counts and sizes only, no timings."""

from __future__ import annotations

import json

from l2sched import errors
from l2sched.cli import main
from l2sched.errors import Diagnostic, L2sSemanticError, Span, render_all

HEAD = "schedule flood\n\nmodel glm5next\ndevice h200\ntp 4\n"


def _unmatched(tmp_path, n: int, per_line: int) -> str:
    pats = [f"nomatch_{i}.weight" for i in range(n)]
    lines = [f"    this {', '.join(pats[i:i + per_line])}" for i in range(0, n, per_line)]
    path = tmp_path / "flood.l2s"
    path.write_text(HEAD + "\nwindow P at attn.pre_all_reduce budget 50MB {\n"
                    + "\n".join(lines) + "\n}\n", encoding="utf-8")
    return str(path)


def test_lint_human_caps_a_flood_and_json_keeps_all(tmp_path, capsys):
    path = _unmatched(tmp_path, 500, 500)  # one line of ~10,000 characters
    assert main(["lint", path, "--no-summary"]) == 1
    out = capsys.readouterr().out
    assert out.count("L2S001 target") == errors.MAX_PER_KIND
    assert "... and 480 more like this (L2S001); --format json lists all" in out
    assert out.count("    this nomatch_0.weight") == 1  # the long line echoed once
    assert len(out) < 5000
    assert "500 errors" in out
    assert main(["lint", path, "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert sum(f["code"] == "L2S001" for f in doc["findings"]) == 500
    assert main(["lint", path, "--format", "sarif"]) == 1
    sarif = json.loads(capsys.readouterr().out)
    results = sarif["runs"][0]["results"]  # + L2S112: the profile's unmeasured terms
    assert sum(r["ruleId"] == "L2S001" for r in results) == 500


def test_short_lines_keep_their_caret_under_each_diagnostic(tmp_path, capsys):
    path = _unmatched(tmp_path, 3, 3)
    main(["lint", path, "--no-summary"])
    out = capsys.readouterr().out
    assert out.count("    this nomatch_0.weight, nomatch_1.weight") == 3
    assert "more like this" not in out


def test_check_error_flood_is_capped_per_kind(tmp_path, capsys):
    text = [HEAD]
    for i in range(300):
        text.append(f"window W{i} at attn.pre_allreduce budget 1MB layers {i % 45} "
                    f"carry X{i} {{\n    this self_attn.o_proj\n}}\n")
    path = tmp_path / "w.l2s"
    path.write_text("\n".join(text), encoding="utf-8")
    assert main(["check", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.count("unknown hook point") == 20 + 1  # + the count line
    assert "... and 280 more like this (error: unknown hook point '…')" in err
    assert "... and 280 more like this (error: carry to unknown window '…')" in err
    # the shown carries are within the did-you-mean limit: X10..X19 get one
    # (X0..X9 are too short to be close to W0..W9)
    assert err.count("did you mean 'W") == 10


def test_render_all_groups_by_code_or_message_shape():
    diags = [Diagnostic(f"unknown window 'w{i}'", Span.point("x", i + 1)) for i in range(25)]
    diags += [Diagnostic("budget 3 has no unit", Span.point("x", 1))]
    text = render_all(diags, limit=2)
    assert text.count("unknown window") == 3
    assert "... and 23 more like this (error: unknown window '…')" in text
    assert "budget 3 has no unit" in text
    assert "more like this" not in render_all(diags, limit=None)
    # str(err) is the capped rendering; err.diagnostics keeps all of them
    err = L2sSemanticError(diags)
    assert len(err.diagnostics) == 26 and "... and 5 more" in str(err)


def test_spell_checks_over_long_lists_are_limited():
    names = [f"window_{i}" for i in range(errors.SPELL_LIST + 1)]
    errors.reset_spell_checks()
    got = [errors.closest("window_1x", names) for _ in range(errors.SPELL_CHECK_LIMIT + 5)]
    assert got[:errors.SPELL_CHECK_LIMIT] == ["window_1"] * errors.SPELL_CHECK_LIMIT
    assert got[errors.SPELL_CHECK_LIMIT:] == [None] * 5
    assert errors.closest("hok", ["hook"]) == "hook"  # short lists: always
    # a generator is read only up to SPELL_LIST + 1 names once the limit is spent
    read = []
    gen = (read.append(n) or n for n in names * 10)
    assert errors.closest("window_1x", gen) is None
    assert len(read) == errors.SPELL_LIST + 1
    errors.reset_spell_checks()
    assert errors.closest("window_1x", names) == "window_1"


def test_literal_patterns_match_as_globs_do():
    from l2sched.compiler.compile import PathIndex, pattern_matches, pattern_regex
    paths = ["self_attn.o_proj.weight", "self_attn.o_projx.weight", "mlp.gate.weight",
             "a.b"]
    index = PathIndex(tuple(paths))
    for pat in ("self_attn.o_proj", "self_attn.o_proj.weight", "self_attn", "mlp.gate",
                "o_proj", "a.b", "a", "self_attn.o_proj*", "mlp.?ate", "*", "*.weight",
                "[ms]*", "self_attn.o_proj[x]*", "a?b", "zzz*"):
        got = index.matching(pat)
        for i, p in enumerate(paths):
            want = pattern_regex(pat).match(p) is not None
            assert pattern_matches(pat, p) == want, (pat, p)
            assert (i in got) == want, (pat, p)
            assert (i in index.indices((pat, "zzz"))) == want, (pat, p)
