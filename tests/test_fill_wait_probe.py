"""``lab/experiments/fill_wait_probe.py``'s ``--shape`` values are checked on the
CPU, before the script asks for a GPU: one line naming the bad value."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "lab" / "experiments" / "fill_wait_probe.py"


def _run(*shapes: str, tmp_path) -> subprocess.CompletedProcess:
    args = [sys.executable, str(SCRIPT)] + [x for s in shapes for x in ("--shape", s)]
    args += ["--out", str(tmp_path / "o.json"), "--md-out", str(tmp_path / "o.md")]
    return subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=300)


@pytest.mark.parametrize("bad", ["x", "a:mode=nope", "a:mode=bulk,grid=abc",
                                 "a:mode=bulk,foo=1", ":mode=bulk", "a:mode=bulk,grid",
                                 "a:mode=bulk,grid=0", "a:mode=bulk,policy=bogus"])
def test_a_bad_shape_is_one_line_naming_it(bad, tmp_path):
    r = _run("ok:mode=bulk", bad, tmp_path=tmp_path)
    assert r.returncode != 0
    assert len(r.stderr.strip().splitlines()) == 1
    assert f"--shape {bad!r}" in r.stderr and "want NAME:mode=MODE" in r.stderr
    assert not (tmp_path / "o.json").exists()


def test_shapes_over_the_profiles_shape_of_their_mode():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        from fill_wait_probe import _shapes
    finally:
        sys.path.remove(str(SCRIPT.parent))
    base = {"bulk": {"mode": "bulk", "grid": 264, "threads": 32, "chunk": 16384, "stages": 1}}
    got = _shapes(["g4:mode=bulk,grid=4,policy=none", "l:mode=line,threads=1"], base)
    assert got["g4"] == {**base["bulk"], "grid": 4, "policy": "none"}
    assert got["l"] == {**base["bulk"], "mode": "line", "threads": 1}
