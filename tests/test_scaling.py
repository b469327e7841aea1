"""Issue 17, item 18: check, compile and lint stay near-linear in the number
of windows and target patterns. No timings here (benchmarks/scaling.py
measures the curve): the tests count the work that used to grow faster than
the input, and check the progress display's logic."""

from __future__ import annotations

import gc
import io
import sys
from pathlib import Path

import pytest

from l2sched.compiler import compile as compile_mod
from l2sched.lang.resolve import load_schedule_text
from l2sched.lint import run_lint
from l2sched.model.config import load_model_config
from l2sched.model.inventory import analytical_inventory

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import scaling  # noqa: E402


@pytest.fixture(scope="module")
def inv():
    return analytical_inventory(load_model_config(None), 4, False)


def _counting(monkeypatch, module, name):
    calls = [0]
    real = getattr(module, name)

    def counted(*a, **kw):
        calls[0] += 1
        return real(*a, **kw)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_item18_pattern_work_is_linear_in_patterns_not_times_layers(monkeypatch, inv):
    """One window with 20,000 patterns took 53 s (2,000: 1.8 s): every
    pattern was matched against every tensor of every one of the 45 layers,
    through a (pattern, path) cache too small to hold them. Targets are now
    expanded once per window and pair of layer contents, and each pattern
    compiles once."""
    work = {}
    for n in (200, 400):
        s = load_schedule_text(scaling.patterns_schedule(n), "p.l2s")
        calls = _counting(monkeypatch, compile_mod, "expand_targets")
        compile_mod.compile_plan(s, inv)
        run_lint(s, inv)
        work[n] = calls[0]
        monkeypatch.undo()
    # compile, the lint's own compile and its L2S002 check each expand the
    # 45-layer window once per distinct pair of (this layer, next layer)
    # contents: 6 pairs in GLM-5.3-Flash, not 45 layers
    assert work[200] == work[400] <= 3 * 6


def test_item18_window_work_is_linear_in_windows(monkeypatch, inv):
    """20,000 windows took 94 s in lint: each finding split the whole
    schedule text into lines again and looked its window up by a scan over
    all windows, and L2S002 spans scanned every window's targets. Now the
    lines are split once per text and windows are found by name."""
    from l2sched.lint.rules import base

    counts = {}
    for n in (300, 600):
        s = load_schedule_text(scaling.windows_schedule(n), "w.l2s")
        if hasattr(base, "_lines"):
            base._lines.cache_clear()
        splits = _counting(monkeypatch, base, "source_lines")
        run = run_lint(s, inv)
        counts[n] = (splits[0], len(run.findings))
        monkeypatch.undo()
    (s300, f300), (s600, f600) = counts[300], counts[600]
    assert f600 > f300 > 100  # many findings (L2S002, L2S201 ...)
    assert s300 <= 2 and s600 <= 2  # one split per source text, not per finding
    s = load_schedule_text(scaling.windows_schedule(50), "w.l2s")
    assert s.window("W49") is s.windows_by_name["W49"]


def test_item18_cli_pauses_the_cyclic_gc_and_shows_slow_stages(monkeypatch, capsys):
    """The cyclic collector made a 20,000-window run 1.6-2x slower per window
    (benchmarks/scaling.py): it is paused while a command runs and restored
    after. The stages report what they do; a slow command shows them on
    stderr (plain lines here; a rich status on a terminal)."""
    from l2sched import progress
    from l2sched.cli import check, main

    seen = {}
    real = check.cmd_check

    def spy(args):
        seen["gc"] = gc.isenabled()
        return real(args)

    monkeypatch.setattr(check, "cmd_check", spy)  # registered per main() call
    assert gc.isenabled()
    assert main(["check", str(ROOT / "schedules" / "glm53-flash-h200-tp4.l2s")]) == 0
    assert seen["gc"] is False and gc.isenabled()
    capsys.readouterr()
    # the ticker: nothing before AFTER_S, then one line per stage change,
    # and again after EVERY_S for a long stage
    t = progress.Ticker("l2sched lint", start=100.0, after=2.0, every=5.0)
    assert t.line(101.0, "parsing x.l2s") is None
    assert t.line(102.5, "parsing x.l2s") == "l2sched lint: parsing x.l2s (2.5 s)"
    assert t.line(103.0, "parsing x.l2s") is None
    assert t.line(103.5, "compiling 20,000 windows over 45 layers") == \
        "l2sched lint: compiling 20,000 windows over 45 layers (3.5 s)"
    assert t.line(108.6, "compiling 20,000 windows over 45 layers").endswith("(8.6 s)")
    # stages recorded by the pipeline, in order
    stages = []
    monkeypatch.setattr(progress, "_stage", "")
    real_stage = progress.stage
    monkeypatch.setattr(progress, "stage", lambda text: (stages.append(text),
                                                         real_stage(text)))
    main(["lint", str(ROOT / "schedules" / "glm53-flash-h200-tp4.l2s"), "--no-summary"])
    capsys.readouterr()
    assert [s.split(" ")[0] for s in stages if s] == [
        "reading", "resolving", "compiling", "building", "simulating", "simulating",
        "checking", "writing"]
    # off unless stderr is a terminal or L2SCHED_PROGRESS=1
    monkeypatch.delenv("L2SCHED_PROGRESS", raising=False)
    assert not progress.enabled(io.StringIO())
    monkeypatch.setenv("L2SCHED_PROGRESS", "1")
    assert progress.enabled(io.StringIO())

