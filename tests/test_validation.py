"""The validation rules of docs/lint.md#validation (``bench.validation``) with
exact values, and ``bench report``'s validation section on a synthetic result
with an A/A arm: predictions from the lint with the result's profile, never
from the run's own arms."""
import json
import statistics
from pathlib import Path

import pytest

from l2sched.bench.arms import arm_specs

from lab.bench.arms import validation_variants
from l2sched.bench.arms import AA_ARM
from lab.bench.validation import (
    AA_MIN_FLOOR_US,
    THRESHOLDS,
    aa_noise_floor,
    spearman,
    three_way,
    validate,
)

SCHED = "schedules/glm53-flash-h200-tp4.l2s"


def test_three_way_is_symmetric_and_strict():
    assert three_way(10.1, 10) == "faster"
    assert three_way(10, 10) == "same"
    assert three_way(-10, 10) == "same"
    assert three_way(-10.1, 10) == "slower"


def test_spearman_ranks_with_ties():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # monotone but not linear: Spearman is 1 where Pearson is not
    assert spearman([1, 2, 3, 4], [1, 10, 100, 1000]) == pytest.approx(1.0)
    # ties get the mean rank: ranks x = 1, 2.5, 2.5, 4
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(
        statistics.correlation([1, 2.5, 2.5, 4], [1, 2, 3, 4]))
    assert spearman([1, 1, 1], [1, 2, 3]) is None
    assert spearman([1, 2], [1, 2]) is None


def test_aa_floor_grows_with_noise_and_is_deterministic():
    quiet = [100.0 + 0.1 * (i % 3) for i in range(40)]
    noisy = [100.0 + 8.0 * ((i * 7) % 5 - 2) for i in range(40)]
    f_quiet = aa_noise_floor(quiet, list(reversed(quiet)))
    f_noisy = aa_noise_floor(noisy, list(reversed(noisy)))
    assert f_quiet == AA_MIN_FLOOR_US
    assert f_noisy > 5 * f_quiet
    assert aa_noise_floor(noisy, list(reversed(noisy))) == f_noisy
    with pytest.raises(ValueError):
        aa_noise_floor([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        aa_noise_floor([], [])


def test_validate_counts_figures_and_marks():
    rows = [
        {"arm": "a", "M": 1, "pred_gain_us": 30, "meas_gain_us": 25, "floor_us": 10},   # agree
        {"arm": "b", "M": 1, "pred_gain_us": 30, "meas_gain_us": 5, "floor_us": 10},    # no
        {"arm": "c", "M": 1, "pred_gain_us": -20, "meas_gain_us": -40, "floor_us": 10},  # agree
        {"arm": "d", "M": 4, "pred_gain_us": 0, "meas_gain_us": 2, "floor_us": 10},     # agree
    ]
    v = validate(rows)
    assert [r["agree"] for r in v["rows"]] == [True, False, True, True]
    assert v["verdict_agreement"] == 0.75
    assert v["median_abs_gain_err_us"] == statistics.median([5, 25, 20, 2])
    assert [r["gain_err_us"] for r in v["rows"]] == [5, 25, 20, -2]
    assert v["met"] == {"verdict_agreement": False, "median_abs_gain_err_us": True,
                        "spearman": v["spearman"] >= THRESHOLDS["spearman"]}
    assert v["spearman_per_m"]["4"] is None
    assert validate([])["met"] == {"verdict_agreement": False,
                                   "median_abs_gain_err_us": False, "spearman": False}


def test_validation_arms_cover_kernels_windows_and_bad_schedules():
    names = [a["name"] for a in arm_specs(SCHED, "schedules/bench", False,
                                                  validation_variants(SCHED), aa=True)]
    assert names[:2] == ["none", AA_ARM]
    sched_arms = [n for n in names if n not in ("none", AA_ARM)]
    assert len(sched_arms) >= 12
    for w, mb in (("A", 17), ("A_MLA", 24), ("B", 30), ("C", 10)):
        assert f"only-{w}-{mb}MB" in names and f"only-{w}-{mb / 2:g}MB" in names
    from l2sched.device import load_device
    own = load_device("h200").fill_default  # the kernel the compiled arm runs
    assert {f"kernel-{k}" for k in ("bulk", "copy", "load") if k != own} <= set(names)
    assert f"kernel-{own}" not in names and "bench/fill-over-experts" in names
    v = {x.split(":")[0]: x.split(":")[1].split(",") for x in validation_variants(SCHED)}
    assert v["only-B-15MB"] == ["window.A.budget=0MB", "window.A_MLA.budget=0MB",
                                "window.C.budget=0MB", "window.B.budget=15MB"]
    assert AA_ARM not in [a["name"] for a in arm_specs(SCHED, "", False, [], False)]


def _st(xs):
    s = sorted(xs)
    return {"median": statistics.median(s), "p10": s[len(s) // 10],
            "p90": s[(9 * len(s)) // 10], "n": len(s)}


def test_report_validation_section(tmp_path):
    pytest.importorskip("torch", reason="needs torch: pip install -e '.[vllm]'")
    from lab.bench.report import report
    from l2sched.lang.resolve import load_schedule
    from l2sched.lint import run_lint
    from l2sched.model.config import load_model_config
    from l2sched.device import load_device
    from l2sched.model.inventory import analytical_inventory

    rounds = 30
    none = [1000.0 + (i % 5) for i in range(rounds)]
    aa = [1000.0 + ((i + 2) % 5) for i in range(rounds)]
    fast = [t - 50 for t in none]
    slow = [t + 50 for t in none]
    arms = {}
    for name, xs in (("none", none), (AA_ARM, aa), ("compiled", fast),
                     ("bench/fill-over-experts", slow)):
        arms[name] = {"per_op_source": "graph", "ops": {}, "fills": {},
                      "graph_step_us": _st(xs), "graph_step_us_all": xs,
                      "expert_stream_us": _st([200.0] * 3)}
    specs = [{"name": "none", "path": None, "overrides": []},
             {"name": AA_ARM, "path": None, "overrides": []},
             {"name": "compiled", "path": SCHED, "overrides": []},
             {"name": "bench/fill-over-experts", "path": "schedules/bench/fill-over-experts.l2s",
              "overrides": []}]
    res = {"kind": "l2sched bench", "arms": specs, "machine": {"gpu": "synthetic"},
           "replays": rounds,
           "per_m": {"1": {"arms": arms, "distinct_experts": 8,
                           "ideal": {"ideal_gain_us": 200.0, "consumers": []}}}}
    src = tmp_path / "bench.json"
    src.write_text(json.dumps(res))
    s = report(str(src), str(tmp_path / "s.json"), str(tmp_path / "s.md"), "cmd")
    v = s["validation"]
    from l2sched.bench.arms import spin_collectives
    prof = spin_collectives(load_device("h200"))  # a bench run's all-reduces are idle intervals
    inv = analytical_inventory(load_model_config(None), tp=4, ep=False, tp_rank=0)
    pred = {}
    for name, path in (("compiled", SCHED),
                       ("bench/fill-over-experts", "schedules/bench/fill-over-experts.l2s")):
        lr = run_lint(load_schedule(path, []), inv, device_profile=prof, tokens=1,
                      model_config=load_model_config(None))
        pred[name] = lr.step_period("base") - lr.step_period("sim")
    rows = {r["arm"]: r for r in v["rows"]}
    assert set(rows) == {"compiled", "bench/fill-over-experts"}
    assert rows["compiled"]["meas_gain_us"] == 50 and rows["compiled"]["meas_verdict"] == "faster"
    assert rows["bench/fill-over-experts"]["meas_verdict"] == "slower"
    for name, r in rows.items():
        # the prediction is the uncalibrated lint's: the run's arms do not feed it
        assert r["pred_gain_us"] == pytest.approx(pred[name], abs=1e-6)
        assert r["floor_us"] == v["floors"]["1"]["floor_us"]
    assert v["profile_measured"] == prof.is_measured
    md = (tmp_path / "s.md").read_text()
    assert "## Validation (out of sample)" in md
    assert f"| compiled | 1 | {pred['compiled']:+.1f} | +50.0 |" in md
    if not prof.is_measured:
        assert "NOT a validation" in md
        assert not any(t["met"] for t in s["targets"] if "out of sample" in t["target"])


def test_perturbations_of_a_schedule():
    from lab.bench.arms import perturbation_variants
    v = {x.split(":")[0]: x.split(":")[1].split(",") for x in perturbation_variants(SCHED)}
    assert v["budgets+25%"] == ["window.A.budget=21250KB", "window.A_MLA.budget=30000KB",
                                "window.B.budget=37500KB", "window.C.budget=12500KB"]
    assert v["budgets-25%"][0] == "window.A.budget=12750KB"
    assert v["without-B"] == ["window.B.budget=0MB"]  # 30 MB x 42 layers
    from l2sched.device import load_device
    own = load_device("h200").fill_default
    (kernel,) = [k for k in v if k.startswith("kernel-")]
    assert kernel != f"kernel-{own}"
    names = [a["name"] for a in arm_specs(SCHED, "", False, perturbation_variants(SCHED),
                                              aa=True)]
    assert names[:3] == ["none", AA_ARM, "compiled"] and "budgets+25%" in names


def test_result_arms_carry_their_schedule_text(tmp_path):
    """A result records each arm's schedule text, so its report lints what
    was measured even when the file was temporary or has changed since."""
    from l2sched.bench.arms import arm_schedule, schedule_text
    from l2sched.errors import L2sError
    src = Path(__file__).resolve().parent.parent / "schedules" / "glm53-flash-h200-tp4.l2s"
    gone = tmp_path / "previous.l2s"
    gone.write_text(src.read_text(encoding="utf-8"), encoding="utf-8")
    arm = {"name": "bench/previous", "path": str(gone), "overrides": ["policy=evict_normal"],
           "schedule_text": schedule_text(str(gone))}
    gone.unlink()
    sched = arm_schedule(arm)
    assert sched.policy == "evict_normal" and len(sched.windows) > 0
    with pytest.raises(L2sError, match="previous.l2s"):
        arm_schedule(dict(arm, schedule_text=None))
    assert schedule_text(None) is None


def test_runtime_items_of_a_variant_go_to_install_and_runtime():
    """``join=every-layer`` and ``launch=CHOICE`` are not schedule settings:
    they reach ``install_plan`` and the runtime, the rest the schedule."""
    arms = {a["name"]: a for a in arm_specs(SCHED, "", False, [
        "j:window.C.budget=5MB,join=every-layer",
        "d:launch=deferred,policy=evict_normal",
        "both:launch=deferred,join=every-layer",
        "leaf:launch=leaf-deferred"], False)}
    assert arms["j"]["overrides"] == ["window.C.budget=5MB"]
    assert arms["j"]["install"] == {"join_every_layer": True} and "runtime" not in arms["j"]
    assert arms["d"]["overrides"] == ["policy=evict_normal"]
    assert arms["d"]["runtime"] == {"capture_launch": "deferred"} and "install" not in arms["d"]
    assert arms["leaf"]["runtime"] == {"capture_launch": "leaf-deferred"}
    assert arms["both"]["overrides"] == []
    assert (arms["both"]["install"], arms["both"]["runtime"]) == \
        ({"join_every_layer": True}, {"capture_launch": "deferred"})
    assert "runtime" not in arms["compiled"] and "install" not in arms["compiled"]


def test_grid_item_sets_the_fill_kernels_ctas_and_refuses_a_non_count():
    """``grid=N`` launches the arm's fills with N CTAs (a runtime keyword, not
    a schedule setting); a count that is not an integer in 1..MAX_GRID is
    refused before anything runs, naming the variant."""
    from l2sched.bench.arms import MAX_GRID, check_variants
    arms = {a["name"]: a for a in arm_specs(SCHED, "", False, [
        "g:window.C.budget=5MB,grid=32,launch=deferred"], False)}
    assert arms["g"]["overrides"] == ["window.C.budget=5MB"]
    assert arms["g"]["runtime"] == {"grid": 32, "capture_launch": "deferred"}
    check_variants(["g:grid=8"], SCHED)
    for bad in ("grid=0", "grid=x", f"grid={MAX_GRID + 1}", "grid=-4", "grid", "grid=+8",
                "grid = 8", "grid=1_0", "grid=\u0668"):
        with pytest.raises(ValueError, match=r"--variant g: grid takes grid=N, a CTA count"):
            check_variants([f"g:{bad}"], SCHED)
    with pytest.raises(ValueError, match="--variant g: grid given twice"):
        check_variants(["g:grid=8,grid=16"], SCHED)
    with pytest.raises(ValueError, match="the arm needs a name"):
        check_variants(["grid=8"], SCHED)  # the name forgotten


def test_report_says_when_a_given_profile_is_not_used(capsys):
    """A result that records the profile it ran with is linted with that copy;
    a ``--device-profile`` given beside it is named as not used, never
    dropped silently."""
    from pathlib import Path

    from lab.bench.report import _lint_profile
    text = (Path(__file__).resolve().parent.parent / "l2sched" / "data" / "devices"
            / "h200.toml").read_text(encoding="utf-8")
    prof, source = _lint_profile({"device_profile_toml": text}, "gb10", "r.json")
    assert source == "the copy recorded in the result" and prof.name == "h200"
    assert "--device-profile gb10 is not used: r.json records" in capsys.readouterr().err
    _lint_profile({"device_profile_toml": text}, "", "r.json")
    assert capsys.readouterr().err == ""


def test_bench_run_refuses_fewer_than_one_replay(tmp_path, capsys):
    """``--replays 0`` or negative: exit 2 naming it, before anything runs,
    no result written."""
    from l2sched.cli import main
    for n in ("0", "-1"):
        out = tmp_path / f"r{n}.json"
        assert main(["bench", "run", "--dry", "--tokens", "4", "--replays", n,
                     "-o", str(out)]) == 2
        assert f"--replays must be at least 1, got {n}" in capsys.readouterr().err
        assert not out.exists()
