"""Issue 43: no command overwrites a file it reads (``l2sched.files``:
``command_inputs``, ``note_input``, ``check_output_path``). An output that
is the same file as an input the command reads (its schedule, a schedule it
extends, the device profile given or named in the schedule, the model
config given or named in the schedule, the probe state, the bench run's
schedule and profile), by name, symlink or hard link, is a usage error
(exit 2) naming both, and nothing is written. Per command that writes a file: ``fit -o``, ``compile -o``,
``timeline -o``, ``profile --out/--md-out``, ``verify --output-json``,
``bench run/tp --out``; the updates made in place on purpose (``fmt``,
``docs lint``, ``profile --state``) still write. ``lint``, ``check``,
``explain`` and ``inventory`` write no file (stdout only)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from l2sched.cli import main
from l2sched.errors import L2sUsageError

ROOT = Path(__file__).resolve().parent.parent
H200_TOML = ROOT / "l2sched" / "data" / "devices" / "h200.toml"
SCHEDULE = ROOT / "schedules" / "glm53-flash-h200-tp4.l2s"
CONFIG = ROOT / "l2sched" / "data" / "glm53-flash-config.json"


def _digests(folder: Path) -> dict:
    """Every file of ``folder`` -> its SHA-256 (what must not change)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture
def box(tmp_path):
    """A folder with a measured device profile ``my-box.toml``, a model
    config ``cfg.json``, a schedule ``s.l2s`` naming that profile and a
    schedule ``child.l2s`` extending it."""
    shutil.copy(H200_TOML, tmp_path / "my-box.toml")
    shutil.copy(CONFIG, tmp_path / "cfg.json")
    text = SCHEDULE.read_text()
    assert text.count("\ndevice h200\n") == 1
    (tmp_path / "s.l2s").write_text(text.replace("\ndevice h200\n",
                                                 '\ndevice "my-box.toml"\n'))
    (tmp_path / "child.l2s").write_text("schedule child\nextends \"s.l2s\"\n"
                                        "set window.B.budget = 20MB\n")
    return tmp_path


def _refused(capsys, argv, out: Path, read: Path, what: str) -> None:
    """``l2sched ARGV`` exits 2 with one line naming output ``out`` and
    input ``read`` (a ``what``), and leaves every file of the folder as it
    was (none added, none changed)."""
    folder = read.parent
    before = _digests(folder)
    assert main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err
    assert (f"error: {out}: refusing to overwrite the input file {read} (the {what} "
            "the command reads); nothing was written") in err, err
    assert _digests(folder) == before


def test_fit_never_overwrites_the_device_profile_it_reads(box, capsys):
    """The issue's case: ``fit --device my-box.toml -o my-box.toml`` (exit 0
    before, the measured profile lost); refused before the search."""
    prof = box / "my-box.toml"
    t0 = time.monotonic()
    _refused(capsys, ["fit", "--device", prof, "--quick", "-q", "-o", prof], prof, prof,
             "device profile")
    assert time.monotonic() - t0 < 10, "refused after the search"
    cfg = box / "cfg.json"
    _refused(capsys, ["fit", "--device", prof, "--quick", "-q", "--model-config", cfg,
                      "-o", cfg], cfg, cfg, "model config")


def test_compile_never_overwrites_any_input(box, capsys):
    prof, cfg, sched = box / "my-box.toml", box / "cfg.json", box / "s.l2s"
    child = box / "child.l2s"
    # the profile the schedule's device line names, the one --device names
    _refused(capsys, ["compile", sched, "-o", prof], prof, prof, "device profile")
    _refused(capsys, ["compile", SCHEDULE, "--device", prof, "-o", prof], prof, prof,
             "device profile")
    _refused(capsys, ["compile", sched, "--model-config", cfg, "-o", cfg], cfg, cfg,
             "model config")
    # the config the schedule's model_config line names
    named = box / "named.l2s"
    named.write_text(sched.read_text().replace("\ntp 4\n",
                                               '\ntp 4\nmodel_config "cfg.json"\n'))
    _refused(capsys, ["compile", named, "-o", cfg], cfg, cfg, "model config")
    # the schedule a schedule extends
    _refused(capsys, ["compile", child, "-o", sched], sched, sched, "schedule")
    # through a symlink and a hard link: the same file
    (box / "link.json").symlink_to(prof)
    _refused(capsys, ["compile", sched, "-o", box / "link.json"], box / "link.json",
             prof, "device profile")
    os.link(cfg, box / "hard.json")
    _refused(capsys, ["compile", sched, "--model-config", cfg, "-o", box / "hard.json"],
             box / "hard.json", cfg, "model config")
    # another path is written
    assert main(["compile", str(child), "-o", str(box / "plan.json")]) == 0
    assert json.loads((box / "plan.json").read_text())["schedule"] == "child"


def test_timeline_never_overwrites_any_input(box, capsys):
    cfg, prof = box / "cfg.json", box / "my-box.toml"
    _refused(capsys, ["timeline", box / "s.l2s", "--model-config", cfg, "-o", cfg], cfg,
             cfg, "model config")
    # (a --device file is a .toml file: tests/test_new_user_cli.py)
    _refused(capsys, ["timeline", SCHEDULE, "--device", prof, "-o", prof], prof, prof,
             "device profile")


def test_profile_never_overwrites_its_base_or_state(box, capsys):
    """Refused before torch and the GPU are asked for; the state itself is
    read and written back in place (it is checked, not refused)."""
    prof = box / "my-box.toml"
    _refused(capsys, ["profile", "--base", prof, "--out", prof], prof, prof,
             "device profile")
    _refused(capsys, ["profile", "--base", prof, "--out", box / "new.toml", "--md-out",
                      prof], prof, prof, "device profile")
    state = box / "state.json"
    state.write_text(json.dumps({"results": {}}))
    _refused(capsys, ["profile", "--state", state, "--out", state], state, state,
             "probe state")
    # the state alone passes the output checks: the next stop is torch or the GPU
    code = main(["profile", "--state", str(state), "--out", str(box / "new.toml")])
    err = capsys.readouterr().err
    assert code == 2 and "refusing" not in err and "needs" in err, err


def test_verify_never_overwrites_what_it_reads(box, capsys):
    """``--output-json`` and the markdown beside it: refused before vLLM's
    engine is started (the model config up front, the schedule once read)."""
    model = box / "model"
    model.mkdir()
    shutil.copy(CONFIG, model / "config.json")
    _refused(capsys, ["verify", model, "--schedule", SCHEDULE, "--batch-size", "1",
                      "--output-json", model / "config.json"], model / "config.json",
             model / "config.json", "model config")
    shutil.copy(box / "s.l2s", box / "rep.md")  # the report's markdown: rep.md
    _refused(capsys, ["verify", model, "--schedule", box / "rep.md", "--batch-size", "1",
                      "--output-json", box / "rep.json"], box / "rep.md", box / "rep.md",
             "schedule")


@pytest.mark.parametrize("argv", [
    ["bench", "run", "--schedule", "{s}", "--out", "{s}"],
    ["bench", "tp", "--schedule", "{s}", "--out", "{s}"],
    ["bench", "tp", "--device-profile", "{p}", "--out", "{p}"],
])
def test_bench_never_overwrites_its_schedule_or_profile(box, capsys, argv):
    """Before torch is imported (``bench tp`` reads them in its ranks)."""
    paths = {"{s}": box / "s.l2s", "{p}": box / "my-box.toml"}
    argv = [paths.get(a, a) for a in argv]
    read = argv[-1]
    before = _digests(box)
    assert main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err
    assert f"{read}: refusing to overwrite the input file {read}" in err, err
    assert _digests(box) == before


def test_only_updates_in_place_replace_an_input(box, capsys):
    """Within a command, a file read through the input readers is never an
    output, unless the write says it updates it in place (``fmt``, ``docs
    lint``, ``profile --state``, a profile's fitted tables), and those
    commands still update their file."""
    from l2sched.files import command_inputs, read_input_text, write_text_atomically

    prof = box / "my-box.toml"
    with command_inputs():
        text = read_input_text(prof, "device profile")
        with pytest.raises(L2sUsageError, match="refusing to overwrite the input file"):
            write_text_atomically(prof, text + "# edited\n")
        write_text_atomically(prof, text + "# edited\n", in_place=True)
    assert prof.read_text() == text + "# edited\n"
    write_text_atomically(prof, text)  # no command running: nothing recorded
    # fmt and docs lint rewrite the file they read
    messy = box / "messy.l2s"
    messy.write_text(SCHEDULE.read_text().replace("\ntp 4\n", "\ntp    4\n"))
    assert main(["fmt", str(messy)]) == 0
    assert "\ntp 4\n" in messy.read_text()
    doc = box / "lint.md"
    doc.write_text((ROOT / "docs" / "lint.md").read_text().replace(
        "<!-- end of generated rules -->", "stale\n<!-- end of generated rules -->", 1))
    assert main(["docs", "lint", "--file", str(doc)]) == 0
    assert doc.read_text() == (ROOT / "docs" / "lint.md").read_text()
