"""Dispatch controls (``bench.controls``, docs/bench.md#dispatch-controls):
every validation arm gets a control with the same fills at the same hook
points, each cut to a 4 KiB head (or, as a decoy, reading a scratch
buffer); a report adds each control's residual
from ANOTHER run to the lint's prediction, on the committed one-GPU runs D1
and D2 (cut to two M and a few arms to stay quick)."""

from __future__ import annotations

import gzip
import json

import pytest

from l2sched.bench import shipped_path
from l2sched.bench.arms import arm_specs, check_variants
from lab.bench.calibrate_model import control_residuals, gain_rows, recorded_profile
from l2sched.bench.controls import CONTROL_PREFIX, control_arms
from lab.bench.arms import validation_variants
from lab.bench.controls import residuals, with_controls
from l2sched.bench.arms import AA_ARM
from lab.bench.validation import validate
from l2sched.compiler.compile import compile_plan
from l2sched.errors import L2sError, L2sInputError
from l2sched.lang.resolve import load_schedule
from l2sched.model.config import load_model_config
from l2sched.device import load_device
from l2sched.model.inventory import analytical_inventory
from lab import main as lab_main

SCHED = "schedules/glm53-flash-h200-tp4.l2s"
RESULTS = "tests/data/results/h200-2026-12-01-controls-"
KEEP_ARMS = ("none", AA_ARM, "compiled", "only-C-5MB", "kernel-bulk")
KEEP_M = ("4", "16")


def _plan(arm, inv):
    return compile_plan(load_schedule(shipped_path(arm["path"]), arm["overrides"]), inv, 0)


def _fills(plan):
    return [(i.window, i.hook, i.layer, i.kernel) for i in plan.issues if i.ranges]


def test_every_validation_arm_has_a_control_with_the_same_fills():
    arms = arm_specs(SCHED, "schedules/bench", False, validation_variants(SCHED), aa=True,
                     controls=True)
    by_name = {a["name"]: a for a in arms}
    scheduled = [a for a in arms if a["path"] and not a["name"].startswith(CONTROL_PREFIX)]
    inv = analytical_inventory(load_model_config(None), tp=4, ep=False, tp_rank=0)
    assert scheduled and all(CONTROL_PREFIX + a["name"] in by_name for a in scheduled)
    for a in scheduled:
        ctl = by_name[CONTROL_PREFIX + a["name"]]
        assert ctl["control_of"] == a["name"]
        plan, cplan = _plan(a, inv), _plan(ctl, inv)
        assert _fills(cplan) == _fills(plan), a["name"]
        # each fill fetches a 4 KiB head at most; the arm's own fetch far more
        assert all(i.nbytes <= 4096 for i in cplan.issues), a["name"]
        assert sum(i.nbytes for i in plan.issues) > 100 * sum(i.nbytes for i in cplan.issues)


def test_a_window_the_arm_leaves_empty_stays_empty_in_its_control():
    # budget-over-l2: window B takes everything, so C (carry) issues nothing;
    # at 4 KiB B would leave bytes that C would then fetch: C goes to 0 B
    arm = {"name": "bench/budget-over-l2", "path": "schedules/bench/budget-over-l2.l2s",
           "overrides": []}
    (ctl,), notes = control_arms([arm])
    assert notes == [] and "window.C.budget=0MB" in ctl["overrides"]
    assert "window.B.budget=4KiB" in ctl["overrides"]


def test_no_control_for_arms_without_a_schedule_and_a_note_for_a_runtime_kernel():
    arms = [{"name": "none", "path": None, "overrides": []},
            {"name": "load", "path": SCHED, "overrides": [], "runtime": {"mode": "load"}}]
    got, notes = control_arms(arms)
    assert got == [] and [n.split(":")[0] for n in notes] == ["load"]


def test_a_variant_may_not_take_a_control_name():
    with pytest.raises(ValueError, match="ctl-"):
        check_variants(["ctl-mine:kernel=copy"], SCHED)


def test_with_controls_adds_the_residual_and_leaves_controls_out():
    rows = [{"arm": "a", "M": 4, "pred_gain_us": 10.0, "meas_gain_us": -50.0, "floor_us": 5.0},
            {"arm": "ctl-a", "M": 4, "pred_gain_us": 0.0, "meas_gain_us": -60.0,
             "floor_us": 5.0}]
    res = residuals(rows)
    assert res == {("a", 4): -60.0}
    got = with_controls(rows, res, "cal.json")
    assert [(r["arm"], r["pred_gain_us"], r["lint_gain_us"], r["control_us"]) for r in got] \
        == [("a", -50.0, 10.0, -60.0)]
    with pytest.raises(L2sError, match=r"cal\.json: no control for a at M=4"):
        with_controls(rows, {}, "cal.json")
    # the validation never scores a control arm
    assert validate([dict(r) for r in rows])["n"] == 1


def _cut(tmp_path, which: str) -> str:
    """The committed run ``which`` with only ``KEEP_M`` and ``KEEP_ARMS`` and
    their controls (real measurements, fewer lints)."""
    with gzip.open(RESULTS + which + ".json.gz", "rt") as f:
        d = json.load(f)
    keep = set(KEEP_ARMS) | {CONTROL_PREFIX + a for a in KEEP_ARMS}
    d["arms"] = [a for a in d["arms"] if a["name"] in keep]
    d["per_m"] = {M: {**m, "arms": {k: v for k, v in m["arms"].items() if k in keep}}
                  for M, m in d["per_m"].items() if M in KEEP_M}
    d["tokens"] = [int(M) for M in KEEP_M]
    for m in d["per_m"].values():
        for a in m["arms"].values():  # committed results drop the per-op records
            a.setdefault("ops", {})
            a.setdefault("fills", {})
    out = tmp_path / f"{which}.json"
    out.write_text(json.dumps(d))
    return str(out)


@pytest.fixture(scope="module")
def cut_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("controls")
    return _cut(tmp, "D1"), _cut(tmp, "D2")


def test_a_control_carries_the_lone_window_loss(cut_runs):
    d1, d2 = cut_runs
    prof = load_device("h200")
    res = control_residuals(d1, prof)
    assert set(res) == {(a, int(M)) for a in KEEP_ARMS[2:] for M in KEEP_M}
    rows = {(r["arm"], r["M"]): r for r in gain_rows(json.load(open(d2)), prof)}
    # window C alone at 5 MB loses ~170 us at M=16 in both runs; the lint
    # alone predicts a gain, the control of the other run the loss
    lone = rows[("only-C-5MB", 16)]
    assert lone["meas_gain_us"] < -100 and lone["pred_gain_us"] > 0
    fixed = {(r["arm"], r["M"]): r for r in with_controls(list(rows.values()), res, d1)}
    assert abs(fixed[("only-C-5MB", 16)]["pred_gain_us"] - lone["meas_gain_us"]) < 30
    for M in KEEP_M:  # the lone window's loss at every M, which the lint alone misses
        key = ("only-C-5MB", int(M))
        assert (abs(fixed[key]["pred_gain_us"] - rows[key]["meas_gain_us"])
                < abs(rows[key]["pred_gain_us"] - rows[key]["meas_gain_us"]))


def test_controls_of_a_run_without_them_is_an_error_naming_it(tmp_path, cut_runs):
    d = json.load(open(cut_runs[0]))
    d["arms"] = [a for a in d["arms"] if not a["name"].startswith(CONTROL_PREFIX)]
    for m in d["per_m"].values():
        m["arms"] = {k: v for k, v in m["arms"].items() if not k.startswith(CONTROL_PREFIX)}
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(d))
    with pytest.raises(L2sInputError, match=r"bare\.json: no dispatch-control arm"):
        control_residuals(str(bare), load_device("h200"))
    with pytest.raises(L2sInputError, match="missing.json"):
        control_residuals(str(tmp_path / "missing.json"), load_device("h200"))


def test_bench_report_with_controls(tmp_path, cut_runs):
    pytest.importorskip("torch", reason="needs torch: pip install -e '.[vllm]'")
    from l2sched.cli import main
    d1, d2 = cut_runs
    md = tmp_path / "r.md"
    assert lab_main(["bench", "report", d2, "--controls", d1, "--json-out",
                 str(tmp_path / "r.json"), "--md-out", str(md)]) == 0
    s = json.loads((tmp_path / "r.json").read_text())
    v = s["validation"]
    assert v["controls"] == d1 and v["n"] == 3 * len(KEEP_M)
    # the report lints both runs with the profile the scored run recorded
    res = control_residuals(d1, recorded_profile(json.load(open(d2))))
    for r in v["rows"]:
        assert r["pred_gain_us"] == pytest.approx(r["lint_gain_us"] + res[(r["arm"], r["M"])])
    # the report's schedule-arm totals leave the controls out as well
    assert s["verdict_agreement"]["schedule_arms"]["total"] == 3 * len(KEEP_M)
    text = md.read_text()
    assert "| arm | M | lint gain us | control residual us | predicted gain us |" in text
    assert "residual (measured - predicted gain) of the arm's control" in text


def test_bench_report_pools_the_controls_of_several_runs(tmp_path, cut_runs):
    pytest.importorskip("torch", reason="needs torch: pip install -e '.[vllm]'")
    from l2sched.cli import main
    d1, d2 = cut_runs
    # another run: D1 with every control 10 us faster (its residuals +10 us)
    d = json.load(open(d1))
    for m in d["per_m"].values():
        m["arms"]["none"]["graph_step_us_all"][0] += 0.001  # other no-prefetch rounds
        for name, a in m["arms"].items():
            if name.startswith(CONTROL_PREFIX):
                a["graph_step_us"]["median"] -= 10.0
    d3 = tmp_path / "D3.json"
    d3.write_text(json.dumps(d))
    assert lab_main(["bench", "report", d2, "--controls", d1, "--controls", str(d3),
                 "--json-out", str(tmp_path / "r.json"), "--md-out", str(tmp_path / "r.md")]) == 0
    v = json.loads((tmp_path / "r.json").read_text())["validation"]
    assert v["controls"] == f"{d1} + {d3}"
    res = control_residuals(d1, recorded_profile(json.load(open(d2))))
    for r in v["rows"]:  # the mean of the two runs' residuals
        assert r["pred_gain_us"] == pytest.approx(
            r["lint_gain_us"] + res[(r["arm"], r["M"])] + 5.0, abs=1e-6)
    # the same run twice is refused, and nothing is written
    out = tmp_path / "twice.json"
    assert lab_main(["bench", "report", d2, "--controls", d1, "--controls", d1,
                 "--json-out", str(out), "--md-out", str(tmp_path / "twice.md")]) == 1
    assert not out.exists()


def test_a_controls_run_without_an_arms_control_writes_nothing(tmp_path, cut_runs, capsys):
    pytest.importorskip("torch", reason="needs torch: pip install -e '.[vllm]'")
    from l2sched.cli import main
    d1, d2 = cut_runs
    d = json.load(open(d1))
    for m in d["per_m"].values():
        del m["arms"][CONTROL_PREFIX + "kernel-bulk"]
    part = tmp_path / "part.json"
    part.write_text(json.dumps(d))
    out_json, out_md = tmp_path / "r.json", tmp_path / "r.md"
    assert lab_main(["bench", "report", d2, "--controls", str(part), "--json-out",
                 str(out_json), "--md-out", str(out_md)]) == 1
    err = capsys.readouterr().err
    assert "part.json: no control for kernel-bulk at M=4" in err and len(err.splitlines()) == 1
    assert not out_json.exists() and not out_md.exists()


def test_bench_tp_controls_follow_its_set_overrides():
    from l2sched.bench.tp import arms
    o = {"validation": True, "schedule": SCHED, "controls": True, "bench_dir": "",
         "arm_variants": validation_variants(SCHED),
         "overrides": ["window.A.budget=0MB", "window.A_MLA.budget=0MB"]}
    got = {a["name"]: a for a in arms(o)}
    ov = got["ctl-compiled"]["overrides"]
    # A and A_MLA issue nothing after --set: they stay at 0 B in the control
    assert ov[:2] == o["overrides"]
    assert "window.A.budget=0MB" in ov[2:] and "window.B.budget=4KiB" in ov[2:]
    o["controls"] = False
    assert not any(n.startswith(CONTROL_PREFIX) for n in (a["name"] for a in arms(o)))


def _bad_copy(tmp_path, src: str, name: str, edit) -> str:
    d = json.load(open(src))
    edit(d)
    out = tmp_path / name
    out.write_text(json.dumps(d))
    return str(out)


def test_a_controls_run_that_cannot_serve_the_result_is_refused(tmp_path, cut_runs):
    d1, d2 = cut_runs
    prof = load_device("h200")
    run = json.load(open(d2))

    def refused(path, match):
        with pytest.raises(L2sInputError, match=match):
            control_residuals(path, prof, run, d2)
    # the run itself, even as a copy
    refused(_bad_copy(tmp_path, d2, "copy.json", lambda d: None), "the same run as")
    # the other kind of benchmark
    refused(_bad_copy(tmp_path, d1, "tp.json", lambda d: d.update(kind="l2sched bench tp")),
            "a `bench tp` result cannot be the controls of a `bench run` result")
    # a dry run
    refused(_bad_copy(tmp_path, d1, "dry.json", lambda d: d.update(dry=True)),
            "a --dry result")

    def other_budget(d):
        for a in d["arms"]:
            if a["name"] == "ctl-only-C-5MB":
                a["overrides"] = [o.replace("=5MB", "=6MB") for o in a["overrides"]]
    refused(_bad_copy(tmp_path, d1, "other.json", other_budget),
            "ctl-only-C-5MB was made from another schedule or other overrides than only-C-5MB")

    def other_comments(d):  # the same schedule with other comments is the same schedule
        for a in d["arms"]:
            if a.get("schedule_text"):
                a["schedule_text"] = "# a note\n" + a["schedule_text"].replace("\n", "  # x\n", 3)
    control_residuals(_bad_copy(tmp_path, d1, "comments.json", other_comments), prof, run, d2)

    def other_code(d):
        for a in d["arms"]:
            if a["name"] == "ctl-compiled":
                a["schedule_text"] = a["schedule_text"].replace("policy evict_last",
                                                                "policy evict_normal")
    refused(_bad_copy(tmp_path, d1, "code.json", other_code),
            "ctl-compiled was made from another schedule")

    def nan_step(d):
        d["per_m"]["4"]["arms"]["ctl-compiled"]["graph_step_us"]["median"] = float("nan")
    refused(_bad_copy(tmp_path, d1, "nan.json", nan_step),
            "the control of compiled at M=4 has no finite residual")

    def one_queue(d):
        d["machine"]["cuda_device_max_connections"] = "1"
    run["machine"]["cuda_device_max_connections"] = None  # CUDA's default
    refused(_bad_copy(tmp_path, d1, "queue.json", one_queue),
            "made with CUDA_DEVICE_MAX_CONNECTIONS=1, .* with None")
    # results made before the key was recorded are not checked
    del run["machine"]["cuda_device_max_connections"]
    assert control_residuals(_bad_copy(tmp_path, d1, "queue2.json", one_queue), prof, run, d2)

    def no_aa_rounds(d):
        d["per_m"]["4"]["arms"][AA_ARM]["graph_step_us_all"] = []
    refused(_bad_copy(tmp_path, d1, "noaa.json", no_aa_rounds),
            r"noaa\.json: not a usable controls run")


def test_outputs_may_not_overwrite_the_controls_run(tmp_path, cut_runs, capsys):
    pytest.importorskip("torch", reason="needs torch: pip install -e '.[vllm]'")
    from l2sched.cli import main
    d1, d2 = cut_runs
    cal = tmp_path / "cal.json"
    cal.write_text(open(d1).read())
    before = cal.read_text()
    assert lab_main(["bench", "report", d2, "--controls", str(cal), "--json-out",
                 str(tmp_path / "r.json"), "--md-out", str(cal)]) == 1
    assert "refusing to overwrite the input file" in capsys.readouterr().err
    assert cal.read_text() == before and not (tmp_path / "r.json").exists()
    assert lab_main(["bench", "tp-report", "tests/data/results/h200x2-2026-12-01-T2.json.gz",
                 "--controls", str(cal), "--md-out", str(cal)]) == 1
    assert cal.read_text() == before
    assert lab_main(["bench", "tp-report", "tests/data/results/h200x2-2026-12-01-T2.json.gz",
                 "--controls", str(cal), "--no-lint"]) == 1
    assert "cannot go with --no-lint" in capsys.readouterr().err


def test_controls_need_an_aa_arm_and_name_the_arms_they_skip(tmp_path, capsys):
    pytest.importorskip("torch", reason="needs torch: pip install -e '.[vllm]'")
    from l2sched.cli import main
    assert lab_main(["bench", "run", "--dry", "--controls", "--out", str(tmp_path / "x.json")]) == 2
    assert "--controls needs the A/A arm" in capsys.readouterr().err
    arms = [{"name": "dfr", "path": SCHED, "overrides": [], "runtime": {"capture_launch": "deferred"}}]
    assert control_arms(arms)[1][0].startswith("dfr: an arm with a runtime option")


def test_decoy_rows_move_every_fill_into_the_scratch_buffer():
    """A decoy control reads as many bytes as its arm, each (issue, row) at
    one span of the scratch buffer that stays put, no two spans of a step
    overlapping, and wraps at the buffer's end."""
    from l2sched.bench.controls import DecoyRows
    base = 1 << 40
    dec = DecoyRows(base, 1 << 20)
    a = dec.rows(0, [(0x7000_0000, 4096), (0, 0), (0x7100_0000, 100_000)])
    assert a[0] == (base, 4096) and a[1] == (0, 0)
    assert a[2][1] == 100_000 and a[2][0] == base + 4096
    b = dec.rows(1, [(0x7200_0000, 8192)])
    assert b == [(base + 4096 + 100_000, 8192)]  # spans end to end, 16-byte aligned
    # the same rows bound again (a weight's address unchanged): the same spans
    assert dec.rows(0, [(0x7000_0000, 4096), (0, 0), (0x7100_0000, 100_000)]) == a
    spans = sorted(a[::2] + b)
    assert all(x + n <= y for (x, n), (y, _) in zip(spans, spans[1:]))
    # a row that no longer fits starts again at the buffer's start
    assert dec.rows(2, [(1, (1 << 20) - 8192)]) == [(base, (1 << 20) - 8192)]
    with pytest.raises(ValueError):
        DecoyRows(base, 8)


def test_a_decoy_control_has_the_arms_fills_and_is_linted_without_hits(cut_runs):
    from l2sched.bench.controls import without_hits
    from l2sched.lint import run_lint
    arms = arm_specs(SCHED, "schedules/bench", False, validation_variants(SCHED), aa=True,
                     controls="decoy")
    by_name = {a["name"]: a for a in arms}
    ctl = by_name[CONTROL_PREFIX + "compiled"]
    assert ctl["decoy"] and ctl["overrides"] == by_name["compiled"]["overrides"]
    # a controls run whose controls are decoys: each is linted with fills
    # that land nothing, so it is predicted no better than its arm
    d = json.load(open(cut_runs[0]))
    for a in d["arms"]:
        if a["name"].startswith(CONTROL_PREFIX):
            a["decoy"] = True
            a["overrides"] = next(b for b in d["arms"]
                                  if b["name"] == a["name"][len(CONTROL_PREFIX):])["overrides"]
    prof = recorded_profile(d)
    rows = {(r["arm"], r["M"]): r for r in gain_rows(d, prof)}
    cfg = load_model_config(None)
    inv = analytical_inventory(cfg, tp=4, ep=False, tp_rank=0)
    from l2sched.bench.arms import spin_collectives
    lr = run_lint(load_schedule(SCHED, []), inv, device_profile=without_hits(spin_collectives(prof)),
                  tokens=16, model_config=cfg)
    got = rows[(CONTROL_PREFIX + "compiled", 16)]["pred_gain_us"]
    assert got == pytest.approx(lr.step_period("base") - lr.step_period("sim"))
    assert got < rows[("compiled", 16)]["pred_gain_us"] - 20


def test_a_dry_decoy_controls_run_issues_the_arms_bytes(tmp_path):
    pytest.importorskip("torch", reason="needs torch: pip install -e '.[vllm]'")
    from l2sched.cli import main
    out = tmp_path / "decoy.json"
    assert lab_main(["bench", "run", "--dry", "--validation", "--controls", "decoy",
                 "--tokens", "1", "--replays", "1", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    specs = {a["name"]: a for a in d["arms"]}
    assert specs["ctl-compiled"]["decoy"] and "decoy" not in specs["compiled"]
    st = {k: v["runtime_stats"] for k, v in d["per_m"]["1"]["arms"].items()
          if "runtime_stats" in v}
    assert st["ctl-compiled"]["bytes_issued"] == st["compiled"]["bytes_issued"] > 0
    assert st["ctl-only-C-5MB"]["bytes_issued"] == st["only-C-5MB"]["bytes_issued"]


def _as_decoys(tmp_path, src: str) -> str:
    """A copy of run ``src`` whose control arms are marked decoys."""
    dec = json.load(open(src))
    for a in dec["arms"]:
        if a["name"].startswith(CONTROL_PREFIX):
            a["decoy"] = True
    p = tmp_path / "decoys.json"
    p.write_text(json.dumps(dec))
    return str(p)


def test_reports_say_which_kind_of_controls_they_added(tmp_path, cut_runs):
    from lab.bench.controls import control_lines, status_note
    d1, d2 = cut_runs
    prof = recorded_profile(json.load(open(d2)))
    head = control_residuals(d1, prof)
    assert head.kind == "head"
    p = _as_decoys(tmp_path, d1)
    res = control_residuals(p, prof)
    assert res.kind == "decoy"
    rows = gain_rows(json.load(open(d2)), prof)
    v = validate([dict(r) for r in rows], (res, str(p)))
    assert v["control_kind"] == "decoy" and v["controls"] == str(p)
    assert "scratch buffer" in control_lines(v)[0] and "4 KiB" not in control_lines(v)[0]
    assert "decoy-control residuals" in status_note(str(p), "decoy")
    v = validate([dict(r) for r in rows], (head, d1))
    assert v["control_kind"] == "head" and "4 KiB head" in control_lines(v)[0]
    assert validate([dict(r) for r in rows])["control_kind"] is None


def test_pooled_controls_are_the_mean_of_the_runs_and_refuse_mixed_ones(tmp_path, cut_runs):
    from lab.bench.calibrate_model import pooled_control_residuals
    d1, d2 = cut_runs
    prof = load_device("h200")
    one, two = control_residuals(d1, prof), control_residuals(d2, prof)
    both = pooled_control_residuals([d1, d2], prof)
    assert both.kind == one.kind and set(both) == set(one)
    for k in both:
        assert both[k] == pytest.approx((one[k] + two[k]) / 2)
    assert pooled_control_residuals([d1], prof) == one
    with pytest.raises(L2sInputError, match="given twice"):
        pooled_control_residuals([d1, d1], prof)
    copy = tmp_path / "copy.json"
    copy.write_text(open(d1).read())
    with pytest.raises(L2sInputError, match=r"copy\.json: the same run as"):
        pooled_control_residuals([d1, str(copy)], prof)
    with pytest.raises(L2sInputError, match="different kinds of controls"):
        pooled_control_residuals([d1, _as_decoys(tmp_path, d2)], prof)
    fewer = json.load(open(d2))
    for m in fewer["per_m"].values():
        m["arms"].pop(CONTROL_PREFIX + KEEP_ARMS[-1], None)
    fewer["arms"] = [a for a in fewer["arms"] if a["name"] != CONTROL_PREFIX + KEEP_ARMS[-1]]
    q = tmp_path / "fewer.json"
    q.write_text(json.dumps(fewer))
    with pytest.raises(L2sInputError, match=r"fewer\.json: its controls cover other"):
        pooled_control_residuals([d1, str(q)], prof)
