"""Byte-for-byte golden outputs of ``l2sched lint`` (and of the predicted
timeline), so that a change to the graph, the simulation or the rules that
alters any diagnostic, span, summary number, JSON or SARIF field is caught.

The golden files live in ``tests/data/lint-golden/``: ``CASE.out`` is the
exact stdout of ``l2sched lint ARGS`` run from the repository root (paths
relative, as a user types them), and ``CASE.rc`` its exit code. The timeline
cases store the SHA-256 of the Chrome trace JSON and of the SVG (the files are
large) in ``CASE.sha256``.

When a change is *meant* to alter the results, regenerate and review the
diff::

    L2SCHED_UPDATE_GOLDEN=1 python3 -m pytest -q tests/test_lint_golden.py
    git diff tests/data/lint-golden/
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
from pathlib import Path

import pytest

from l2sched.cli import main

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "data" / "lint-golden"
UPDATE = bool(os.environ.get("L2SCHED_UPDATE_GOLDEN"))
SCHEDULES = sorted(p.stem for p in (ROOT / "schedules").glob("*.l2s"))

#: case name -> ``l2sched lint`` arguments (paths relative to the root).
CASES: dict[str, list[str]] = {}
for _stem in SCHEDULES:
    for _fmt in ("human", "json", "sarif"):
        CASES[f"{_stem}.{_fmt}"] = [f"schedules/{_stem}.l2s", "--format", _fmt]
# a few non-default settings: more tokens (expert bytes, all-reduce size),
# another graph mode, selection, calibration from a profiler trace
CASES["glm53-flash-sm120-tp4.tokens8.json"] = [
    "schedules/glm53-flash-sm120-tp4.l2s", "--tokens", "8", "--format", "json"]
CASES["glm53-flash-h200-tp4.tokens16.json"] = [
    "schedules/glm53-flash-h200-tp4.l2s", "--tokens", "16", "--format", "json"]
CASES["glm53-flash-sm120-tp4-post-ar.tokens4-eager.human"] = [
    "schedules/glm53-flash-sm120-tp4-post-ar.l2s", "--tokens", "4",
    "--graph-mode", "eager"]
CASES["glm53-flash-sm120-tp4-post-ar.select.human"] = [
    "schedules/glm53-flash-sm120-tp4-post-ar.l2s", "--select", "L2S1",
    "--ignore", "L2S103", "--no-summary"]
CASES["glm53-flash-sm120-tp4-post-ar.calibrate.human"] = [
    "schedules/glm53-flash-sm120-tp4-post-ar.l2s", "--calibrate",
    "tests/data/glm53-synthetic-trace.json"]

#: timeline case name -> (schedule, tokens).
TIMELINES = {
    "glm53-flash-sm120-tp4.timeline": ("schedules/glm53-flash-sm120-tp4.l2s", 1),
    "glm53-flash-sm120-tp4-post-ar.timeline4": (
        "schedules/glm53-flash-sm120-tp4-post-ar.l2s", 4),
}


def _run_cli(args: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(["lint", *args])
    return rc, out.getvalue()


def _check(path: Path, actual: str) -> None:
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual, encoding="utf-8")
        return
    assert path.exists(), f"no golden file {path} (set L2SCHED_UPDATE_GOLDEN=1)"
    expected = path.read_text(encoding="utf-8")
    if actual != expected:
        pytest.fail(f"{path.name} differs from the golden output at "
                    f"{first_difference(actual, expected)}")


def first_difference(actual: str, expected: str) -> str:
    """``line N:\n  golden: ...\n  now:    ...``: where ``actual`` first
    differs from ``expected`` (``<end>`` past a text's last line)."""
    a, e = actual.splitlines(), expected.splitlines()
    first = next((i for i, (x, y) in enumerate(zip(a, e)) if x != y),
                 min(len(a), len(e)))
    return (f"line {first + 1}:\n  golden: {e[first] if first < len(e) else '<end>'}"
            f"\n  now:    {a[first] if first < len(a) else '<end>'}")


def test_every_schedule_has_golden_cases():
    assert SCHEDULES, "no schedules/*.l2s"
    for stem in SCHEDULES:
        for fmt in ("human", "json", "sarif"):
            assert f"{stem}.{fmt}" in CASES


@pytest.mark.parametrize("case", sorted(CASES))
def test_lint_output_matches_golden(case, monkeypatch):
    monkeypatch.chdir(ROOT)
    rc, out = _run_cli(CASES[case])
    _check(GOLDEN / f"{case}.out", out)
    _check(GOLDEN / f"{case}.rc", f"{rc}\n")


@pytest.mark.parametrize("case", sorted(TIMELINES))
def test_timeline_matches_golden(case, monkeypatch):
    from l2sched.lint import lint_path
    from l2sched.lint.timeline import chrome_trace, gantt_svg

    monkeypatch.chdir(ROOT)
    schedule, tokens = TIMELINES[case]
    run = lint_path(schedule, tokens=tokens)
    trace = json.dumps(chrome_trace(run)) + "\n"
    svg = gantt_svg(run)
    digest = "".join(f"{hashlib.sha256(text.encode()).hexdigest()}  {name}\n"
                     for name, text in (("trace.json", trace), ("gantt.svg", svg)))
    _check(GOLDEN / f"{case}.sha256", digest)
