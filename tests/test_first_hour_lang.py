"""Issue 43, "a new user's first hour": the language, lint and compile
faults, each a test named after its kind (``test_issue43_*``)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from l2sched.cli import main
from l2sched.errors import L2sSyntaxError
from l2sched.lang.syntax import parse

ROOT = Path(__file__).resolve().parent.parent


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


# --- a schedule names its model config ------------------------------------

QWEN235 = ROOT / "schedules" / "qwen3-235b-a22b-sm120-tp4-fit.l2s"
A22B = ROOT / "l2sched" / "data" / "qwen3-235b-a22b-config.json"


def _lint_json(capsys, *argv) -> dict:
    assert main(["lint", *argv, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_issue43_a_schedule_names_its_model_config_and_lint_says_which(tmp_path,
                                                                       capsys):
    """The shipped Qwen3-235B schedule was linted against the embedded 30B
    config with no note (a 7,051 us step against 18,324 us with
    ``--model-config`` naming the 235B config). It names its config now,
    every command uses it, and check/lint say which config they used."""
    assert "\nmodel_config qwen3-235b-a22b\n" in QWEN235.read_text("utf-8")
    doc = _lint_json(capsys, str(QWEN235))
    assert doc["model_config"] == {
        "name": "qwen3-235b-a22b", "path": "l2sched/data/qwen3-235b-a22b-config.json",
        "origin": "schedule", "replaced": None, "differs": []}
    # the same step as with the 235B config given on the command line
    given = _lint_json(capsys, str(QWEN235), "--model-config", str(A22B))
    assert given["step_us"] == doc["step_us"]
    assert given["model_config"]["origin"] == "--model-config"
    # --model-config takes the line's place, and says so
    other = _lint_json(capsys, str(QWEN235), "--model-config", "qwen3-30b-a3b")
    assert other["step_us"]["without_prefetch"] < doc["step_us"]["without_prefetch"]
    assert other["model_config"]["replaced"] == "qwen3-235b-a22b"
    assert "num_hidden_layers" in other["model_config"]["differs"]
    line = "model config: qwen3-235b-a22b (l2sched/data/qwen3-235b-a22b-config.json)"
    assert main(["lint", str(QWEN235)]) == 0
    assert line + "\n" in capsys.readouterr().out
    assert main(["check", str(QWEN235)]) == 0
    assert f"  {line}\n" in capsys.readouterr().out
    # without the line: the embedded config, named as the model's default
    hand = ROOT / "schedules" / "qwen3-30b-a3b-h200-tp1.l2s"
    assert main(["check", str(hand)]) == 0
    assert ("  model config: qwen3-30b-a3b (l2sched/data/qwen3-30b-a3b-config.json), "
            "the default of qwen3_moe\n") in capsys.readouterr().out
    # compile records it in the plan; explain reads the plan with it
    plan = tmp_path / "plan.json"
    assert main(["compile", str(QWEN235), "-o", str(plan)]) == 0
    got = json.loads(plan.read_text("utf-8"))
    assert got["meta"] == {"model_config": "qwen3-235b-a22b"}
    assert got["num_layers"] == 94
    assert main(["explain", str(plan)]) == 0
    assert main(["inventory", "--model-config", "qwen3-235b-a22b"]) == 0
    assert "94 decoder layers" in capsys.readouterr().out


def test_issue43_model_config_names_are_checked_at_their_span(tmp_path, capsys):
    """An unknown name is an error at its value listing the shipped ones; a
    file is relative to the schedule; another model's config is refused."""
    head = "schedule x\n\nmodel qwen3_moe\ndevice h200\ntp 4\n"
    bad = tmp_path / "bad.l2s"
    bad.write_text(head + "model_config qwen3-235b\n")
    assert main(["check", str(bad)]) == 1
    err = capsys.readouterr().err
    assert (f"{bad}:6:14: unknown model config 'qwen3-235b'; did you mean "
            "'qwen3-235b-a22b'? (shipped: deepseek-v4-flash, glm53-flash, "
            "qwen3-235b-a22b, qwen3-30b-a3b; "
            'or a file: model_config "config.json")') in err
    bad.write_text(head + "model_config glm53-flash\n")
    assert main(["check", str(bad)]) == 1
    assert (f"{bad}:6:14: model config 'glm53-flash' is a config of model glm5next, "
            "the schedule's model is qwen3_moe") in capsys.readouterr().err
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(A22B.read_text("utf-8"))
    good = tmp_path / "good.l2s"
    good.write_text(head + 'model_config "m/config.json"\n')
    assert main(["check", str(good)]) == 0
    assert (f"  model config: m/config.json ({tmp_path}/m/config.json)\n"
            in capsys.readouterr().out)
    # fmt keeps it; --set and `set` lines may change it
    assert main(["fmt", "--check", str(good)]) == 0
    assert main(["check", str(good), "--set", "model_config=qwen3-30b-a3b"]) == 0
    assert "model config: qwen3-30b-a3b (" in capsys.readouterr().out


def test_issue43_fit_writes_the_model_config_it_fitted_for(tmp_path, capsys):
    """``fit --model-config`` names the config in the fitted schedule (a
    shipped name, else the path relative to the output), so ``lint`` of
    the output uses the model it was fitted for."""
    (tmp_path / "cfg").mkdir()
    cfg = tmp_path / "cfg" / "config.json"
    cfg.write_text(A22B.read_text("utf-8"))
    out = tmp_path / "out" / "fit.l2s"
    out.parent.mkdir()
    assert main(["fit", "--device", "h200", "--tp", "4", "--tokens", "1", "--quick",
                 "-q", "--model-config", str(cfg), "-o", str(out)]) == 0
    text = out.read_text("utf-8")
    assert '\nmodel_config "../cfg/config.json"\n' in text
    doc = _lint_json(capsys, str(out))
    assert doc["model_config"]["origin"] == "schedule"
    assert main(["compile", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["num_layers"] == 94


def _plugin_rank(ctx) -> dict:
    """The plugin's post-load step on the real tiny Qwen3-MoE tree (TP1,
    dry-run) with a schedule naming the 235B config, then one naming a
    config equal to the live model's."""
    import json as _json
    import tempfile

    import test_qwen3_moe_vllm as qv
    from vllm_cpu import plugin_log_records

    from l2sched.vllm import plugin

    model = ctx.build()
    out = {}
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "tiny.json"), "w") as f:
            _json.dump({"architectures": [qv.ARCH], **qv.TINY}, f)
        for case, line in (("other", "model_config qwen3-235b-a22b"),
                           ("same", 'model_config "tiny.json"')):
            path = os.path.join(d, f"{case}.l2s")
            with open(path, "w") as f:
                f.write(f"schedule {case}\nmodel qwen3_moe\n{line}\ndevice h200\ntp 1\n"
                        "window A at attn.before_core budget 1MB {\n"
                        "    this self_attn.o_proj\n}\n")
            ctx.vllm_config.additional_config = {"l2sched": {
                "schedule": path, "backend": "dry-run", "lint": "warn"}}
            records = plugin_log_records()
            got = plugin.activate_after_load(model, ctx.vllm_config)
            out[case] = {"installed": got is not None, "records": list(records)}
            if got is not None:
                got.retire()
            plugin.INSTALLED.clear()
    return out


@pytest.mark.vllm
def test_issue43_the_plugin_refuses_a_schedule_for_another_model_config():
    """The plugin compiles against the live model's config; a schedule whose
    ``model_config`` names another model (the 235B config on a tiny
    Qwen3-MoE) keeps prefetch off with one line naming both, and one naming
    a config equal to the live model's installs."""
    import test_qwen3_moe_vllm as qv
    from vllm_cpu import run_ranks, vllm_available

    ok, why = vllm_available()
    if not ok:
        pytest.skip(why)
    (r,) = run_ranks(_plugin_rank, qv.TINY, tp=1, device="cpu", timeout=600,
                     architecture=qv.ARCH)
    off = [x for x in r["other"]["records"] if "prefetch OFF" in x]
    assert off == [
        "ERROR l2sched: TP rank 0/1: prefetch OFF: schedule/model mismatch: other "
        "names model config qwen3-235b-a22b, this server's model differs from it in "
        "hidden_size, intermediate_size, moe_intermediate_size, num_hidden_layers, "
        "num_attention_heads, num_key_value_heads, num_experts, num_experts_per_tok "
        "(remove the schedule's "
        "model_config line to use it with this model, or serve the model it names)"], \
        r["other"]["records"]
    assert not r["other"]["installed"]
    assert r["same"]["installed"], r["same"]["records"]
    assert not [x for x in r["same"]["records"] if "prefetch OFF" in x]


# --- a window that fetches nothing ----------------------------------------

def test_issue43_a_window_that_fetches_nothing_is_a_lint_error(tmp_path, capsys):
    """A 1 B budget, or an empty body with nothing carried in, passed lint
    with exit 0 and info lines only (``compile`` explained it): now L2S007,
    an error at the budget / the window's name. A budget of 0 (a variant's
    way to switch a window off) is not reported."""
    path = tmp_path / "empty.l2s"
    path.write_text("schedule x\n\nmodel glm5next\ndevice h200\ntp 4\n\n"
                    "window A at attn.pre_all_reduce budget 1B layers moe {\n"
                    "    this self_attn.o_proj\n}\n\n"
                    "window B at moe.pre_all_reduce budget 10MB layers moe {\n}\n")
    assert main(["lint", str(path), "--select", "L2S007", "--no-summary"]) == 1
    out = capsys.readouterr().out
    assert (f"{path}:7:40: error: L2S007 window 'A' (budget 1 B) fetches nothing in "
            "any of the 42 layers it fires in: its budget holds no whole tensor and no "
            "4 KiB head of one\n") in out
    assert (f"{path}:11:8: error: L2S007 window 'B' (budget 10.00 MB) fetches nothing "
            "in any of the 42 layers it fires in: it has no targets and nothing was "
            "carried into it\n") in out
    assert out.count("L2S007") == 2
    # switched off in a variant: no finding; a shipped schedule has none
    h200 = str(ROOT / "schedules" / "glm53-flash-h200-tp4.l2s")
    assert main(["lint", h200, "--set", "window.A.budget=0MB", "--select", "L2S007",
                 "--no-summary"]) == 0
    assert "L2S007" not in capsys.readouterr().out
    # carried into: B fetches what A's budget left over
    path.write_text(path.read_text().replace("budget 1B layers moe", "budget 1MB layers "
                                             "moe carry B"))
    assert main(["lint", str(path), "--select", "L2S007", "--no-summary"]) == 0
    assert "L2S007" not in capsys.readouterr().out


# --- unmatched target patterns cost a lookup each ---------------------------

def _unmatched_targets(n: int) -> str:
    """One window of ``n`` one-pattern targets that match nothing, half
    literal names, half globs (``benchmarks/floods.py``'s ``targets`` and
    ``target-globs`` cases)."""
    lines = [f"    this nomatch_{i}.weight" if i % 2 else f"    this nomatch_{i}.*"
             for i in range(n)]
    return ("schedule flood\n\nmodel glm5next\ndevice h200\ntp 4\n\n"
            "window P at attn.pre_all_reduce budget 50MB {\n" + "\n".join(lines) + "\n}\n")


def test_issue43_unmatched_patterns_cost_no_match_per_tensor(monkeypatch):
    """20,000 unmatched one-pattern targets took 9.5 s and 50,000 23.7 s:
    every target was matched against every tensor of its layers (a
    ``module_prefixes`` per tensor and target) and every glob compiled to a
    regex. Now a literal is one lookup and a glob is tried only on the
    tensors that start with its text before the first glob character: the
    work per tensor does not grow with the patterns that miss. Counts, no
    timings (benchmarks/floods.py times it)."""
    from l2sched.compiler import compile as compile_mod
    from l2sched.lang.resolve import load_schedule_text
    from l2sched.lint import run_lint
    from l2sched.lint.rules import targets as targets_mod
    from l2sched.model.config import load_model_config
    from l2sched.model.inventory import analytical_inventory

    inv = analytical_inventory(load_model_config(None), 4, False)
    work = {}
    for n in (400, 800):
        s = load_schedule_text(_unmatched_targets(n), "flood.l2s")
        counts = {"module_prefixes": 0, "pattern_regex": 0}
        for module in (compile_mod, targets_mod):
            for name in counts:
                real = getattr(module, name, None)
                if real is None:
                    continue

                def counted(*a, _real=real, _name=name, **kw):
                    counts[_name] += 1
                    return _real(*a, **kw)
                monkeypatch.setattr(module, name, counted)
        if hasattr(compile_mod, "path_index"):  # index the paths afresh
            compile_mod.path_index.cache_clear()
        run = run_lint(s, inv)
        monkeypatch.undo()
        assert sum(f.code == "L2S001" for f in run.findings) == n
        work[n] = counts
    # the tensor paths are indexed once per distinct layer (a few hundred
    # module prefixes), whatever the number of patterns
    assert work[400]["module_prefixes"] == work[800]["module_prefixes"] < 2000
    # no glob here can match (no tensor path starts with 'nomatch_'): none
    # is compiled
    assert work[400]["pattern_regex"] == work[800]["pattern_regex"] == 0


# --- explain is linear in a plan's issues -----------------------------------

class _CountingLineEnds:
    """``errors._LINE_END`` that counts the line ends its ``finditer``
    yields: the work of turning offsets into line numbers."""

    def __init__(self, real):
        self.real, self.seen = real, 0

    def finditer(self, *a, **kw):
        for m in self.real.finditer(*a, **kw):
            self.seen += 1
            yield m

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_issue43_explain_is_linear_in_duplicated_issues(tmp_path, monkeypatch):
    """10 copies of a plan's issues took 6.9 s, 20 took 25 s and 200 did not
    finish in 60 s (``explain PLAN``): each of the problems (an issue written
    twice, bytes fetched twice) found its line by scanning the file from its
    start. Now the line starts are found once. Counts, no timings: the line
    ends scanned grow with the file, not with problems x file."""
    from l2sched import errors
    from l2sched.compiler.plan import Plan
    from l2sched.errors import L2sInputError

    plan = tmp_path / "plan.json"
    assert main(["compile", str(ROOT / "schedules" / "glm53-flash-h200-tp4.l2s"),
                 "-o", str(plan)]) == 0
    doc = json.loads(plan.read_text("utf-8"))
    n = len(doc["issues"])
    scanned, lines = {}, {}
    for k in (2, 4):
        text = json.dumps({**doc, "issues": doc["issues"] * k}, indent=1)
        lines[k] = text.count("\n")
        counter = _CountingLineEnds(errors._LINE_END)
        monkeypatch.setattr(errors, "_LINE_END", counter)
        with pytest.raises(L2sInputError) as info:
            Plan.from_json(text, "plan.json")
        monkeypatch.undo()
        scanned[k] = counter.seen
        # every copied issue is reported, at its own line
        dups = [d for d in info.value.diagnostics if ": duplicates issues[" in d.message]
        assert len(dups) == n * (k - 1)
        last = dups[-1]
        assert last.message.startswith(f"issues[{n * k - 1}]: duplicates issues[")
        want = text.count("\n", 0, _nth_issue_start(text, n * k - 1)) + 1
        assert last.span.line == want
    # twice the issues, twice the scanning, not four times
    assert scanned[4] <= 2.5 * scanned[2], scanned
    assert scanned[4] <= 2 * lines[4], (scanned, lines)


def _nth_issue_start(text: str, i: int) -> int:
    """The offset of the ``{`` that opens issue ``i`` of a plan written by
    ``json.dumps(..., indent=1)`` (each issue opens on a line of its own)."""
    at = text.index('"issues": [')
    for _ in range(i + 1):
        at = text.index("\n  {", at + 1)
    return at + 3


# --- one layer count everywhere, the layers named ----------------------------

def test_issue43_check_compile_and_lint_count_the_same_layers(tmp_path, capsys):
    """A window that only takes carried bytes (C, with B's budget raised so
    that nothing is left to carry in some layers): lint's table said C
    covers 21 kda+moe layers where check and compile say 31, and did not
    say which layers its rows cover. Now every table counts the layers the
    window fires in, lint adds its fills, says what the columns cover and
    names the layers where the window fetches nothing."""
    h200 = str(ROOT / "schedules" / "glm53-flash-h200-tp4.l2s")
    opts = ["--set", "window.B.budget=55MB"]
    assert main(["check", h200, *opts]) == 0
    row = [ln for ln in capsys.readouterr().out.splitlines() if ln.split()[:1] == ["C"]]
    assert "31 kda+moe, 11 mla+moe" in row[0]
    assert main(["compile", h200, *opts, "-o", str(tmp_path / "p.json")]) == 0
    out = capsys.readouterr().out
    compiled = {tuple(ln.split()[:2]): ln.split()[2] for ln in out.splitlines()
                if ln.startswith(("kda+", "mla+"))}
    assert compiled[("kda+moe", "C")] == "31" and compiled[("mla+moe", "C")] == "11"
    doc = _lint_json(capsys, h200, *opts)
    rows = {(r["layer kind"], r["window"]): r for r in doc["summary"]}
    assert {k: r["layers"] for k, r in rows.items()} == compiled
    assert rows[("kda+moe", "C")]["fills"] == "21"
    assert main(["lint", h200, *opts]) == 0
    out = capsys.readouterr().out
    assert ("per layer kind and window; layers: where it fires (as check and compile "
            "count them), fills: where it fetches bytes; the other columns: means over "
            "its fills\n") in out
    assert ("window 'C' fetches 0 B where it fires in kda+moe layers 6, 10, 14, 18, 22, "
            "26, 30, 34, 38, 42: it has no targets and nothing was carried into it\n") in out


# --- fmt: the canonical selector, comments where they were -------------------

def test_issue43_fmt_prints_selectors_canonically_and_keeps_head_comments(tmp_path,
                                                                          capsys):
    """``fmt`` kept ``layers (moe)``'s parentheses, and moved the comments of
    a window head written over several lines above the window. Now
    parentheses that change nothing go, a commented head keeps its line
    breaks with each comment after its clause, fmt is idempotent and every
    comment is kept (a ``#`` inside a string is no comment: fmt added one)."""
    from l2sched.lang.formatter import format_text

    head = "schedule s\n\nmodel glm5next\ndevice h200\ntp 4\n\n"
    path = tmp_path / "s.l2s"
    path.write_text(head + "window A at attn.pre_all_reduce budget 1MB "
                    "layers ((moe)) except (3, 4)\n")
    assert main(["fmt", str(path)]) == 0
    assert path.read_text().endswith(" layers moe except 3, 4\n")
    kept = head + "window A at attn.pre_all_reduce budget 1MB layers (moe except 3) & kda\n"
    assert format_text(kept) == kept  # parentheses that change the meaning stay
    commented = (head + "window A  # the MLA layers' window\n"
                 "    at attn.pre_all_reduce  # after the output projection\n"
                 "    budget 30MB\n"
                 "    # the layers: every MoE layer\n"
                 "    layers moe {  # targets follow\n"
                 "    this self_attn.o_proj  # 4 MB\n}\n")
    assert format_text(commented) == commented
    moved = commented.replace("    at attn", "  at attn").replace("    budget", " budget")
    assert format_text(moved) == commented
    quoted = 'schedule "a#b"\n\nmodel glm5next  # m\n'
    assert format_text(quoted) == quoted
    assert format_text(format_text(quoted)) == quoted


# --- the keyword lists -------------------------------------------------------

def test_issue43_docs_list_every_keyword_and_key(tmp_path, capsys, monkeypatch):
    """``kernel`` was missing from docs/language.md's keyword list (and the
    `set` keys). The lists are the grammar's keywords
    (``syntax.keywords``, what the formatter quotes names against) and the
    language's setting and window keys; the quoted syntax error is what the
    tool prints."""
    import re

    from l2sched.lang.schedule import SETTING_KEYS, WINDOW_KEYS

    doc = (ROOT / "docs" / "language.md").read_text("utf-8")
    bullet = re.search(r"^- Keywords: (.*?)\n(?=- )", doc, re.S | re.M).group(1)
    listed = re.findall(r"`([^`]+)`", bullet)
    words, settings = listed[0].split(), listed[1].split()
    grammar = (ROOT / "grammar" / "l2s.lark").read_text("utf-8")
    spelled = sorted(set(re.findall(r'"([a-z][a-z_]*)"', grammar)))
    assert sorted(set(words) | set(settings)) == spelled
    from l2sched.lang.syntax import keywords  # what the formatter quotes against
    assert list(keywords()) == spelled
    assert tuple(settings) == SETTING_KEYS
    keys = re.search(r"Keys: every setting key\n(.*?)\. The value", doc, re.S).group(1)
    assert re.findall(r"`(\w+)`", keys.split(" and ")[0]) == list(SETTING_KEYS)
    assert sorted(re.findall(r"`window\.NAME\.(\w+)`", keys)) == sorted(WINDOW_KEYS)
    # the syntax error the section quotes is what check prints
    block = re.search(r"```\n(t\.l2s:2:20: .*?)```", doc, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.l2s").write_text("schedule s\nwindow A budget 20 MB\n")
    assert main(["check", "t.l2s"]) == 1
    assert capsys.readouterr().err.startswith(block)
