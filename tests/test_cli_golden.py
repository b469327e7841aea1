"""Byte-for-byte golden outputs of the CLI commands other than ``lint``
(``check``, ``inventory``, ``compile``'s plan.json and table, ``explain``),
so that a refactoring that changes any of them is caught.

``tests/data/cli-golden/CASE.out`` holds the exact stdout, a line
``--- stderr ---``, the exact stderr and a line ``--- exit N ---`` of
``l2sched ARGS`` run from the repository root. When a change is *meant* to
alter an output, regenerate and review the diff::

    L2SCHED_UPDATE_GOLDEN=1 python3 -m pytest -q tests/test_cli_golden.py
    git diff tests/data/cli-golden/

A compile at another TP rank has no golden of its own (``RANK_CASES``): its
output is its rank-0 case's golden with the plan's ``"tp_rank"`` line
changed, and nothing else.
"""

from __future__ import annotations

import contextlib
import io

import pytest
from test_lint_golden import ROOT, SCHEDULES, _check, first_difference

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

#: rank case name -> (its rank-0 case in ``CASES``, ``--tp-rank``). The
#: 4-rank schedules' weight slices have the same sizes on every rank, so the
#: plan differs from rank 0's only in its ``tp_rank``.
RANK_CASES: dict[str, tuple[str, int]] = {
    "compile.sm120-rank3": ("compile.glm53-flash-sm120-tp4", 3),
    "compile.h200-rank1": ("compile.glm53-flash-h200-tp4", 1),
}
RANK0_LINE = ' "tp_rank": 0'


def with_rank(rank0_output: str, rank: int) -> str:
    """``rank0_output`` (a compile's golden at TP rank 0) with its one
    ``"tp_rank": 0`` line made ``rank``'s. Fails the test when that line is
    not there exactly once."""
    lines = rank0_output.split("\n")
    at = [i for i, line in enumerate(lines) if line == RANK0_LINE]
    assert len(at) == 1, f"{len(at)} lines {RANK0_LINE!r} in the rank-0 golden"
    lines[at[0]] = f' "tp_rank": {rank}'
    return "\n".join(lines)


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


@pytest.mark.parametrize("case", sorted(RANK_CASES))
def test_compile_at_another_rank_changes_only_the_rank_line(case, monkeypatch):
    # runs after the rank-0 cases, so L2SCHED_UPDATE_GOLDEN compares with
    # the golden just written
    monkeypatch.chdir(ROOT)
    base, rank = RANK_CASES[case]
    expected = with_rank((GOLDEN / f"{base}.out").read_text(encoding="utf-8"), rank)
    actual = _run(CASES[base] + ["--tp-rank", str(rank)])
    if actual != expected:
        pytest.fail(f"{case}: rank {rank}'s output is not {base}.out with the rank line "
                    f"changed; first difference at {first_difference(actual, expected)}")


def test_with_rank_changes_exactly_one_line():
    text = '{\n "tp": 4,\n "tp_rank": 0\n}\n'
    assert with_rank(text, 3) == '{\n "tp": 4,\n "tp_rank": 3\n}\n'
    with pytest.raises(AssertionError):
        with_rank('{\n "tp_rank": 1\n}\n', 3)


def test_golden_dir_has_no_stale_files():
    if not GOLDEN.is_dir():
        pytest.skip("no golden files yet (set L2SCHED_UPDATE_GOLDEN=1)")
    stale = sorted(p.name for p in GOLDEN.glob("*.out")
                   if p.name[:-len(".out")] not in CASES)
    assert not stale, f"golden files without a case: {stale}"
