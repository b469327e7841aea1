"""A new user's CLI problems (issue 43, second list): each fixed by kind."""

from __future__ import annotations

import json
import os
import shlex
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


def _window_comment(tmp_path, comment: str) -> Path:
    """The shipped SM120 schedule with window A's budget cut to 1 B (an
    L2S007 error: it fetches nothing) and ``comment`` at the end of that
    window's line (line 19)."""
    lines = BASE.read_text().splitlines()
    assert lines[18].startswith("window A ") and "budget 20MB" in lines[18]
    lines[18] = lines[18].replace("budget 20MB", "budget 1B") + "  " + comment
    path = tmp_path / "s.l2s"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("comment, message, col", [
    ("# l2s: ignore[L2S101", "the code list '[L2S101' has no closing ']'", "[L2S101"),
    ("# l2s: ignore[", "the code list '[' has no closing ']'", "["),
    ("# l2s: ignore[]", "an empty code in '[]'", "]"),
    ("# l2s: ignore[L2S007,]", "an empty code in '[L2S007,]'", "]"),
    ("# l2s: ignored", "'# l2s:' takes 'ignore' or 'ignore[CODE, ...]', not 'ignored'",
     "ignored"),
    ("# l2s: ignore[L2S007]x", "a space or the end of the comment must follow ']'", "x"),
    ("# l2s: ignore[L2S999]", "unknown rule code 'L2S999' in a suppression: no rule "
     "code starts with it (codes: L2S000-", "L2S999"),
    ("# l2s: ignore[L2S00T]", "did you mean 'L2S007'?", "L2S00T"),
])
def test_malformed_suppression_is_an_error_and_hides_nothing(tmp_path, capsys, comment,
                                                             message, col):
    """A suppression comment with no closing ']' (or other malformed, or
    naming a code no rule has) silenced every finding of its line, errors
    included (L2S007 here): '0 errors, 1 suppressed', exit 0. It is now an
    error at its line:column, for check and for lint (exit 1, an L2S000
    input error in the JSON), and hides nothing."""
    path = _window_comment(tmp_path, comment)
    line = path.read_text().splitlines()[18]
    column = line.index(col, line.index("#")) + 1
    for command in ("check", "lint"):
        assert main([command, str(path)]) == 1, command
        err = capsys.readouterr().err
        assert f"s.l2s:19:{column}: " in err and message in err, (command, err)
    assert main(["lint", str(path), "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    (f,) = doc["findings"]
    assert f["code"] == "L2S000" and message in f["message"]
    assert (f["span"]["line"], f["span"]["column"]) == (19, column)
    assert doc["suppressed"] == 0


@pytest.mark.parametrize("good, bad", [
    ("# l2s: ignore[L2S007]", "# l2s: ignore[L2S007"),
    ("# l2s: ignore[L2S0, L2S101]", "# l2s: ignore[L2S0, L2S1O1]"),
    ("# l2s: ignore", "# l2s: ignore["),
    ("# l2s: ignore -- measured to help", "# l2s: ignored -- measured to help"),
])
def test_well_formed_suppression_silences_its_malformed_twin_nothing(tmp_path, capsys,
                                                                     good, bad):
    """The forms docs/lint.md gives (a code, a prefix, a list, a bare
    ignore with a note after a space) silence the line's L2S007; the same
    comment with one slip silences nothing: the lint stops on it (exit 1,
    no finding suppressed)."""
    for comment, rc in ((good, 0), (bad, 1)):
        path = _window_comment(tmp_path, comment)
        assert main(["lint", str(path), "--format", "json"]) == rc, comment
        doc = json.loads(capsys.readouterr().out)
        codes = [f["code"] for f in doc["findings"]]
        assert "L2S007" not in codes
        assert (doc["suppressed"] >= 1) if rc == 0 else (codes == ["L2S000"]), comment


def test_lint_md_quotes_the_suppression_error(tmp_path, capsys, monkeypatch):
    """docs/lint.md's quoted error for an unknown code in a suppression is
    what ``check`` prints for it (the shipped SM120 schedule, the comment
    at the end of line 19)."""
    lines = BASE.read_text().splitlines()
    lines[18] += "  # l2s: ignore[L2S999]"
    (tmp_path / "s.l2s").write_text("\n".join(lines) + "\n")
    monkeypatch.chdir(tmp_path)
    assert main(["check", "s.l2s"]) == 1
    first = capsys.readouterr().err.splitlines()[0]
    doc = (ROOT / "docs" / "lint.md").read_text(encoding="utf-8")
    assert f"```\n{first}\n```" in doc


def test_every_command_reads_device_alike(tmp_path, monkeypatch, capsys):
    """--device was read four ways: fit exited 2 where the others exited 1,
    lint's line lacked the '--device:' prefix, fit called a directory 'no
    such device profile file', and an existing file that is not .toml was
    taken for an unknown profile name. Every command now says the same,
    exit 1 (an option naming a file, as --model-config and --calibrate)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "g.l2s").write_text(BASE.read_text())
    (tmp_path / "notes.txt").write_text("hello\n")
    (tmp_path / "adir").mkdir()
    commands = {
        "check": ["check", "g.l2s"], "lint": ["lint", "g.l2s"],
        "compile": ["compile", "g.l2s", "-o", "p.json"], "explain": ["explain", "g.l2s"],
        "timeline": ["timeline", "g.l2s", "-o", "t.json"],
        "fit": ["fit", "--quick", "-q", "-o", "out.l2s"],
    }
    cases = {
        "h20": "--device: unknown device profile 'h20'; did you mean 'h200'? (shipped: ",
        "g.l2s": "--device: 'g.l2s' is not a .toml device profile file; a device profile "
                 "is a shipped name (",
        "notes.txt": "--device: 'notes.txt' is not a .toml device profile file",
        "adir": "adir: not a regular file",
        str(tmp_path / "adir"): f"{tmp_path / 'adir'}: not a regular file",
        "gone.toml": "gone.toml: no such device profile",
    }
    for value, message in cases.items():
        for name, argv in commands.items():
            assert main([*argv, "--device", value]) == 1, (name, value)
            err = capsys.readouterr().err
            assert err.splitlines()[0].startswith(message), (name, value, err)
            assert not list(tmp_path.glob("out.l2s")) and not list(tmp_path.glob("p.json"))
    # a profile file by path still works, and fit names that file
    profile = tmp_path / "my-box.toml"
    profile.write_text((ROOT / "l2sched" / "data" / "devices" / "h200.toml").read_text())
    assert main(["check", "-q", "g.l2s", "--device", "my-box.toml"]) == 0


BIG = "99999999999999999999999"


@pytest.mark.parametrize("argv", [
    ["lint", str(BASE), "--tokens", BIG],
    ["lint", str(BASE), "--tokens", "1,2147483648"],
    ["timeline", str(BASE), "--tokens", BIG, "-o", "t.json"],
    ["explain", str(BASE), "--tokens", "2147483648"],
    ["profile", "--out", "o.toml", "--tokens", f"1,{BIG}"],
    ["bench", "run", "--tokens", BIG, "--dry"],
])
def test_tokens_above_the_int32_cap_is_a_usage_error(argv, tmp_path, monkeypatch, capsys):
    """--tokens had no upper bound: 'lint --tokens 99999999999999999999999'
    predicted a 6.6e23 us step, exit 0. Every M an option gives lies in
    1 .. 2,147,483,647 (MAX_TOKENS_LIMIT, the cap of max_tokens): one line
    naming the option, exit 2."""
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--tokens " in err and "above 2,147,483,647 tokens per step" in err, err
    assert not list(tmp_path.iterdir())


def test_measured_m_above_the_int32_cap_is_an_error_at_its_value(tmp_path, capsys):
    """'# measured: r.md gain M=99999999999999999999999:+1%' passed check
    though max_tokens is capped at 2,147,483,647: an error at the value."""
    line = f"# measured: r.md gain M=1:+1% M={BIG}:+1%"
    (tmp_path / "m.l2s").write_text(line + "\n" + BASE.read_text().replace(
        'extends "', f'extends "{ROOT / "schedules"}/'))
    assert main(["check", str(tmp_path / "m.l2s")]) == 1
    err = capsys.readouterr().err
    assert f"m.l2s:1:{line.index(f'M={BIG}') + 1}: M={BIG} is above 2,147,483,647" in err
    ok = line.replace(BIG, "2147483647")
    (tmp_path / "m.l2s").write_text(ok + "\n" + BASE.read_text())
    assert main(["check", "-q", str(tmp_path / "m.l2s")]) == 0


def test_docs_check_says_how_to_regenerate_that_file(tmp_path, monkeypatch, capsys):
    """'docs hooks --model qwen3_moe --file h.md --check' said 'run `l2sched
    docs hooks`', which writes another file; outside a checkout 'docs hooks
    --check' said only 'docs/hooks.md: no such document'. The suggested
    command now rewrites the checked file (and does: --check passes after
    it), and outside a checkout the error says --file is needed."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my h.md").write_text("old\n")
    argv = ["docs", "hooks", "--model", "qwen3_moe", "--file", "my h.md"]
    assert main([*argv, "--check"]) == 1
    err = capsys.readouterr().err
    assert err == ("my h.md: out of date; run "
                   "`l2sched docs hooks --model qwen3_moe --file 'my h.md'`\n")
    command = err.split("`")[1]
    assert main(shlex.split(command)[1:]) == 0
    assert main([*argv, "--check"]) == 0
    capsys.readouterr()
    for args in (["hooks", "--check"], ["hooks"], ["lint", "--check"]):
        assert main(["docs", *args]) == 1
        err = capsys.readouterr().err
        assert "no such document" in err and "outside a checkout name the document " \
            "with --file PATH" in err, (args, err)
    assert not (tmp_path / "docs").exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_timeline_to_a_fifo_writes_no_svg_beside_it(tmp_path, capsys):
    """'timeline -o /dev/null' created a regular file /dev/null.svg: the SVG
    path was derived from any -o. For an output that is not a regular file
    (a FIFO here, as /dev/null is a device) the trace goes there, no SVG is
    written, and a line says so; a regular -o still gets FILE.svg."""
    import threading

    fifo = tmp_path / "trace.json"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    try:
        rc = main(["timeline", str(BASE), "-o", str(fifo)])
    finally:
        reader.join(10)
        if reader.is_alive():  # nothing opened the FIFO to write: unblock the reader
            # non-blocking: a blocking open would wait forever for a reader
            # that has just finished (the hang this test once had)
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
            reader.join(10)
    assert rc == 0
    out = capsys.readouterr().out
    assert out == (f"wrote {fifo}\nno SVG written: {fifo} is not a regular file (the "
                   "SVG goes beside a regular -o FILE.json, as FILE.svg)\n")
    assert json.loads(got[0])["traceEvents"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.json"]
    assert main(["timeline", str(BASE), "-o", str(tmp_path / "t.json")]) == 0
    assert (tmp_path / "t.svg").read_text().startswith("<svg")


@pytest.mark.parametrize("argv, message", [
    (["lint", str(BASE), "--ignore", ",,,"], "--ignore ',,,': an empty code"),
    (["lint", str(BASE), "--select", "L2S1,"], "--select 'L2S1,': an empty code"),
    (["lint", str(BASE), "--ignore", ""], "--ignore '': an empty code"),
    (["timeline", str(BASE), "--arm", "nope", "-o", "t.json"],
     "--arm nope needs --measured RESULT.json"),
])
def test_option_values_that_say_nothing_are_usage_errors(argv, message, tmp_path,
                                                         monkeypatch, capsys):
    """'lint --ignore ,,,' (no code at all) was accepted, and 'timeline
    --arm nope' without --measured was ignored: usage errors, exit 2,
    nothing written."""
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"error: {message}" in err, err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("command", ["check", "lint", "compile", "explain", "fmt"])
def test_a_name_the_os_cannot_look_up_is_one_line_not_a_traceback(tmp_path, command):
    # stat fails with ENAMETOOLONG (as with a directory the user cannot enter)
    name = "x" * 300 + ".l2s"
    r = l2sched(command, name, cwd=tmp_path)
    err = r.stderr.decode()
    assert r.returncode == 1, err
    assert "Traceback" not in err
    assert f"{name}:1:1: cannot read: File name too long" in err


def test_extends_a_name_the_os_cannot_look_up_is_an_error_at_the_extends(tmp_path):
    (tmp_path / "s.l2s").write_text(f'schedule p\nextends "{"x" * 300}.l2s"\n',
                                    encoding="utf-8")
    r = l2sched("check", "s.l2s", cwd=tmp_path)
    err = r.stderr.decode()
    assert r.returncode == 1 and "Traceback" not in err
    assert "s.l2s:2:9: cannot extend" in err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_stdout_that_cannot_be_written_is_one_line_and_exit_1(tmp_path):
    sched = str(Path(__file__).resolve().parents[1] / "schedules" / "glm53-flash-h200-tp4.l2s")
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "l2sched", "lint", sched], cwd=tmp_path,
                           stdout=full, stderr=subprocess.PIPE, text=True)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip() == ("l2sched lint: error: cannot write to standard output: "
                                "No space left on device")
    r = subprocess.run([sys.executable, "-m", "l2sched", "lint", sched], cwd=tmp_path,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       pass_fds=(), close_fds=True,
                       preexec_fn=lambda: os.close(1))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "cannot write to standard output: standard output is closed" in r.stderr


def test_a_negative_number_says_so(tmp_path):
    (tmp_path / "s.l2s").write_text("schedule p\nmodel glm5next\ntp -4\n", encoding="utf-8")
    r = l2sched("check", "s.l2s", cwd=tmp_path)
    assert r.returncode == 1
    assert "s.l2s:3:4: unexpected character '-' (a negative number)" in r.stderr.decode()
