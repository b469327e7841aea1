"""``l2sched check`` and ``l2sched fmt`` from the command line: exit codes
0/1/2, one-line input errors without tracebacks, every error in one run, and
fmt rewriting atomically and never touching a file with errors."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from l2sched.cli import main

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = sorted((ROOT / "schedules").glob("*.l2s"))
HEAD = "schedule s\nmodel glm5next\ndevice h200\ntp 4\n"


def run(*argv, capsys):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_check_shipped_ok(capsys):
    code, out, err = run("check", *map(str, SHIPPED), capsys=capsys)
    assert code == 0 and err == ""
    assert out.count(": ok: schedule '") == len(SHIPPED)
    assert "  A       attn.after_first_proj  20.00 MB" in out


def test_check_quiet_and_set(capsys):
    path = str(ROOT / "schedules" / "glm53-flash-sm120-tp4.l2s")
    code, out, _ = run("check", "-q", path, "--set", "window.B.budget=25MB", capsys=capsys)
    assert (code, out) == (0, "")
    code, out, _ = run("check", path, "--set", "window.B.budget=25MB", capsys=capsys)
    assert "  B       attn.pre_all_reduce    25.00 MB" in out


def test_check_reports_all_errors_exit_1(tmp_path, capsys):
    f = tmp_path / "bad.l2s"
    f.write_text(HEAD + "policy evict_lst\nwindow A at attn.pre_allreduce budget 20\n")
    code, out, err = run("check", str(f), capsys=capsys)
    assert code == 1 and out == ""
    lines = err.splitlines()
    assert lines[0] == (f"{f}:5:8: unknown cache policy 'evict_lst'; "
                        "did you mean 'evict_last'?")
    assert lines[1:3] == ["    policy evict_lst", "           ^^^^^^^^^"]
    assert f"{f}:6:13: unknown hook point 'attn.pre_allreduce'; did you mean " \
        "'attn.pre_all_reduce'?" in lines
    assert f"{f}:6:39: budget 20 has no unit; write e.g. 20MB (units: B, KB, MB, GB, " \
        "KiB, MiB, GiB)" in lines
    assert lines[-1] == "1 of 1 file has errors"


def test_check_syntax_error(tmp_path, capsys):
    f = tmp_path / "bad.l2s"
    f.write_text("schedule s\nwindow A budget 20 MB\n")
    code, _, err = run("check", str(f), capsys=capsys)
    assert code == 1
    assert err.startswith(f"{f}:2:20: unexpected 'MB' (write a size without a space")


@pytest.mark.parametrize("kind,message", [
    ("missing", "no such file"),
    ("dir", "is a directory, not a schedule file"),
    ("latin1", "not UTF-8 text (byte 0xe9 at offset 11)"),
    ("empty", "empty schedule file"),
])
def test_input_errors_one_line(tmp_path, capsys, kind, message):
    f = tmp_path / "x.l2s"
    if kind == "dir":
        f.mkdir()
    elif kind == "latin1":
        f.write_bytes(b"schedule s\n\xe9\n")
    elif kind == "empty":
        f.write_bytes(b"")
    line = "2:1" if kind == "latin1" else "1:1"
    for cmd in (["check"], ["fmt"], ["fmt", "--check"]):
        code, out, err = run(*cmd, str(f), capsys=capsys)
        assert code == 1
        assert err.splitlines()[0] == f"{f}:{line}: {message}"
        assert "Traceback" not in err


def test_input_error_no_traceback_in_a_real_process(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "l2sched", "check",
                           str(tmp_path / "nope.l2s")], capture_output=True, text=True,
                          cwd=ROOT)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [f"{tmp_path}/nope.l2s:1:1: no such file",
                                        "1 of 1 file has errors"]


def test_bad_set_argument(capsys):
    path = str(SHIPPED[0])
    code, _, err = run("check", path, "--set", "window.B.budget", capsys=capsys)
    assert code == 1
    assert err.startswith("--set #1:1:1: --set takes KEY=VALUE, e.g. "
                          "--set window.B.budget=25MB")


@pytest.mark.parametrize("argv", [["check"], ["fmt"], ["nope"], [],
                                  ["check", "--bogus", "x.l2s"]])
def test_usage_errors_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2


def test_fmt_check_exit_codes(tmp_path, capsys):
    code, out, _ = run("fmt", "--check", *map(str, SHIPPED), capsys=capsys)
    assert (code, out) == (0, "")
    messy = tmp_path / "m.l2s"
    messy.write_text("schedule   s\ntp 4")
    before = messy.read_text()
    code, out, _ = run("fmt", "--check", str(messy), capsys=capsys)
    assert (code, out) == (1, f"{messy}: would reformat\n")
    assert messy.read_text() == before


def test_fmt_rewrites_atomically(tmp_path, capsys):
    messy = tmp_path / "m.l2s"
    messy.write_text("schedule   s\ntp 4")
    inode = messy.stat().st_ino
    code, out, _ = run("fmt", str(messy), capsys=capsys)
    assert (code, out) == (0, f"{messy}: reformatted\n")
    assert messy.read_text() == "schedule s\n\ntp 4\n"
    assert messy.stat().st_ino != inode  # replaced by rename, not rewritten in place
    assert os.listdir(tmp_path) == ["m.l2s"]  # no temporary left behind
    code, out, _ = run("fmt", str(messy), capsys=capsys)
    assert (code, out) == (0, "")  # idempotent: nothing to do


def test_fmt_never_touches_a_file_with_errors(tmp_path, capsys):
    bad = tmp_path / "bad.l2s"
    bad.write_text("schedule   s\nwindow A budget 20 MB\n")
    stat = bad.stat()
    code, out, err = run("fmt", str(bad), capsys=capsys)
    assert code == 1 and out == ""
    assert err.startswith(f"{bad}:2:20: unexpected 'MB'")
    assert bad.read_text() == "schedule   s\nwindow A budget 20 MB\n"
    assert bad.stat().st_mtime_ns == stat.st_mtime_ns


def test_fmt_idempotent_on_shipped_copies(tmp_path, capsys):
    for p in SHIPPED:
        shutil.copy(p, tmp_path / p.name)
    copies = [str(tmp_path / p.name) for p in SHIPPED]
    assert run("fmt", *copies, capsys=capsys)[:2] == (0, "")
    for p in SHIPPED:
        assert (tmp_path / p.name).read_text() == p.read_text()


def test_console_script_fmt_check_shipped():
    exe = shutil.which("l2sched")
    if exe is None:
        pytest.skip("l2sched console script not on PATH (pip install -e '.[test]')")
    proc = subprocess.run([exe, "fmt", "--check", *map(str, SHIPPED)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# Output files (found by a new-user trial): unwritable targets are one-line
# errors, a rewrite keeps the file's mode and writes through symlinks.


def test_fmt_keeps_mode_and_symlink(tmp_path, capsys):
    real = tmp_path / "real.l2s"
    real.write_text(HEAD.replace("model glm5next", "model   glm5next"))
    os.chmod(real, 0o644)
    link = tmp_path / "link.l2s"
    link.symlink_to(real.name)
    code, out, _ = run("fmt", str(link), capsys=capsys)
    assert code == 0 and "reformatted" in out
    assert link.is_symlink()
    assert "model glm5next" in real.read_text()
    assert (real.stat().st_mode & 0o777) == 0o644


@pytest.mark.parametrize("target", ["missing-dir/plan.json", "."])
def test_compile_unwritable_output_is_one_line(tmp_path, capsys, target):
    out_path = str(tmp_path / target)
    code, _, err = run("compile", str(ROOT / "schedules" / "glm53-flash-sm120-tp4.l2s"),
                       "-o", out_path, capsys=capsys)
    assert code == 1
    assert "Traceback" not in err
    assert f"{out_path.rstrip('/.') if target == '.' else out_path}:1:1: cannot write:" in err


def test_check_reports_a_tp_the_model_cannot_split(capsys):
    """Found by a new-user trial: check said ok, compile failed."""
    code, _, err = run("check", str(ROOT / "schedules" / "glm53-flash-h200-tp4.l2s"),
                       "--set", "tp=3", capsys=capsys)
    assert code == 1
    assert err.startswith("--set #1:1:4: the model cannot run at tp 3: ")
    assert "not divisible by the TP size 3" in err


@pytest.mark.parametrize("argv", [["--layer", "45"], ["--layer", "-1"],
                                  ["--tokens", "0"]])
def test_explain_rejects_out_of_range_options(capsys, argv):
    code, out, err = run("explain", str(ROOT / "schedules" / "glm53-flash-h200-tp4.l2s"),
                         *argv, capsys=capsys)
    assert code == 2 and out == "" and "error:" in err


# -------------------------------------------------------------------------
# attacker findings


SCHED = str(ROOT / "schedules" / "glm53-flash-h200-tp4.l2s")


def test_fifo_is_refused_not_read(tmp_path):
    """Reading a FIFO blocked forever (subprocess with a timeout)."""
    fifo = tmp_path / "fifo.l2s"
    os.mkfifo(fifo)
    r = subprocess.run([sys.executable, "-m", "l2sched", "check", str(fifo)],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 1
    assert r.stderr.splitlines()[0] == f"{fifo}:1:1: not a regular file"


def test_exponent_size_gets_a_hint(tmp_path, capsys):
    p = tmp_path / "e.l2s"
    p.write_text(HEAD + "window A at layer.entry budget 1e30MB\n")
    code, _, err = run("check", str(p), capsys=capsys)
    assert code == 1
    assert err.splitlines()[0] == (
        f"{p}:5:34: unexpected '30MB' (sizes are plain numbers with a unit, e.g. "
        "20MB or 1.5GB; there is no exponent notation like 1e30)")


def test_set_with_a_newline_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["check", SCHED, "--set", "window.B.budget=20MB", "--set",
              "window.B.budget=25MB\nwindow.A.budget=1MB"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err == ("l2sched check: error: --set #2: the value contains a newline "
                   "(U+000A); give one KEY=VALUE per --set\n")


@pytest.mark.parametrize("cmd", ["check", "fmt"])
def test_deep_selector_is_an_error_not_a_crash(tmp_path, capsys, cmd):
    p = tmp_path / "p.l2s"
    p.write_text(HEAD + "window A at layer.entry budget 1MB layers "
                 + "(" * 200 + "moe" + ")" * 200 + "\n")
    code, _, err = run(cmd, str(p), capsys=capsys)
    assert code == 1
    assert err.splitlines()[0] == (f"{p}:5:75: layer selector nested deeper than "
                                   "32 parentheses")


def test_deep_extends_chain_is_an_error_not_a_crash(tmp_path, capsys):
    (tmp_path / "f0.l2s").write_text(HEAD)
    for i in range(1, 500):
        (tmp_path / f"f{i}.l2s").write_text(f'schedule f{i}\nextends "f{i - 1}.l2s"\n')
    code, _, err = run("check", str(tmp_path / "f499.l2s"), capsys=capsys)
    assert code == 1
    assert err.splitlines()[0] == (f"{tmp_path / 'f436.l2s'}:2:9: extends chain "
                                   "deeper than 64 files")


@pytest.mark.parametrize("rank", ["7", "-1"])
def test_compile_tp_rank_out_of_range_is_a_usage_error(capsys, rank):
    code, out, err = run("compile", SCHED, "--tp-rank", rank, capsys=capsys)
    assert code == 2 and out == ""
    assert err == f"l2sched compile: error: --tp-rank {rank} is outside 0..3 (the schedule's tp is 4)\n"


@pytest.mark.parametrize("argv,word", [(["--set", "tp=2"], "--set"),
                                       (["--tp-rank", "2"], "--tp-rank 2")])
def test_explain_plan_refuses_schedule_options(tmp_path, capsys, argv, word):
    """These were silently ignored for a plan.json (exit 0). (``--model-config``
    applies to a plan: the config it is checked against,
    tests/test_plan_schema.py.)"""
    plan = tmp_path / "plan.json"
    assert run("compile", SCHED, "-o", str(plan), capsys=capsys)[0] == 0
    code, out, err = run("explain", str(plan), *argv, capsys=capsys)
    assert code == 2 and out == ""
    assert err.startswith(f"l2sched explain: error: {word}") and err.count("\n") == 1
    code, out, err = run("explain", str(plan), "--tp-rank", "0", capsys=capsys)
    assert code == 0 and err == ""


def test_explain_plan_with_a_byte_order_mark(tmp_path, capsys):
    plan = tmp_path / "plan.json"
    assert run("compile", SCHED, "-o", str(plan), capsys=capsys)[0] == 0
    plan.write_bytes(b"\xef\xbb\xbf" + plan.read_bytes())
    assert run("explain", str(plan), capsys=capsys)[0] == 0


def test_explain_tp_rank_error_has_the_usual_prefix(capsys):
    code, out, err = run("explain", SCHED, "--tp-rank", "4", capsys=capsys)
    assert code == 2 and out == ""
    assert err == ("l2sched explain: error: --tp-rank 4 is outside 0..3 "
                   "(the schedule's tp is 4)\n")


def test_extends_empty_string_needs_a_file_name(tmp_path, capsys):
    p = tmp_path / "e.l2s"
    p.write_text('schedule s\nextends ""\nmodel glm5next\ndevice h200\ntp 4\n')
    code, out, err = run("check", str(p), capsys=capsys)
    assert code == 1
    assert err.startswith(f"{p}:2:9: extends needs a file name\n")
    assert "directory" not in err
