"""``l2sched fit``: deterministic output, hard constraints never violated
(a property test over perturbed H200 profiles), the no-prefetch answer on a
profile where fills cannot pay off, a fit at least as good by the model as
the shipped H200 schedule with the default search, the evaluation equal to
``run_lint``'s, the pessimistic profile variants, the header, bad options,
and the committed fitted schedules. CPU only; the quick search keeps the
file near a minute (the default search runs once)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from l2sched.cli import main
from l2sched.compiler.compile import schedule_inventory
from l2sched.fit import FitOptions, Search, fit_text
from l2sched.fit.bound import MIN_PESSIMISTIC_SLOWDOWN, profile_variants
from l2sched.lint.noise import AA_NOISE_FLOOR_US, noise_floor_us
from l2sched.fit.evaluate import HARD_WARNINGS, Evaluator, max_pending_bytes, \
    surrogate_layers
from l2sched.lang.resolve import load_schedule, load_schedule_text
from l2sched.lint import run_lint
from l2sched.model.config import default_config
from l2sched.device import DEVICES_DIR, load_device

ROOT = Path(__file__).resolve().parent.parent
H200_SCHEDULE = ROOT / "schedules" / "glm53-flash-h200-tp4.l2s"
FITTED = {"h200": ROOT / "schedules" / "glm53-flash-h200-tp4-fit.l2s",
          "sm120-rtx-pro-6000-maxq": ROOT / "schedules" / "glm53-flash-sm120-tp4-fit.l2s"}
TOKENS = (1, 4, 16, 64)


def run(*argv, capsys):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def windows(text: str) -> int:
    return len(re.findall(r"^window ", text, flags=re.M))


def lint_clean(text: str, device, tokens=TOKENS) -> None:
    """The schedule text resolves and lints with no error and no hard
    warning at every M on ``device``, and no pending-bytes excess."""
    schedule = load_schedule_text(text, "<fitted>")
    inv = schedule_inventory(schedule)
    for m in tokens:
        lr = run_lint(schedule, inv, device_profile=device, tokens=m)
        bad = [f"{f.code} {f.message}" for f in lr.findings
               if f.severity == "error" or f.code in HARD_WARNINGS]
        assert bad == [], (m, bad)
        assert max_pending_bytes(lr) <= device.capacity_bytes


def idle_h200(where: Path) -> Path:
    """The h200 profile without its measured all-reduce slowdowns (the
    picture of a single-GPU ``bench run``, whose all-reduces are idle
    intervals): a profile on which prefetch pays, so fit has windows to
    choose. With the slowdowns (real NCCL all-reduces) fit says no prefetch
    (``test_the_measured_collective_slowdown_makes_h200_say_no_prefetch``)."""
    text = (DEVICES_DIR / "h200.toml").read_text(encoding="utf-8")
    p = where / "h200-idle.toml"
    p.write_text("".join(ln for ln in text.splitlines(keepends=True)
                         if not ln.startswith("allreduce_slowdown")), encoding="utf-8")
    return p


@pytest.fixture(scope="module")
def quick_h200(tmp_path_factory):
    """Two quick fits of the idle-interval h200 profile (one with two worker
    processes): paths."""
    d = tmp_path_factory.mktemp("fit")
    device = str(idle_h200(d))
    outs = []
    for i, jobs in enumerate(("1", "2")):
        out = d / f"quick{i}.l2s"
        assert main(["fit", "--device", device, "--quick", "--jobs", jobs, "-q",
                     "-o", str(out)]) == 0
        outs.append(out)
    return outs


def test_deterministic_same_bytes_any_jobs(quick_h200):
    a, b = (p.read_text(encoding="utf-8") for p in quick_h200)
    # the files differ only in the -o path of the command line and the name
    assert a.replace("quick0", "quick1") == b
    assert windows(a) > 0


def test_output_is_canonical_checks_and_lints(quick_h200, capsys):
    path = str(quick_h200[0])
    assert run("fmt", "--check", path, capsys=capsys)[0] == 0
    assert run("check", "-q", path, capsys=capsys)[0] == 0
    for m in TOKENS:
        assert run("lint", path, "--tokens", str(m), capsys=capsys)[0] == 0
    text = quick_h200[0].read_text(encoding="utf-8")
    assert "measured by `l2sched profile` on 2026-12-01" in text
    assert "From recorded run-to-run spreads ([measured] p10/p90, [origin] repeats):" in text
    assert "bandwidth.dram_read_gbps: low and high ends of p10/p90" in text
    assert re.search(r"^# Command: l2sched fit --device \S+h200-idle.toml --tp 4 --tokens "
                     r"1,4,16,64 --quick -o \S+quick0.l2s$", text, flags=re.M)
    rows = re.findall(r"^#   (\d+) +1 +([+-]\d+\.\d) +([+-]\d+\.\d) +(\d+\.\d)$",
                      text, flags=re.M)
    assert [int(r[0]) for r in rows] == list(TOKENS)
    assert all(float(lb) <= float(med) for _, med, lb, _ in rows)
    assert [float(r[3]) for r in rows] == [3.9, 17.2, 17.3, 31.1]


def test_default_search_beats_the_shipped_h200_schedule(tmp_path):
    """The real default search: a schedule that lints clean and whose
    lower-bound gain, summed over M, is at least the shipped schedule's.
    (The recalibrated model predicts the shipped schedule to lose at some M
    by more than the floor, so its objective is None; the comparison is on
    the summed lower bounds, which exist for every feasible schedule.)"""
    out = tmp_path / "fit.l2s"
    assert main(["fit", "--device", "h200", "-q", "-o", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    device = load_device("h200")
    lint_clean(text, device)
    search = Search(device, FitOptions())
    names = tuple(v.name for v in search.variants)
    shipped, fitted = search.final.evaluate_many(
        [H200_SCHEDULE.read_text(encoding="utf-8"), text])

    def lower_bounds(ev):
        return sum(min(ev.gains[v][m] for v in names) for m in TOKENS)

    assert fitted.feasible  # the shipped one is not (its pending bytes exceed the
    # effective L2 in the high variant at M=64), but its gains are computed
    assert lower_bounds(fitted) >= lower_bounds(shipped)
    ours = search.objective(fitted, names)
    assert ours is not None and ours == pytest.approx(lower_bounds(fitted))
    got = float(re.search(r"Objective \(weighted sum of lower bounds\): ([+-][\d.]+)",
                          text).group(1))
    assert got == pytest.approx(ours, abs=0.06)
    search.final.close()
    search.search.close()


def _profile_text(**subs: str) -> str:
    text = (DEVICES_DIR / "h200.toml").read_text(encoding="utf-8")
    for pattern, repl in subs.items():
        text, n = re.subn(pattern, repl, text, flags=re.M)
        assert n, pattern
    return text


def test_no_prefetch_when_fills_cannot_pay_off(tmp_path, capsys):
    """Fills that land nothing useful (effect 0) only cost: no windows,
    a header saying why, exit 0, and the answer checks and lints."""
    prof = tmp_path / "h200-nofill.toml"
    prof.write_text(_profile_text(**{r"^effect = .*$": "effect = 0.0",
                                     r"^landed = .*$": "landed = [[8, 0.0], [48, 0.0]]",
                                     r"^fill_effect = .*$": "fill_effect = 0.0"}),
                    encoding="utf-8")
    out = tmp_path / "none.l2s"
    code, _, err = run("fit", "--device", str(prof), "--quick", "-o", str(out),
                       capsys=capsys)
    assert code == 0 and "NO PREFETCH" in err
    text = out.read_text(encoding="utf-8")
    assert windows(text) == 0
    assert "# NO PREFETCH: no candidate's lower-bound gain beat the noise floor" in text
    assert run("check", "-q", str(out), capsys=capsys)[0] == 0
    assert run("lint", str(out), "--device", str(prof), capsys=capsys)[0] == 0
    assert run("fmt", "--check", str(out), capsys=capsys)[0] == 0


def test_zero_window_schedule_is_accepted(tmp_path, capsys):
    f = tmp_path / "empty.l2s"
    f.write_text("schedule empty\nmodel glm5next\ndevice h200\ntp 4\n", encoding="utf-8")
    code, out, _ = run("check", str(f), capsys=capsys)
    assert code == 0 and "0 windows" in out
    code, out, _ = run("lint", str(f), capsys=capsys)
    assert code == 0 and "+0.0% step time" in out


def _scale_fill(device, effect: float, slowdown: float, gbps: float):
    modes = {m: dataclasses.replace(
        fm, effect=min(1.0, fm.effect * effect),
        landed=tuple((x, min(1.0, y * effect)) for x, y in fm.landed),
        slowdown=fm.slowdown * slowdown, gbps=fm.gbps * gbps)
        for m, fm in device.fill_modes.items()}
    return dataclasses.replace(device, fill_modes=modes)


@settings(max_examples=3, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(effect=st.floats(0.3, 1.2), slowdown=st.floats(0.5, 3.0),
       gbps=st.floats(0.6, 1.2), dram=st.floats(0.8, 1.1),
       latency=st.floats(0.5, 1.5), l2=st.floats(0.6, 1.0),
       protected=st.floats(0.0, 2.0))
def test_constraints_hold_on_perturbed_h200(effect, slowdown, gbps, dram, latency,
                                            l2, protected):
    base = load_device("h200")
    dev = _scale_fill(base, effect, slowdown, gbps)
    dev = dataclasses.replace(
        dev, dram_read_gbps=base.dram_read_gbps * dram,
        effective_l2_bytes=int(base.effective_l2_bytes * l2),
        evict_last_protected_bytes=int(base.evict_last_protected_bytes * protected),
        allreduce={tp: dataclasses.replace(m, latency_us=m.latency_us * latency)
                   for tp, m in base.allreduce.items()})
    tokens = (1, 64)
    search = Search(dev, FitOptions(tokens=tokens, quick=True))
    result = search.run()
    text = fit_text(result, search, device_arg="perturbed", command="test",
                    name="perturbed")
    lint_clean(text, dev, tokens)
    if result.candidate is not None:
        assert result.objective > result.floor
        assert all(lb >= -floor for _, _, _, lb, floor in result.rows)


def test_evaluation_equals_run_lint():
    """The evaluator's gains are run_lint's (full model) and the
    surrogate's are within 0.5 us of them."""
    device = load_device("h200")
    variants, _ = profile_variants(device)
    cfg = default_config("glm5next")
    text = H200_SCHEDULE.read_text(encoding="utf-8")
    full = Evaluator(cfg, 4, variants[:1], (1, 16), capacity=device.capacity_bytes,
                     surrogate=False).evaluate(text)
    sur = Evaluator(cfg, 4, variants[:1], (1, 16), capacity=device.capacity_bytes,
                    surrogate=True).evaluate(text)
    schedule = load_schedule(str(H200_SCHEDULE))
    inv = schedule_inventory(schedule)
    for m in (1, 16):
        lr = run_lint(schedule, inv, device_profile=device, tokens=m)
        want = lr.step_period("base") - lr.step_period("sim")
        assert full.gains["median"][m] == pytest.approx(want, abs=1e-6)
        assert sur.gains["median"][m] == pytest.approx(want, abs=0.5)


def test_surrogate_keeps_every_neighbourhood():
    kinds = ["kda+dense"] * 3 + ["mla+moe" if i % 4 == 3 else "kda+moe"
                                 for i in range(3, 45)]
    keep = surrogate_layers(kinds)
    assert keep == [0, 1, 2, 3, 40, 41, 42, 43, 44]


def test_pessimistic_variants():
    h200 = load_device("h200")
    variants, info = profile_variants(h200)
    assert [v.name for v in variants] == ["median", "low", "high"]
    low, high = variants[1].device_profile, variants[2].device_profile
    m = h200.measured["bandwidth.dram_read_gbps"]
    # the ends of the recorded spread (issue 32: the same for any value inside it)
    assert low.dram_read_gbps == pytest.approx(m["p10"])
    assert high.dram_read_gbps == pytest.approx(m["p90"])
    copy, lcopy = h200.fill_modes["copy"], low.fill_modes["copy"]
    assert lcopy.effect == pytest.approx(copy.effect * 0.8)
    assert lcopy.landed[1][1] == pytest.approx(copy.landed[1][1] * 0.8)
    assert lcopy.slowdown == pytest.approx(copy.slowdown * 1.5)
    hot = low.op_times("glm5next")[("kda+moe", "attn.o_proj")].hot_us[0]
    c, h = h200.op_times("glm5next")[("kda+moe", "attn.o_proj")].cold_us[0], \
        h200.op_times("glm5next")[("kda+moe", "attn.o_proj")].hot_us[0]
    assert hot == pytest.approx(h + 0.25 * (c - h))
    assert info.from_measurements
    sm = load_device("sm120-rtx-pro-6000-maxq")
    variants, info = profile_variants(sm)
    assert [v.name for v in variants] == ["median", "low"]
    assert not info.from_measurements
    # no measured spread: the fixed factor x1.5 on each written slowdown
    bulk, lbulk = sm.fill_modes["bulk"], variants[1].device_profile.fill_modes["bulk"]
    assert bulk.slowdown * 1.5 > MIN_PESSIMISTIC_SLOWDOWN
    assert lbulk.slowdown == pytest.approx(bulk.slowdown * 1.5)
    assert lbulk.attention_slowdown == pytest.approx(bulk.attention_slowdown * 1.5)
    assert lbulk.routing_slowdown == pytest.approx(bulk.routing_slowdown * 1.5)
    # a fill with no slowdown (0) still gets the smallest pessimistic one
    unslowed = dataclasses.replace(sm, fill_modes={"bulk": dataclasses.replace(
        bulk, slowdown=0.0, attention_slowdown=None, routing_slowdown=None)})
    lbulk = profile_variants(unslowed)[0][1].device_profile.fill_modes["bulk"]
    assert lbulk.slowdown == pytest.approx(MIN_PESSIMISTIC_SLOWDOWN)
    assert lbulk.attention_slowdown is None and lbulk.routing_slowdown is None


def test_noise_floor_defaults():
    assert [noise_floor_us(m) for m in TOKENS] == [3.9, 17.2, 17.3, 31.1]
    assert noise_floor_us(2) == AA_NOISE_FLOOR_US[1]  # log-nearest, ties low
    assert noise_floor_us(256) == AA_NOISE_FLOOR_US[64]
    opts = FitOptions(tokens=(1, 4), weights=(2.0, 0.5), noise_floor={1: 1.0})
    assert (opts.weight(1), opts.weight(4), opts.floor(1), opts.floor(4)) == \
        (2.0, 0.5, 1.0, 17.2)


def test_estimate_profile_header_says_unverified(tmp_path, capsys):
    out = tmp_path / "sm.l2s"
    code, _, _ = run("fit", "--device", "sm120-rtx-pro-6000-maxq", "--quick",
                     "--tokens", "1,64", "-o", str(out), capsys=capsys)
    assert code == 0
    text = out.read_text(encoding="utf-8")
    assert "ESTIMATE, unverified" in text and "UNVERIFIED" in text
    assert "NOT from measurements" in text
    assert "kernel bulk" in text
    assert run("check", "-q", str(out), capsys=capsys)[0] == 0


@pytest.mark.parametrize("argv, message", [
    # a bad --device is an input error (exit 1) in every command:
    # tests/test_new_user_cli.py::test_every_command_reads_device_alike
    (["--device", "h200", "--tokens", "1,x"], "--tokens takes comma-separated numbers"),
    (["--device", "h200", "--tokens", "4,1"], "--tokens must be increasing whole numbers"),
    (["--device", "h200", "--weights", "1,2"], "--weights takes one number >= 0 per"),
    (["--device", "h200", "--weights", "0,0,0,0"], "--weights takes one number >= 0"),
    (["--device", "h200", "--noise-floor-us", "1,2"], "--noise-floor-us takes one number"),
    (["--device", "sm120-rtx-pro-6000-maxq", "--kernel", "copy"],
     "--kernel copy: device profile sm120-rtx-pro-6000-maxq has numbers for bulk only"),
    (["--device", "h200", "--tp", "0"], "--tp must be at least 1, got 0"),
    (["--device", "h200", "--tp", "3", "--quick"], "--tp 3: linear_head_dim*linear_num_heads"),
    (["--device", "h200", "--tokens", "1,,4"], "--tokens takes comma-separated numbers"),
    (["--device", "h200", "--tokens", "1,300"],
     "--tokens 300: above the fitted schedule's max_tokens 256"),
])
def test_bad_options_are_one_line_usage_errors(argv, message, capsys):
    code, _, err = run("fit", *argv, capsys=capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("l2sched fit: error: ")
    assert message in lines[0]


def test_unknown_kernel_is_an_argparse_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["fit", "--device", "h200", "--kernel", "dma"])
    assert e.value.code == 2
    assert "l2sched fit: error: argument --kernel: invalid choice: 'dma'" in \
        capsys.readouterr().err


@pytest.mark.parametrize("device", sorted(FITTED))
def test_committed_fitted_schedules_are_what_their_command_writes(
        device, capsys, tmp_path, monkeypatch):
    """Issue 34 item 4: the header's command, run now, writes the committed
    file byte for byte (its numbers, quoted by docs/fit.md, are current)."""
    path = FITTED[device]
    cmd = re.search(r"^# Command: l2sched (.+)$", path.read_text(encoding="utf-8"),
                    re.M).group(1).split()
    assert cmd[-2:] == ["-o", f"schedules/{path.name}"], cmd
    monkeypatch.chdir(tmp_path)
    (tmp_path / "schedules").mkdir()
    assert run(*cmd, "-q", capsys=capsys)[0] == 0
    new = (tmp_path / "schedules" / path.name).read_text(encoding="utf-8")
    assert new == path.read_text(encoding="utf-8"), (
        f"regenerate: l2sched {' '.join(cmd)}")


@pytest.mark.parametrize("device", sorted(FITTED))
def test_committed_fitted_schedules(device, capsys):
    path = FITTED[device]
    text = path.read_text(encoding="utf-8")
    assert run("fmt", "--check", str(path), capsys=capsys)[0] == 0
    assert run("check", "-q", str(path), capsys=capsys)[0] == 0
    lint_clean(text, load_device(device))
    # the SM120 estimate's fill-vs-all-reduce slowdown is not measured: its
    # windows are written only with --allow-unmeasured (issue 32)
    flag = "--allow-unmeasured " if device.startswith("sm120") else ""
    assert f"# Command: l2sched fit --device {device} --tp 4 --tokens 1,4,16,64 {flag}-o " \
        f"schedules/{path.name}" in text
    if device.startswith("sm120"):
        assert "ESTIMATE, unverified" in text and "UNVERIFIED" in text
    else:
        assert "measured by `l2sched profile` on 2026-12-01" in text


def test_the_measured_collective_slowdown_makes_h200_say_no_prefetch(tmp_path, capsys):
    """With fill.MODE.allreduce_slowdown measured on 2 H200s with NCCL
    (tests/data/results/h200x2-2026-12-01-T1.json.gz) every candidate loses
    more at the all-reduces than its hits gain: no prefetch, as measured
    there (every schedule arm slower or the same)."""
    out = tmp_path / "h200.l2s"
    code, _, _ = run("fit", "--device", "h200", "--quick", "-q", "-o", str(out),
                     capsys=capsys)
    text = out.read_text(encoding="utf-8")
    assert code == 0 and "# NO PREFETCH" in text and windows(text) == 0
    assert "fill.MODE.allreduce_slowdown x1.5" in text


def test_set_aside_is_zero_unless_asked(quick_h200, tmp_path, capsys):
    """The model charges a set-aside only its expert-stream slowdown
    (docs/fit.md#caveats), so
    by default fit never writes one; ``--set-aside max`` writes the maximum
    and ``--set-aside search`` lets the search choose (and says so in the
    command line of the header)."""
    text = quick_h200[0].read_text(encoding="utf-8")
    assert re.search(r"^set_aside 0$", text, flags=re.M)
    assert "# set_aside 0: not searched" in text
    out = tmp_path / "max.l2s"
    code, _, _ = run("fit", "--device", "h200", "--quick", "--tokens", "1,64",
                     "--set-aside", "max", "-q", "-o", str(out), capsys=capsys)
    text = out.read_text(encoding="utf-8")
    # the measured set-aside cost (l2.set_aside_stream_slowdown) outweighs
    # every fill the model credits: the answer is no prefetch, and a
    # schedule without windows reserves nothing
    assert code == 0 and "# NO PREFETCH" in text and windows(text) == 0
    assert re.search(r"^set_aside 0$", text, flags=re.M)
    assert "--set-aside max" in text
    for m in (1, 64):
        assert run("lint", str(out), "--tokens", str(m), capsys=capsys)[0] == 0


def test_output_path_is_checked_before_the_search(tmp_path, capsys):
    """An unusable -o fails at once with one line, exit 1 (not after the
    search, and not by writing to stdout for an empty path)."""
    import time
    for out, msg in (("", "<empty>:1:1: cannot write: the output path is empty"),
                     (str(tmp_path / "no" / "f.l2s"),
                      f"cannot write: no such directory {tmp_path / 'no'}")):
        t0 = time.monotonic()
        code, stdout, err = run("fit", "--device", "h200", "-o", out, capsys=capsys)
        assert code == 1 and stdout == "" and msg in err, err
        assert time.monotonic() - t0 < 5


def test_own_profile_is_named_by_its_path(tmp_path, capsys):
    """A measured profile of a box (any name) is fitted for, and the fitted
    schedule names that file relative to itself, so check, lint and the
    plugin use the measured numbers, not a shipped profile's."""
    box = tmp_path / "my-box.toml"
    box.write_text((DEVICES_DIR / "h200.toml").read_text(encoding="utf-8").replace(
        'name = "h200"', 'name = "mybox"'), encoding="utf-8")
    (tmp_path / "out").mkdir()
    out = tmp_path / "out" / "f.l2s"
    code, _, _ = run("fit", "--device", str(box), "--quick", "--tokens", "1,64", "-q",
                     "-o", str(out), capsys=capsys)
    text = out.read_text(encoding="utf-8")
    assert code == 0 and re.search(r'^device "\.\./my-box\.toml"$', text, flags=re.M)
    assert "# Fitted for device profile mybox" in text
    assert run("check", "-q", str(out), capsys=capsys)[0] == 0
    assert run("lint", str(out), "--tokens", "1", capsys=capsys)[0] == 0


def test_ctrl_c_is_one_line_and_writes_nothing(tmp_path):
    """SIGINT to the process group (a terminal's Ctrl-C) during the search:
    one line, exit 130, no output file, no temporary file."""
    import os
    import signal
    import subprocess
    import sys
    import time
    out = tmp_path / "f.l2s"
    device = str(idle_h200(tmp_path.parent))  # a search that runs for a while
    p = subprocess.Popen(
        [sys.executable, "-m", "l2sched", "fit", "--device", device, "--jobs", "2",
         "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(ROOT)),
        preexec_fn=lambda: (signal.signal(signal.SIGINT, signal.SIG_DFL), os.setsid()))
    time.sleep(4)
    os.killpg(p.pid, signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert err.strip().splitlines()[-1] == "l2sched fit: interrupted"
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def _session_processes(sid: int) -> list[int]:
    """Pids of the live processes of session ``sid`` (Linux /proc)."""
    import os
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[3]) == sid:  # state, ..., session
            pids.append(int(d))
    return pids


@pytest.mark.skipif(not __import__("os").path.isdir("/proc/self"), reason="needs /proc")
def test_sigterm_stops_the_workers_too(tmp_path):
    """Issue 43: SIGTERM to the fit's process alone (what ``Popen.terminate``,
    ``kill`` and a supervisor send) during a search with worker processes:
    one line, exit 143, no output or temporary file, and no process of its
    session left behind (before, the forkserver and its workers outlived
    the parent and held its stdout, so a caller waiting for EOF hung)."""
    import os
    import signal
    import subprocess
    import sys
    import time
    out = tmp_path / "f.l2s"
    device = str(idle_h200(tmp_path.parent))  # a search that runs for a while
    p = subprocess.Popen(
        [sys.executable, "-m", "l2sched", "fit", "--device", device, "--jobs", "2",
         "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(ROOT)), start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while len(_session_processes(p.pid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)  # the parent, the forkserver and a worker at least
        assert len(_session_processes(p.pid)) >= 3, "no worker processes started"
        p.terminate()
        _, err = p.communicate(timeout=120)
        assert p.returncode == 128 + signal.SIGTERM, err
        assert err.strip().splitlines()[-1] == "l2sched fit: terminated"
        assert "Traceback" not in err
        deadline = time.monotonic() + 10
        while _session_processes(p.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _session_processes(p.pid) == []
        assert list(tmp_path.iterdir()) == []
    finally:
        for pid in _session_processes(p.pid):
            os.kill(pid, signal.SIGKILL)
