"""A new user's CLI problems (issue 43, second list): each fixed by kind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from l2sched.cli import main

ROOT = Path(__file__).resolve().parent.parent
BASE = ROOT / "schedules" / "glm53-flash-sm120-tp4.l2s"


def l2sched(*args, cwd) -> subprocess.CompletedProcess:
    """``l2sched ARGS`` run as a user runs it, in its own process (its
    standard streams as Python sets them up), in ``cwd``."""
    env = dict(os.environ, LC_ALL="C.UTF-8")
    return subprocess.run([sys.executable, "-m", "l2sched", *args], cwd=cwd,
                          env=env, capture_output=True)


@pytest.mark.skipif(sys.platform == "win32" or os.fsencode("\udcff") != b"\xff",
                    reason="needs a file system that takes any bytes in names")
@pytest.mark.parametrize("text", ["good", "syntax error"])
def test_sarif_uri_of_a_name_that_is_not_utf8(tmp_path, text):
    """A schedule whose file name is not valid UTF-8 (byte 0xff) made
    ``lint --format sarif`` end in UnicodeEncodeError: the URI was quoted
    from the name's text. The URI percent-encodes the name's bytes: under
    the source root and outside it."""
    name = os.fsdecode(b"bad\xffname.l2s")
    content = BASE.read_text() if text == "good" else "garbage here\n"
    (tmp_path / name).write_text(content)
    (tmp_path / ".git").mkdir()     # the source root
    done = l2sched("lint", name, "--format", "sarif", cwd=tmp_path)
    assert done.returncode == (0 if text == "good" else 1), done.stderr
    doc = json.loads(done.stdout)
    locs = [r["locations"][0]["physicalLocation"]["artifactLocation"]
            for r in doc["runs"][0]["results"]]
    assert locs and {"uri": "bad%FFname.l2s", "uriBaseId": "%SRCROOT%"} in locs
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / ".git").mkdir()          # the source root is sub; the file is outside
    done = l2sched("lint", str(tmp_path / name), "--format", "sarif", cwd=sub)
    assert b"Traceback" not in done.stderr
    doc = json.loads(done.stdout)
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
            for r in doc["runs"][0]["results"]}
    assert (tmp_path / name).as_uri() in uris
    assert all(u.isascii() for u in uris)
