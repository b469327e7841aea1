"""Byte-for-byte golden outputs of the CLI commands other than ``lint``
(``check``, ``inventory``, ``compile``'s plan.json and table, ``explain``),
so that a refactoring that changes any of them is caught.

``tests/data/cli-golden/CASE.out`` holds the exact stdout, a line
``--- stderr ---``, the exact stderr and a line ``--- exit N ---`` of
``l2sched ARGS`` run from the repository root. When a change is *meant* to
alter an output, regenerate and review the diff::

    L2SCHED_UPDATE_GOLDEN=1 python3 -m pytest -q tests/test_cli_golden.py
    git diff tests/data/cli-golden/
"""

from __future__ import annotations

import contextlib
import io

import pytest
from test_lint_golden import ROOT, SCHEDULES, _check

from l2sched.cli import main

GOLDEN = ROOT / "tests" / "data" / "cli-golden"
BENCH_SCHEDULES = sorted(p.stem for p in (ROOT / "schedules" / "bench").glob("*.l2s"))

#: case name -> ``l2sched`` arguments (paths relative to the root).
CASES: dict[str, list[str]] = {
    "check.shipped": ["check"] + [f"schedules/{s}.l2s" for s in SCHEDULES],
    "check.bench": ["check"] + [f"schedules/bench/{s}.l2s" for s in BENCH_SCHEDULES],
    "check.set": ["check", "schedules/glm53-flash-h200-tp4.l2s", "--set",
                  "window.B.budget=25MB", "--set", "policy=evict_normal"],
    "inventory.tp1": ["inventory"],
    "inventory.tp4": ["inventory", "--tp", "4"],
    "inventory.tp4-ep": ["inventory", "--tp", "4", "--ep"],
    "inventory.tp4.json": ["inventory", "--tp", "4", "--json"],
    "inventory.tp4-ep-rank3.json": ["inventory", "--tp", "4", "--ep", "--tp-rank",
                                    "3", "--json"],
    "compile.sm120-rank3": ["compile", "schedules/glm53-flash-sm120-tp4.l2s",
                            "--tp-rank", "3"],
    "compile.h200-rank1": ["compile", "schedules/glm53-flash-h200-tp4.l2s",
                           "--tp-rank", "1"],
    "explain.sm120-layer3": ["explain", "schedules/glm53-flash-sm120-tp4.l2s",
                             "--layer", "3"],
    "explain.post-ar-layer44": ["explain",
                                "schedules/glm53-flash-sm120-tp4-post-ar.l2s",
                                "--layer", "44"],
    "explain.h200-tokens300": ["explain", "schedules/glm53-flash-h200-tp4.l2s",
                               "--tokens", "300", "--layer", "4"],
}
for _stem in SCHEDULES:
    CASES[f"compile.{_stem}"] = ["compile", f"schedules/{_stem}.l2s"]


def _run(args: list[str]) -> str:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(args)
        except SystemExit as e:  # argparse usage errors
            rc = e.code
    return f"{out.getvalue()}--- stderr ---\n{err.getvalue()}--- exit {rc} ---\n"


@pytest.mark.parametrize("case", sorted(CASES))
def test_cli_output_matches_golden(case, monkeypatch):
    monkeypatch.chdir(ROOT)
    _check(GOLDEN / f"{case}.out", _run(CASES[case]))


def test_golden_dir_has_no_stale_files():
    if not GOLDEN.is_dir():
        pytest.skip("no golden files yet (set L2SCHED_UPDATE_GOLDEN=1)")
    stale = sorted(p.name for p in GOLDEN.glob("*.out")
                   if p.name[:-len(".out")] not in CASES)
    assert not stale, f"golden files without a case: {stale}"
