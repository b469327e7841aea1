"""Output files of compile/timeline (``-o``) and the lint's machine-readable
output on broken input: devices and FIFOs stay what they are, inputs are
never overwritten, several outputs are written all or none, and
``--format json|sarif`` always writes a document."""

from __future__ import annotations

import json
import os
import shutil
import stat
import threading
from pathlib import Path

import pytest

from lab import main as lab_main
from l2sched.cli import main

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "schedules" / "glm53-flash-h200-tp4.l2s"


def test_output_to_a_device_keeps_the_device(tmp_path, capsys):
    # written to, never replaced (root would have turned -o /dev/null into a
    # file); a private null device, so a regression cannot break the machine
    dev = tmp_path / "null"
    try:
        os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except (PermissionError, OSError) as e:
        pytest.skip(f"cannot create a device node here: {e}")
    assert main(["compile", str(H200), "-o", str(dev)]) == 0
    st = os.stat(dev)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)


def test_output_to_a_fifo_streams_into_it(tmp_path, capsys):
    fifo = tmp_path / "plan.fifo"
    os.mkfifo(fifo)
    got = []
    # daemon: if the FIFO were replaced, the reader would block forever
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)
    reader.start()
    assert main(["compile", str(H200), "-o", str(fifo)]) == 0
    reader.join(10)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert got, "nothing was written into the FIFO"
    assert json.loads(got[0])["schedule"] == "glm53-flash-h200-tp4"


def test_compile_refuses_to_overwrite_its_schedule(tmp_path, capsys):
    mine = tmp_path / "my.l2s"
    shutil.copy(H200, mine)
    text = mine.read_text()
    assert main(["compile", str(mine), "-o", str(mine)]) == 2  # a usage error
    assert mine.read_text() == text
    assert (f"l2sched compile: error: {mine}: refusing to overwrite the input file "
            f"{mine} (the schedule the command reads)") in capsys.readouterr().err


def test_timeline_writes_both_files_or_neither(tmp_path, capsys):
    (tmp_path / "t.svg").mkdir()  # the SVG's path is taken by a directory
    out = tmp_path / "t.json"
    assert main(["timeline", str(H200), "-o", str(out)]) == 1
    assert not out.exists()
    assert "t.svg:1:1: cannot write: is a directory" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["t.svg"]  # no temporary left


def test_timeline_output_must_not_be_the_svg(tmp_path, capsys):
    assert main(["timeline", str(H200), "-o", str(tmp_path / "x.svg")]) == 1
    assert "-o names the trace (.json)" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_timeline_writes_trace_and_svg(tmp_path, capsys):
    out = tmp_path / "t.json"
    assert main(["timeline", str(H200), "-o", str(out)]) == 0
    assert json.loads(out.read_text())["traceEvents"]
    assert (tmp_path / "t.svg").read_text().startswith("<svg")


@pytest.fixture
def broken(tmp_path):
    p = tmp_path / "bad.l2s"
    p.write_text("schedule x\nmodel glm5next\ndevice h200\ntp 4\n"
                 "window A at nohook budget 1MB { this self_attn.o_proj }\n")
    return p


def test_lint_json_on_broken_input_is_a_document(broken, capsys):
    assert main(["lint", str(broken), "--format", "json"]) == 1
    cap = capsys.readouterr()
    doc = json.loads(cap.out)
    assert doc["errors"] == 1 and doc["findings"][0]["code"] == "L2S000"
    span = doc["findings"][0]["span"]
    assert (span["line"], span["column"]) == (5, 13)
    assert f"{broken}:5:13: unknown hook point 'nohook'" in cap.err


def test_lint_sarif_on_broken_input_is_a_document(broken, capsys):
    assert main(["lint", str(broken), "--format", "sarif"]) == 1
    doc = json.loads(capsys.readouterr().out)
    res = doc["runs"][0]["results"]
    assert [r["ruleId"] for r in res] == ["L2S000"]
    region = res[0]["locations"][0]["physicalLocation"]["region"]
    assert (region["startLine"], region["startColumn"]) == (5, 13)


def test_lint_reports_a_tp_the_model_cannot_split_at_the_tp_line(tmp_path, capsys):
    p = tmp_path / "tp3.l2s"
    p.write_text(H200.read_text().replace("\ntp 4\n", "\ntp 3\n"))
    line = p.read_text().splitlines().index("tp 3") + 1
    assert main(["lint", str(p)]) == 1
    assert f"{p}:{line}:4: the model cannot run at tp 3" in capsys.readouterr().err


#: Every output option of every command: (argv before the path, argv after it).
OUTPUT_OPTIONS = {
    "compile -o": (["compile", str(H200), "-o"], []),
    "compile --output": (["compile", str(H200), "--output"], []),
    "timeline -o": (["timeline", str(H200), "-o"], []),
    "bench run --out": (["bench", "run", "--dry", "--out"], []),
    "bench tp --out": (["bench", "tp", "--dry", "--out"], []),
    "bench report --json-out": (["bench", "report", "r.json", "--md-out", "r.md",
                                 "--json-out"], []),
    "bench report --md-out": (["bench", "report", "r.json", "--json-out", "r2.json",
                               "--md-out"], []),
    "bench tp-report --md-out": (["bench", "tp-report", "r.json", "--md-out"], []),
    "bench tp-report --update-profile": (["bench", "tp-report", "r.json",
                                          "--update-profile"], []),
    "docs hooks --file": (["docs", "hooks", "--file"], []),
    "fit -o": (["fit", "--device", "h200", "-o"], []),
    "bench calibrate --out": (["bench", "calibrate", "r.json", "--out"], []),
}


@pytest.mark.parametrize("option", sorted(OUTPUT_OPTIONS))
@pytest.mark.parametrize("path,message", [
    (".", ".:1:1: cannot write: is a directory"),
    ("/", "/:1:1: cannot write: is a directory"),
    ("", "<empty>:1:1: cannot write: the output path is empty"),
    ("no/x.out", "no/x.out:1:1: cannot write: no such directory {tmp}/no"),
])
def test_item12_output_options_refuse_a_directory_or_empty_path(
        option, path, message, tmp_path, monkeypatch, capsys):
    """``timeline -o .`` (and ``-o ''``, ``-o /``) printed a traceback
    (``PosixPath('.') has an empty name``); every output option of every
    command gives compile's one-line error, before any work is done and
    without touching anything."""
    monkeypatch.chdir(tmp_path)
    before, after = OUTPUT_OPTIONS[option]
    # the research commands are the lab's (python -m lab bench ...)
    run = lab_main if before[:2] in (["bench", "report"], ["bench", "tp-report"],
                                     ["bench", "calibrate"]) else main
    assert run(before + [path] + after) == 1
    err = capsys.readouterr().err
    assert err == message.format(tmp=os.path.realpath(tmp_path)) + "\n", err
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_model_config_not_utf8_is_one_clean_line(tmp_path, capsys):
    """A binary --model-config names the byte, like a .l2s file does, not
    Python's codec message."""
    p = tmp_path / "bin.json"
    p.write_bytes(b'{"a": 1, \x80}')
    assert main(["inventory", "--model-config", str(p)]) == 1
    assert capsys.readouterr().err == f"{p}: not UTF-8 text (byte 0x80 at offset 9)\n"


def test_an_unknown_device_option_is_one_error_naming_it(capsys):
    # (lint reports it per schedule instead, so --format sarif/json can carry it)
    from l2sched.cli.main import main
    for cmd in (["check"], ["timeline", "-o", "t.json"]):
        assert main([*cmd, "--device", "h20", "schedules/glm53-flash-h200-tp4.l2s"]) == 1
        err = capsys.readouterr().err
        assert "--device: unknown device profile 'h20'; did you mean 'h200'?" in err
        assert err.count("\n") == 1
