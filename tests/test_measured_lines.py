"""Issue 43: ``# measured:`` result lines (``l2sched.lang.measured``) are
never dropped silently. A mistyped one (``Measured:``, ``mesured:``,
``measured`` without its colon, carrying an ``M=TOKENS:`` value), one at the
end of a line of code, and an impossible gain (``+99999%``: a step of no
time; ``-200%``: a step three times the no-prefetch one, more than fills
can add) are errors at their line and column, from ``check`` and ``lint``
alike; prose comments and gains inside the range still load."""

from __future__ import annotations

from pathlib import Path

import pytest

from l2sched.cli import main
from l2sched.lang.resolve import load_schedule

ROOT = Path(__file__).resolve().parent.parent
H200 = ROOT / "schedules" / "glm53-flash-h200-tp4.l2s"
RESULT_LINE = 19  # the file's first '# measured:' line, replaced here


#: Prose comments that are no result lines, put over lines 2-5 of every
#: schedule here: none may be an error.
PROSE = ["# Measured there: 1-request decode 85.06 -> 91.06 steps/s (+7.1%).",
         "# measured the MoE kernel at 79 us/layer here, a gain of 8 us",
         "# measurements of M=1:-2% are in the report",
         "# NOT A NET GAIN YET. Measured 2026-11-29: M=1:-2.55%"]


def _schedule(tmp_path: Path, line: str, where: int = RESULT_LINE) -> Path:
    """The shipped H200 schedule with line ``where`` replaced by ``line``
    and lines 2-5 (comments) by ``PROSE``."""
    lines = H200.read_text().splitlines()
    assert lines[RESULT_LINE - 1].startswith("# measured: ")
    assert all(ln.startswith("#") for ln in lines[1:5])
    lines[1:5] = PROSE
    lines[where - 1] = line
    path = tmp_path / "s.l2s"
    path.write_text("\n".join(lines) + "\n")
    return path


BAD = [
    # mistyped keyword: the error at the comment's first word
    ("# measured r.md gain M=1:-2%", 3,
     "'# measured' is not read as a measured result; write '# measured:' (lowercase, "
     "the colon right after the word)"),
    ("# Measured: r.md gain M=1:-2%", 3, "'# Measured:' is not read as a measured result"),
    ("#  measured : r.md gain M=1:-2%", 4, "'#  measured :' is not read as a measured"),
    ("# mesured: r.md gain M=1:-2%", 3, "'# mesured:' is not read as a measured result"),
    ("  # MEASURED r.md M=4:+1%", 5, "'# MEASURED' is not read as a measured result"),
    # impossible gains: the error at the value
    ("# measured: r.md gain M=1:+1% M=4:+99999%", 31,
     "impossible gain +99999% at M=4: the gain is the percent of the no-prefetch step "
     "time saved (positive = faster); +100% or more would be a step of no time; it "
     "lies in -100% .. under +100%"),
    ("# measured: r.md gain M=1:+100%", 23, "impossible gain +100% at M=1"),
    ("# measured: r.md gain M=1:-200%", 23,
     "impossible gain -200% at M=1: the gain is the percent of the no-prefetch step "
     "time saved (positive = faster); below -100% a step over twice the no-prefetch "
     "one, more than its fills can add"),
    ("# measured: r.md gain M=1:-100.01%", 23, "impossible gain -100.01% at M=1"),
]


@pytest.mark.parametrize("command", ["check", "lint"])
@pytest.mark.parametrize("line,col,message", BAD, ids=[b[0] for b in BAD])
def test_a_bad_result_line_is_an_error_at_its_position(tmp_path, capsys, command,
                                                       line, col, message):
    path = _schedule(tmp_path, line)
    assert main([command, str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}:{RESULT_LINE}:{col}: {message}" in err, err
    assert err.count(f"{path}:") == 1, err  # the prose lines are no error


@pytest.mark.parametrize("command", ["check", "lint"])
def test_a_result_after_code_is_an_error_at_its_comment(tmp_path, capsys, command):
    lines = H200.read_text().splitlines()
    tp = lines.index("tp 4") + 1
    path = _schedule(tmp_path, 'tp 4  # measured: r.md gain M=1:-2%', tp)
    assert main([command, str(path)]) == 1
    err = capsys.readouterr().err
    assert (f"{path}:{tp}:7: a '# measured:' line must be a comment line of its own; at "
            "the end of a line of code it is not read") in err, err


def test_the_gain_range(tmp_path, capsys):
    """-100% (twice the no-prefetch step) and just under +100% load; just
    outside either end is an error; the prose comments are no error."""
    ok = load_schedule(str(_schedule(tmp_path, "# measured: r.md gain M=1:-100% "
                                               "M=4:+99.99% -- a note")))
    assert ok.measured[0].gains == ((1, -100.0), (4, 99.99)) and len(ok.measured) == 2
    assert ok.measured[0].note == "a note"
    for value in ("-100.01%", "+100.0%"):
        path = _schedule(tmp_path, f"# measured: r.md gain M=1:{value}")
        assert main(["check", str(path)]) == 1
        err = capsys.readouterr().err
        assert f"{path}:{RESULT_LINE}:23: impossible gain {value} at M=1" in err
        assert err.count(f"{path}:") == 1, err
