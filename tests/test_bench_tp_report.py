"""``python -m lab bench tp-report`` on synthetic ``bench tp`` results (no torch, no
ranks): the out-of-sample validation section with exact numbers (measured
step = per-round maximum over ranks, A/A floor, three-way verdicts,
figures), the collective-interference table and its write into a device
profile as ``allreduce_slowdown`` (a small text edit: every other byte of
the profile kept)."""

import copy
import json
import statistics
from pathlib import Path

import pytest

from l2sched.bench.options import SCHEDULE
from l2sched.profile.tp_interference import (allreduce_slowdowns, fill_rows,
                                          write_allreduce_slowdown)
from l2sched.profile.collective_terms import collective_terms_text, update_profile_extras
from lab.bench.tp_report import markdown
from lab.bench.tp_validation import (arm_rounds, collectives_as_run, lint_predictor,
                                        validation, validation_lines)
from l2sched.bench.arms import AA_ARM
from lab.bench.validation import aa_noise_floor
from l2sched.cli import main
from l2sched.device import DEVICES_DIR, load_device, parse_device
from lab import main as lab_main

H200 = DEVICES_DIR / "h200.toml"
ESTIMATE = DEVICES_DIR / "sm120-rtx-pro-6000-maxq.toml"

#: Per arm at M=1: each rank's replay times, round-indexed (us).
ROUNDS = {
    "none": ([100, 102, 101, 103, 100], [101, 100, 104, 100, 102]),   # max: 101 102 104 103 102
    AA_ARM: ([101, 101, 101, 101, 101], [100, 103, 100, 102, 100]),   # max: 101 103 101 102 101
    "compiled": ([80] * 5, [82, 79, 81, 83, 80]),                     # max median 81
    "kernel-bulk": ([130] * 5, [125] * 5),                            # 130
    "only-C-10MB": ([102] * 5, [101] * 5),                            # 102
}
ARMS = [{"name": "none", "path": None, "overrides": []},
        {"name": AA_ARM, "path": None, "overrides": []},
        {"name": "compiled", "path": SCHEDULE, "overrides": []},
        {"name": "kernel-bulk", "path": SCHEDULE, "overrides": ["kernel=bulk"]},
        {"name": "only-C-10MB", "path": SCHEDULE,
         "overrides": ["window.A.budget=0MB", "window.A_MLA.budget=0MB",
                       "window.B.budget=0MB", "window.C.budget=10MB"]}]
STUB = {"compiled": (25.0, []), "kernel-bulk": (-30.0, []), "only-C-10MB": (5.0, ["L2S107"])}

#: The interference rows: bytes -> per rank {mode: extra median} (p10/p90 = -/+1).
EXTRA = {8192: ({"copy": 3.0, "bulk": 1.0, "load": 6.0}, {"copy": 4.0, "bulk": -2.0, "load": 8.0}),
         524288: ({"copy": 5.0, "bulk": 0.0, "load": 10.0},
                  {"copy": 6.0, "bulk": -1.0, "load": 12.0}),
         33554432: ({"copy": 100.0, "bulk": 100.0, "load": 100.0},
                    {"copy": 100.0, "bulk": 100.0, "load": 100.0})}


def _stats(xs):
    return {"median": statistics.median(xs), "p10": min(xs), "p90": max(xs), "n": len(xs)}


def _result(profile: Path = H200, *, backend="nccl", dry=False) -> dict:
    ranks = []
    for rank in (0, 1):
        arms = {name: {"graph_step_us": _stats(ts[rank]), "graph_step_us_all": ts[rank],
                       "allreduce_check": {"calls": 4, "passed": 4}}
                for name, ts in ROUNDS.items()}
        for name in STUB:
            arms[name]["runtime_stats"] = {"enabled": True, "issued": 9}
        fill_rows_ = []
        for b, per in EXTRA.items():
            fill_rows_.append({"tokens": b // 8192, "bytes": b,
                               "alone_us": _stats([15.0]), "alone_us_all": [15.0],
                               "modes": {m: {"with_fill_us": _stats([15.0 + x]),
                                             "extra_us": {"median": x, "p10": x - 1,
                                                          "p90": x + 1, "n": 1}}
                                         for m, x in per[rank].items()}})
        ranks.append({
            "rank": rank, "tp_rank": rank, "hidden": 4096,
            "plans": {name: {"issues": 9} for name in STUB},
            "machine": {"torch": "2.x", "gpu": "GPU", "nccl": "2.x", "cuda": "13"},
            "allreduce": [{"bytes": b, "tokens": b // 8192, "model_us": 14.0,
                           "model_ws_us": 14.0, "eager_us": _stats([t]),
                           "graph_us": _stats([t])}
                          for b, t in ((8192, 15.0), (131072, 16.0), (2097152, 36.0))],
            "allreduce_fill": {"fill_bytes": 30 * 10**6, "iters": 1, "policy": "evict_last",
                               "modes": {m: {} for m in ("bulk", "copy", "load")},
                               "rows": fill_rows_},
            "per_m": {"1": {"allreduce_bytes": 8192, "allreduce_model_us": 14.0,
                            "arms": arms}}})
    return {"kind": "l2sched bench tp", "note": "synthetic", "date": "2026-12-02",
            "argv": [], "world_size": 2, "tp": 4, "backend": backend, "dry": dry,
            "multicast_env": {"NCCL_NVLS_ENABLE": "0"}, "p2p": "off",
            "env_set": {"NCCL_NVLS_ENABLE": "0", "NCCL_P2P_DISABLE": "1"},
            "nccl_env": {"NCCL_NVLS_ENABLE": "0", "NCCL_P2P_DISABLE": "1"},
            "allreduce_impl": "torch.distributed.all_reduce (sum, bf16) on the nccl "
                              "process group; vLLM's custom all-reduce is not used",
            "schedule": SCHEDULE, "overrides": [], "device_profile": "h200",
            "device_profile_toml": profile.read_text(encoding="utf-8"), "tokens": [1],
            "replays": 5, "warmup": 1, "seed": 0, "validation": True, "arms": ARMS,
            "ar_fill_bytes": 30 * 10**6, "timed_reps": 1, "hidden": 4096, "ranks": ranks}


def _stub(spec, M):
    assert M == 1
    return STUB[spec["name"]]


def test_measured_step_is_the_per_round_max_over_ranks():
    d = _result()
    assert arm_rounds(d, "1", "none") == [101, 102, 104, 103, 102]
    assert arm_rounds(d, "1", AA_ARM) == [101, 103, 101, 102, 101]
    assert arm_rounds(d, "1", "missing") is None
    d["ranks"][1]["per_m"]["1"]["arms"]["none"]["graph_step_us_all"] = [1.0]
    assert arm_rounds(d, "1", "none") is None      # round counts differ


def test_validation_exact_numbers():
    v = validation(_result(), predict=_stub)
    floor = aa_noise_floor([101, 102, 104, 103, 102], [101, 103, 101, 102, 101])
    assert floor == 2.0
    assert v["floors"] == {"1": {"floor_us": floor, "aa_gain_us": 1.0,
                                 "none_step_us": 102, "rounds": 5}}
    rows = {r["arm"]: r for r in v["rows"]}
    assert list(rows) == ["compiled", "kernel-bulk", "only-C-10MB"]  # schedule arms only
    assert [(r["meas_step_us"], r["meas_gain_us"], r["pred_gain_us"], r["gain_err_us"])
            for r in rows.values()] == [(81, 21, 25.0, 4.0), (130, -28, -30.0, -2.0),
                                        (102, 0, 5.0, 5.0)]
    assert [(r["pred_verdict"], r["meas_verdict"], r["agree"]) for r in rows.values()] == [
        ("faster", "faster", True), ("slower", "slower", True), ("faster", "same", False)]
    assert v["verdict_agreement"] == pytest.approx(2 / 3)
    assert v["median_abs_gain_err_us"] == 4.0
    assert v["spearman"] == pytest.approx(1.0)
    assert v["met"] == {"verdict_agreement": False, "median_abs_gain_err_us": True,
                        "spearman": True}
    assert v["profile_measured"] is True
    assert v["status"] == "profile measured by `l2sched profile` (2026-12-01), a separate run"
    text = "\n".join(validation_lines(v, 4, 2))
    assert "| compiled | 1 | 81 | +25.0 | +21.0 | +4.0 | faster / faster | yes | - |" in text
    assert "| only-C-10MB | 1 | 102 | +5.0 | +0.0 | +5.0 | faster / same | NO | L2S107 |" \
        in text
    assert "- three-way verdict agreement: 67% (missed), pass mark >= 90%" in text
    assert "- median |predicted - measured gain|: 4.0 us (met), pass mark <= 25 us" in text
    assert "M=1: 2.0 us (A/A gain +1.0 us, none 102 us, 5 rounds)" in text
    assert "maximum over ranks" in text and "TP4" in text


def test_estimate_profile_or_dry_result_is_not_a_validation():
    v = validation(_result(ESTIMATE), predict=_stub)
    assert v["status"] == "NOT a validation: the device profile is an estimate, not measured"
    assert v["profile_measured"] is False
    text = "\n".join(validation_lines(v, 4, 2))
    assert "(met)" not in text       # no figure is met without a measured profile
    v = validation(_result(dry=True, backend="gloo"), predict=_stub)
    assert v["status"].startswith("NOT a validation: a --dry (CPU) result")
    d = _result()
    for r in d["ranks"]:
        del r["per_m"]["1"]["arms"][AA_ARM]
    assert "no A/A arm" in validation(d, predict=_stub)["status"]


def test_prediction_is_the_uncalibrated_lint_with_the_recorded_profile():
    from l2sched.lang.resolve import load_schedule
    from l2sched.lint import run_lint
    from l2sched.model.config import load_model_config
    from l2sched.model.inventory import analytical_inventory
    d = _result()
    prof = load_device(H200)
    cfg = load_model_config(None)
    inv = analytical_inventory(cfg, tp=4, ep=False, tp_rank=0)
    lr = run_lint(load_schedule(SCHEDULE, ["kernel=bulk"]), inv, device_profile=prof, tokens=1,
                  model_config=cfg)
    gain, errs = lint_predictor(d, prof)(ARMS[3], 1)
    assert gain == lr.step_period("base") - lr.step_period("sim")
    assert errs == []
    # the validation models the run's 2-way all-reduces: [allreduce.tp2] at TP 4
    as_run, note = collectives_as_run(prof, 4, 2)
    assert as_run.allreduce[4] == prof.allreduce[2] != prof.allreduce[4]
    assert note.startswith("[allreduce.tp2]")
    v = validation(d)
    assert v["collectives"] == note
    assert {r["arm"]: r["pred_gain_us"] for r in v["rows"]}["kernel-bulk"] == \
        lint_predictor(d, as_run)(ARMS[3], 1)[0]
    # a run at its own TP, or a profile without the world size's table: unchanged
    assert collectives_as_run(prof, 2, 2)[0] is prof
    assert collectives_as_run(prof, 4, 3)[0] is prof


def test_report_puts_the_validation_first_and_says_what_ran():
    text = markdown(_result())
    assert text.index("## Validation (out of sample)") < text.index("## Step time")
    assert "NCCL P2P off" in text and "NCCL_P2P_DISABLE=1" in text
    assert "vLLM's custom all-reduce is not used" in text
    assert "## All-reduce with a concurrent fill" in text
    assert "| 1 | 8192 | 15.0 |" in text
    assert "Not computed (--no-lint)" in markdown(_result(), lint=False)
    part = _result()
    part["incomplete"] = "checkpoint: the all-reduce with fills not measured (yet)"
    assert "**Incomplete result** (checkpoint: the all-reduce with fills" in \
        markdown(part, lint=False)
    old = _result()
    old["validation"] = False
    assert "## Validation" not in markdown(old, lint=False)


def _copy_read_us(prof, mode):
    """The 30 MB probe fill's read time (us) in the lint's picture."""
    return 30e6 / (prof.fill_modes[mode].gbps * 1e3)


def test_interference_medians_and_slowdowns():
    rows = fill_rows(_result())
    assert rows[8192]["modes"]["copy"] == {"with": 18.5, "extra": 3.5, "p10": 2.5,
                                           "p90": 4.5}
    prof = load_device(H200)
    sl = allreduce_slowdowns(_result(), 2 * 1024 * 1024, prof.fill_modes)
    # median over ranks per message (copy 3.5 and 5.5 us beside a 15 us
    # all-reduce); each inverted with the fill's 9.56 us read (it ends first:
    # extra = read x s / (1 + s)); median over messages <= max
    read = _copy_read_us(prof, "copy")
    assert read == pytest.approx(9.56, abs=0.01)
    want = statistics.median([3.5 / (read - 3.5), 5.5 / (read - 5.5)])
    assert sl["copy"] == {"slowdown": pytest.approx(want), "messages": 2, "unexplained": 0}
    assert sl["bulk"] == {"slowdown": 0.0, "messages": 2, "unexplained": 0}  # extras <= 0
    # load: 7 us is explained, 11 us cannot come from a 9.5 us read
    lr = _copy_read_us(prof, "load")
    assert sl["load"] == {"slowdown": pytest.approx(7.0 / (lr - 7.0)), "messages": 1,
                          "unexplained": 1}
    # without the size limit the 100 us extras are unexplained too
    assert allreduce_slowdowns(_result(), None, prof.fill_modes)["copy"]["unexplained"] == 1


def test_allreduce_slowdown_written_with_a_small_text_edit(tmp_path):
    p = tmp_path / "h200.toml"
    orig = "".join(ln for ln in H200.read_text(encoding="utf-8").splitlines(keepends=True)
                   if not ln.startswith("allreduce_slowdown"))
    p.write_text(orig, encoding="utf-8")
    path, written, skipped = write_allreduce_slowdown(p, {"copy": 1.25, "bulk": -1.0,
                                                          "load": 2.0004}, "run X")
    assert path == p and skipped == {}
    assert written == {"bulk": 0.0, "copy": 1.25, "load": 2.0}
    new = p.read_text(encoding="utf-8")
    added = [ln for ln in new.splitlines(keepends=True) if ln.startswith("allreduce_slowdown")]
    assert added == ["allreduce_slowdown = 1.250  # run X\n",     # [fill.copy] first
                     "allreduce_slowdown = 0.000  # run X\n",     # bulk, at least 0
                     "allreduce_slowdown = 2.000  # run X\n"]
    assert "".join(ln for ln in new.splitlines(keepends=True) if ln not in added) == orig
    prof = load_device(p)
    assert {m: fm.allreduce_slowdown for m, fm in prof.fill_modes.items()} == \
        {"copy": 1.25, "bulk": 0.0, "load": 2.0}
    # each key right after its table's last key line, inside its table
    lines = new.splitlines()
    i, j = lines.index("[fill.copy]"), lines.index("[fill.bulk]")
    assert lines[j - 1] == "allreduce_slowdown = 1.250  # run X"
    assert all(ln and not ln.startswith("[") for ln in lines[i + 1:j - 1])
    # a second write replaces the lines, nothing else
    write_allreduce_slowdown(p, {"copy": 0.5}, "")
    again = p.read_text(encoding="utf-8")
    assert again == new.replace("allreduce_slowdown = 1.250  # run X",
                                "allreduce_slowdown = 0.500")
    assert load_device(p).fill_mode("copy").allreduce_slowdown == 0.5


def _without_fill_tables(text: str) -> str:
    """A profile's ``text`` without its ``[fill]``/``[fill.MODE]`` tables
    and their ``[origin]`` entries (a profile of the layout before fill
    tables: its one fill kernel's numbers come from ``[bandwidth]``/``[l2]``)."""
    out, in_fill = [], False
    for line in text.splitlines(keepends=True):
        if line.startswith("["):
            in_fill = line.startswith("[fill]") or line.startswith("[fill.")
        if not in_fill and not line.startswith('"fill.'):
            out.append(line)
    return "".join(out)


def test_profile_without_fill_tables_is_left_alone(tmp_path):
    p = tmp_path / "est.toml"
    p.write_text(_without_fill_tables(ESTIMATE.read_text(encoding="utf-8")), encoding="utf-8")
    assert "[fill" not in p.read_text(encoding="utf-8")
    assert "bulk" in load_device(p).fill_modes  # still loads, bulk from [bandwidth]
    before = p.read_bytes()
    _, written, skipped = write_allreduce_slowdown(p, {"bulk": 0.3}, "")
    assert written == {} and skipped == {"bulk": "no [fill.bulk] table"}
    assert p.read_bytes() == before


def test_update_profile_writes_the_fit_and_the_slowdowns(tmp_path, capsys):
    p = tmp_path / "h200.toml"
    p.write_text(H200.read_text(encoding="utf-8"), encoding="utf-8")
    res = tmp_path / "tp.json"
    res.write_text(json.dumps(_result()))
    assert lab_main(["bench", "tp-report", str(res), "--no-lint", "--md-out",
                 str(tmp_path / "tp.md"), "--update-profile", str(p)]) == 0
    out = capsys.readouterr().out
    prof = load_device(p)
    s = prof.fill_mode("copy").allreduce_slowdown
    assert f"{p}: [fill.copy] allreduce_slowdown = {s:.3f}" in out and s > 0.9
    assert f"{p}: [fill.bulk] allreduce_slowdown = 0.000" in out
    assert (f"{p}: [fill.load] allreduce_slowdown = {prof.fill_mode('load').allreduce_slowdown:.3f}"
            " (1 of 2 messages left out (no slowdown explains their extra))") in out
    assert prof.allreduce[2].measured == "2026-12-02"
    assert "p2p off" in p.read_text(encoding="utf-8")
    with pytest.raises(ValueError, match="CPU"):
        update_profile_extras(_result(dry=True, backend="gloo"), "x.json", str(p))


def test_merge_unions_the_interference_rows():
    from lab.bench.tp_report import merge
    a, b = _result(), _result()
    for r in a["ranks"]:
        r["allreduce_fill"]["rows"] = r["allreduce_fill"]["rows"][:1]
    for r in b["ranks"]:
        r["per_m"] = {"2": copy.deepcopy(r["per_m"]["1"])}
        r["allreduce_fill"]["rows"] = r["allreduce_fill"]["rows"][1:]
    b["tokens"] = [2]
    m = merge([a, b])
    assert [x["bytes"] for x in m["ranks"][0]["allreduce_fill"]["rows"]] == list(EXTRA)
    c = _result()
    c["p2p"] = "on"
    with pytest.raises(ValueError, match="p2p"):
        merge([a, c])


def test_arms_whose_fills_did_not_run_are_named():
    d = _result()
    assert all(r["runtime_problems"] == [] for r in validation(d, predict=_stub)["rows"])
    d["ranks"][1]["per_m"]["1"]["arms"]["compiled"]["runtime_stats"]["enabled"] = False
    d["ranks"][0]["per_m"]["1"]["arms"]["kernel-bulk"]["runtime_stats"]["issued"] = 0
    v = validation(d, predict=_stub)
    rows = {r["arm"]: r["runtime_problems"] for r in v["rows"]}
    assert rows == {"compiled": ["rank 1: prefetch disabled"],
                    "kernel-bulk": ["rank 0: no fill issued"], "only-C-10MB": []}
    text = "\n".join(validation_lines(v, 4, 2))
    assert ("**Fills did not run** (these rows measure no prefetch): compiled M=1 "
            "(rank 1: prefetch disabled), kernel-bulk M=1 (rank 0: no fill issued).") in text


def test_update_profile_is_one_write_or_none(tmp_path, capsys):
    """A failing update leaves the profile byte for byte as it was (the fit
    and the slowdowns are applied to a copy first); a profile with the old
    additive key is migrated (its lines removed, said so)."""
    p = tmp_path / "h200.toml"
    text = H200.read_text(encoding="utf-8")
    old = text.replace("\n[fill.bulk]\n", "\nallreduce_extra_us = 5.0\n[fill.bulk]\n", 1)
    p.write_text(old, encoding="utf-8")
    res = tmp_path / "tp.json"
    res.write_text(json.dumps(_result(dry=True, backend="gloo")))
    argv = ["bench", "tp-report", str(res), "--no-lint", "--md-out",
            str(tmp_path / "tp.md"), "--update-profile", str(p)]
    assert lab_main(argv) == 1
    err = capsys.readouterr().err
    assert f"{p}: not updated: refusing to write a CPU" in err
    assert p.read_text(encoding="utf-8") == old
    res.write_text(json.dumps(_result()))
    assert lab_main(argv) == 0
    out = capsys.readouterr().out
    assert f"{p}: removed 1 allreduce_extra_us line(s) (replaced by allreduce_slowdown)" in out
    new = p.read_text(encoding="utf-8")
    assert "allreduce_extra_us" not in new and load_device(p).allreduce[2].measured


def test_calibrate_never_overwrites_its_input(tmp_path, capsys):
    res = tmp_path / "tp.json"
    res.write_text(json.dumps(_result()))
    before = res.read_bytes()
    assert lab_main(["bench", "calibrate", str(res), "--out", str(res)]) == 2  # usage
    assert "refusing to overwrite the input file" in capsys.readouterr().err
    assert res.read_bytes() == before


def test_headers_with_spaces_and_comments_are_found(tmp_path):
    """Valid TOML headers such as ``[ allreduce.tp2 ]  # note`` and
    ``[fill.copy] # x`` are the tables they name: replaced in place, not
    declared twice."""
    from lab.bench.calibrate_model import _set_number
    text = (H200.read_text(encoding="utf-8")
            .replace("[allreduce.tp2]", "[ allreduce.tp2 ]  # 2 GPUs", 1)
            .replace("[fill.copy]", "[fill.copy] # the default", 1)
            .replace("[latency]", "[latency]  # stand-ins", 1))
    p = tmp_path / "h200.toml"
    p.write_text(text, encoding="utf-8")
    new, lines = collective_terms_text(_result(), text, "run X")
    prof = parse_device(__import__("tomllib").loads(new), str(p), new)
    assert prof.allreduce[2].measured == "2026-12-02"
    assert new.count("allreduce.tp2") == 1 and "[fill.copy] # the default" in new
    assert any(ln.startswith("[fill.copy] allreduce_slowdown = ") for ln in lines)
    out = _set_number(text, "latency", "fill_slowdown_scale", 2.0, str(p))
    assert parse_device(__import__("tomllib").loads(out), str(p), out).fill_slowdown_scale == 2.0
