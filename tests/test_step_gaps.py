"""The decode step's own cold -> hot gaps (``step_fill``'s per-op records,
``bench.profile_gaps``) and the attention core's state traffic: parsed and
checked at their keys, measured from arm and decoy op times, written into
the profile, and each moving the lint's prediction the right way."""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from l2sched.profile.gaps import (MIN_HIT_LAYERS, apply_step_gaps, predicted_hits,
                                        step_gap_markdown, step_gaps)
from l2sched.profile.step_fill import check_step_fill, step_fill_schedule, step_fill_summary
from l2sched.errors import L2sInputError
from l2sched.lint import lint_path, run_lint
from l2sched.model.adapters import glm5next
from l2sched.device import OpTimes, load_device, load_device_text

H200 = "schedules/glm53-flash-h200-tp4.l2s"
ROOT = Path(__file__).resolve().parent.parent


def _gain(device, overrides=()):
    run = lint_path(H200, list(overrides))
    r = run_lint(run.schedule, run.inventory, device_profile=device, tokens=16)
    return r.step_period("base") - r.step_period("sim")


# -- OpTimes and the profile's keys -------------------------------------------

def test_a_step_gap_replaces_the_tables_gap():
    t = OpTimes((1, 16), (10.0, 12.0), (9.0, 11.0), (1, 16), (3.0, 5.0))
    assert t.at(1) == (10.0, 7.0)
    assert t.at(16) == (12.0, 7.0)
    assert t.at(4) == pytest.approx((11.0, 11.0 - 4.0))  # both linear in log M
    assert t.at(256) == (12.0, 7.0)  # held flat outside the points
    assert OpTimes((1,), (10.0,), (9.0,)).at(4) == (10.0, 9.0)  # no step gap: the table's
    assert OpTimes((1,), (2.0,), (1.0,), (1,), (5.0,)).at(1) == (2.0, 0.0)  # hot >= 0


def _with_entry(entry: str) -> str:
    """The shipped h200 profile without step gaps, but ``entry`` added to
    its first ``attn.o_proj`` op entry."""
    text = (ROOT / "l2sched/data/devices/h200.toml").read_text(encoding="utf-8")
    text = re.sub(r", step_m = \[[^\]]*\], step_gap_us = \[[^\]]*\]", "", text)
    old = next(line for line in text.splitlines() if line.startswith('"attn.o_proj" = {'))
    return text.replace(old, old[:-2] + entry + " }", 1)


def test_step_gaps_read_back_and_bad_ones_are_errors_at_their_key():
    dev = load_device_text(_with_entry(", step_m = [1, 64], step_gap_us = [0.5, 2.5]"), "p.toml")
    got = [t for t in dev.op_times("glm5next").values() if t.step_m]
    assert len(got) == 1 and got[0].step_m == (1, 64) and got[0].step_gap_us == (0.5, 2.5)
    for bad, why in ((", step_m = [1, 64], step_gap_us = [0.5]", "step_gap_us has 1 values, step_m has 2"),
                     (", step_m = [64, 1], step_gap_us = [0.5, 1.0]", "step_m: token counts must increase"),
                     (", step_m = [1], step_gap_us = [-1.0]", "step_gap_us: -1.0 is not a time"),
                     (", step_m = [1], step_gap_us = [500.0]", "more than the op's cold time"),
                     (", step_m = [1, 99999999999], step_gap_us = [1.0, 1.0]", "not a token count"),
                     (", step_gap_us = [1.0]", "step_m and step_gap_us go together"),
                     (", step_share = 0.5", "unknown key 'step_share'")):
        with pytest.raises(L2sInputError) as e:
            load_device_text(_with_entry(bad), "p.toml")
        assert re.match(r"p\.toml:\d+:\d+: ops\.\S+\.attn\.o_proj: ", str(e.value))
        assert why in str(e.value)


def test_an_unknown_layer_kind_or_op_in_the_op_table_is_an_error():
    text = (ROOT / "l2sched/data/devices/h200.toml").read_text(encoding="utf-8")
    from l2sched.model.device_ops import check_device_ops
    with pytest.raises(L2sInputError,
                       match=r"p\.toml:\d+:1: ops\.glm5next\.mla\+mooe: unknown layer kind"):
        check_device_ops(load_device_text(text.replace('[ops.glm5next."mla+moe"]',
                                                       '[ops.glm5next."mla+mooe"]'), "p.toml"),
                         "glm5next")
    with pytest.raises(L2sInputError, match=r"ops\.glm5next\.mla\+moe\.mhc\.attn_pree: unknown op"):
        check_device_ops(load_device_text(text.replace('[ops.glm5next."mla+moe"]\n"mhc.attn_pre"',
                                                       '[ops.glm5next."mla+moe"]\n"mhc.attn_pree"'),
                                          "p.toml"), "glm5next")


# -- each term moves the prediction the right way -----------------------------

def _with_gaps(dev, gap: float):
    """``dev`` whose every measured op has step gap ``gap`` at every M."""
    ops = {k: dataclasses.replace(t, step_m=(1,), step_gap_us=(gap,)) for k, t in dev.op_times("glm5next").items()}
    return dataclasses.replace(dev, ops={"glm5next": ops})


def test_a_larger_step_gap_buys_more_and_none_buys_nothing():
    dev = load_device("h200")
    none, small, large = (_gain(_with_gaps(dev, g)) for g in (0.0, 0.5, 3.0))
    assert large > small > none
    # with no gap anywhere the hits buy nothing: what is left are the fills' costs
    assert none <= 0.0


def test_the_attention_cores_state_traffic_evicts_evict_normal_fills(monkeypatch):
    dev = load_device("h200")
    with_state = _gain(dev, ["policy=evict_normal"])
    monkeypatch.setattr(glm5next, "core_state_bytes", lambda tokens, tp: 0)
    without = _gain(dev, ["policy=evict_normal"])
    assert with_state < without  # window A's fill loses lines to the core's state pass


def test_core_state_bytes_follow_the_configs_heads_per_rank():
    assert glm5next.core_state_bytes(1, 4) == 16 * 128 * 128 * 4 == 1 << 20
    assert glm5next.core_state_bytes(64, 2) == 64 * 2 * (1 << 20)


# -- the probe's per-op records into step gaps --------------------------------

def _step_record(saved_per_hit: dict, tokens=(16,), step_hits: float = 0.0):
    """A ``step_fill`` record whose decoy op times exceed the arm's by
    ``saved_per_hit[op] x the lint's hit share`` of that op (10 us arm), and
    whose step hits are ``step_hits`` us (the default, under the floor, keeps
    the gaps unscaled)."""
    text = step_fill_schedule("h200", 4, "copy")
    hits, _ = predicted_hits(load_device("h200"), text, tokens)
    per_m = {}
    for M in tokens:
        arm = {k: 10.0 for k in hits[M]}
        dec = {k: 10.0 + saved_per_hit.get(k.split(":", 1)[1], 0.0) * h
               for k, h in hits[M].items()}
        per_m[str(M)] = {"hits_us": {"copy": step_hits}, "step_us": {},
                         "ops_us": {"arm": arm, "decoy": dec}}
    return {"tokens": list(tokens), "reference": "copy", "hits_us": {"copy": step_hits},
            "ratio": {"copy": 1.0}, "per_m": per_m, "schedule": text}


def test_step_gaps_are_saved_time_over_the_lints_hit_share():
    dev = load_device("h200")
    got = step_gaps(_step_record({"attn.o_proj": 2.0, "mhc.ffn_pre": -1.0,
                                  "kda.in_proj": 100.0}), dev)
    o_proj = got[("kda+moe", "attn.o_proj")][16]
    assert o_proj["gap_us"] == pytest.approx(2.0) and o_proj["hit"] >= MIN_HIT_LAYERS
    assert got[("kda+moe", "mhc.ffn_pre")][16]["gap_us"] == 0.0  # a loss is no gap
    cold = dev.op_times("glm5next")[("kda+moe", "kda.in_proj")].at(16)[0]
    assert got[("kda+moe", "kda.in_proj")][16]["gap_us"] == pytest.approx(cold, abs=1e-3)
    # an op the schedule does not fill has no hit share: no step gap
    assert ("kda+moe", "kda.f_b_proj") not in got


def test_step_gaps_are_scaled_to_the_probes_own_step_hits():
    from l2sched.profile.gaps import step_hits_us, with_step_gaps
    dev = load_device("h200")
    rec = _step_record({"attn.o_proj": 2.0, "kda.in_proj": 4.0}, step_hits=90.0)
    gaps = step_gaps(rec, dev)
    scale = gaps[("kda+moe", "attn.o_proj")][16]["scale"]
    assert scale != 1.0 and gaps[("kda+moe", "kda.in_proj")][16]["scale"] == scale
    # with the scaled gaps the lint gives the probe's schedule the step's hits
    assert step_hits_us(with_step_gaps(dev, gaps), rec["schedule"], 16) == pytest.approx(
        90.0, abs=1.0)
    assert gaps[("kda+moe", "attn.o_proj")][16]["gap_us"] == pytest.approx(2.0 * scale, abs=2e-3)


def test_step_gaps_go_into_the_profile_and_its_report():
    dev = load_device("h200")
    gaps = step_gaps(_step_record({"attn.o_proj": 2.0}), dev)
    derived = {"ops": {"kda+moe": {"attn.o_proj": {"m": [1, 16], "cold_us": [15.0, 16.0],
                                                   "hot_us": [12.0, 13.0]}}},
               "measured": {}}
    apply_step_gaps(derived, gaps)
    entry = derived["ops"]["kda+moe"]["attn.o_proj"]
    assert entry["step_m"] == [16] and entry["step_gap_us"] == [pytest.approx(2.0)]
    rec = derived["measured"]["ops.kda+moe.attn.o_proj.step_gap_us"]
    assert "decoy minus arm" in rec["probe"] and "M=16" in rec["probe"]
    md = "\n".join(step_gap_markdown(derived))
    assert "| kda+moe | attn.o_proj | 16 | 3.00 | 2.00 |" in md


def test_no_per_op_records_no_step_gaps():
    rec = _step_record({})
    for r in rec["per_m"].values():
        del r["ops_us"]
    assert step_gaps(rec, load_device("h200")) == {}


def test_the_summary_keeps_the_reference_arms_op_times():
    arms = {a: {"graph_step_us_all": [9.0, 10.0, 11.0], "per_op_source": "graph",
                "ops": {"0:attn.o_proj": {"dur_us": 5.0 + (a.startswith("ctl-"))}}}
            for a in ("compiled", "ctl-compiled")}
    got = step_fill_summary({"per_m": {"16": {"arms": arms}}}, [])
    assert got["per_m"][16]["ops_us"] == {"arm": {"0:attn.o_proj": 5.0},
                                          "decoy": {"0:attn.o_proj": 6.0}}
    check_step_fill(got | {"per_m": {"16": got["per_m"][16]}})
    bad = dict(got, per_m={"16": {"ops_us": {"arm": {"0:x": "slow"}, "decoy": {}}}})
    with pytest.raises(ValueError, match=r"^\.per_m\.16\.ops_us\.arm: .*'0:x'"):
        check_step_fill(bad)


# -- one scale per window, fitted to each window alone -------------------------

def test_bounded_least_squares_solves_exactly_and_holds_the_bounds():
    from l2sched.profile.gaps import bounded_least_squares
    cols = [[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]]
    assert bounded_least_squares(cols, [2.0, 3.0, 5.0], 0.25, 4.0) == pytest.approx([2.0, 3.0])
    # the unconstrained answer (10, 3) is outside: x0 held at its bound, x1 refitted
    got = bounded_least_squares(cols, [10.0, 3.0, 13.0], 0.25, 4.0)
    assert got[0] == pytest.approx(4.0) and 3.0 < got[1] <= 4.0
    # an unknown nothing depends on keeps 1
    assert bounded_least_squares([[1.0, 2.0], [0.0, 0.0]], [2.0, 4.0], 0.25, 4.0) == \
        pytest.approx([2.0, 1.0])


def _lone_record(lone_hits: dict, step_hits: float, M: int = 16) -> dict:
    """``_step_record`` (every op's gap 2 us) with the probe's lone windows
    measured at ``lone_hits`` (us) and the whole schedule at ``step_hits``."""
    from l2sched.profile.step_fill import lone_variants
    rec = _step_record({"attn.o_proj": 2.0, "kda.in_proj": 2.0}, (M,), step_hits)
    rec["lone_budgets"] = {w: b for w, (b, _) in lone_variants(rec["schedule"]).items()}
    rec["per_m"][str(M)]["lone_hits_us"] = dict(lone_hits)
    return rec


def test_each_windows_ops_are_scaled_to_what_that_window_alone_buys():
    from l2sched.profile.gaps import step_hits_us, window_scale_records, with_step_gaps
    dev = load_device("h200")
    # window B alone buys much more than the per-op records say, window A much less
    rec = _lone_record({"A": 2.0, "A_MLA": 10.0, "B": 80.0}, step_hits=90.0)
    assert sorted(rec["lone_budgets"]) == ["A", "A_MLA", "B"]  # C has no targets of its own
    gaps = step_gaps(rec, dev)
    in_proj, o_proj = gaps[("kda+moe", "kda.in_proj")][16], gaps[("kda+moe", "attn.o_proj")][16]
    assert in_proj["window"] == "B" and o_proj["window"] == "A"
    assert in_proj["scale"] > 1.0 > o_proj["scale"]
    fit = gaps.fits[16]
    probe = {w: want for w, want, _ in fit["rows"]}
    lint = {w: got for w, _, got in fit["rows"]}
    assert abs(lint["B"] - probe["B"]) < abs(
        step_hits_us(with_step_gaps(dev, _unscaled(gaps)), rec["schedule"], 16,
                     ("window.A.budget=0MB", "window.A_MLA.budget=0MB", "window.C.budget=0MB",
                      "window.B.budget=22500KB")) - probe["B"])
    recs = window_scale_records(gaps)
    assert set(recs) == {"step_fill.A.scale", "step_fill.A_MLA.scale", "step_fill.B.scale",
                         "step_fill.schedule.hits_us"}
    assert "M=16 probe" in recs["step_fill.B.scale"]["probe"]
    assert recs["step_fill.B.scale"]["median"] == pytest.approx(in_proj["scale"], abs=1e-3)


def test_a_window_scale_is_one_factor_across_m_so_one_low_arm_cannot_zero_an_ops_gap():
    """Window B alone buys +20 us at M=16 and nothing at M=64 (as the H100
    probe of 2026-12-06 measured it at M=64): its ops get one factor at both
    M, between what either M alone would give, not a collapse at M=64."""
    dev = load_device("h200")
    rec = _lone_record({"A": 20.0, "A_MLA": 10.0, "B": 20.0}, step_hits=60.0)
    rec64 = _lone_record({"A": 20.0, "A_MLA": 10.0, "B": 0.0}, step_hits=60.0, M=64)
    rec["per_m"].update(rec64["per_m"])
    rec["tokens"] = [16, 64]
    gaps = step_gaps(rec, dev)
    in_proj = gaps[("kda+moe", "kda.in_proj")]
    assert in_proj[16]["scale"] == in_proj[64]["scale"]
    assert gaps.fits[16]["scale"] == gaps.fits[64]["scale"]
    alone64 = step_gaps(rec64, dev)[("kda+moe", "kda.in_proj")][64]["scale"]
    alone16 = step_gaps(_lone_record({"A": 20.0, "A_MLA": 10.0, "B": 20.0}, step_hits=60.0),
                        dev)[("kda+moe", "kda.in_proj")][16]["scale"]
    assert alone64 < in_proj[64]["scale"] < alone16
    assert [r[0] for r in gaps.fits[64]["rows"]] == ["schedule", "A", "A_MLA", "B"]


def _unscaled(gaps: dict) -> dict:
    return {k: {M: dict(r, gap_us=r["gap_us"] / r["scale"]) for M, r in per.items()}
            for k, per in gaps.items()}


def test_a_probe_that_moved_too_little_leaves_the_windows_unscaled():
    gaps = step_gaps(_lone_record({"A": 2.0, "A_MLA": 1.0, "B": 3.0}, step_hits=10.0),
                     load_device("h200"))
    assert {r[16]["scale"] for r in gaps.values()} == {1.0}
    assert set(gaps.fits[16]["scale"].values()) == {1.0}


LONE = {"A": 12_750_000, "A_MLA": 18_000_000, "B": 22_500_000}


def _lone_summary() -> dict:
    """``step_fill_summary`` of a result with the probe's lone windows (each
    decoy 5 us slower than its arm, window B's arms 3 us slower than the
    others) and the probe's schedule."""
    names = ["compiled"] + [f"lone-{w}" for w in LONE]
    arms = {a: {"graph_step_us_all": [100.0 + 5 * a.startswith("ctl-") + 3 * ("B" in a)]}
            for n in names for a in (n, "ctl-" + n)}
    rec = step_fill_summary({"per_m": {"4": {"arms": arms}}}, [], LONE)
    rec["schedule"] = step_fill_schedule("h200", 4, "copy")
    return rec


def test_the_summary_keeps_each_lone_windows_hits():
    got = _lone_summary()
    assert got["lone_budgets"] == LONE
    assert got["per_m"][4]["lone_hits_us"] == {w: pytest.approx(5.0) for w in LONE}
    check_step_fill(got)
    arms = {a: {"graph_step_us_all": [1.0]} for a in ("compiled", "ctl-compiled", "lone-B")}
    with pytest.raises(ValueError, match="no arm 'ctl-lone-B'"):
        step_fill_summary({"per_m": {"4": {"arms": arms}}}, [], {"B": 2})


@pytest.mark.parametrize("change, want", [
    (lambda r: r.update(lone_budgets={"B": -1}), r"^\.lone_budgets: want"),
    (lambda r: r["lone_budgets"].update(Z=5), r"^\.lone_budgets\.Z: the probe's schedule has no window Z"),
    (lambda r: r["lone_budgets"].update(A=1), r"^\.lone_budgets\.A: 1 B, but .* 12750000 B"),
    (lambda r: r["lone_budgets"].pop("A"), r"^\.lone_budgets: no A"),
    (lambda r: r.update(schedule="schedule x\nwindow"), r"^\.schedule: "),
    (lambda r: r.pop("lone_budgets"), r"^\.per_m\.4\.lone_hits_us: the record has no lone_budgets"),
    (lambda r: r["per_m"][4]["lone_hits_us"].pop("B"), r"^\.per_m\.4\.lone_hits_us: want"),
    (lambda r: r["per_m"][4]["lone_hits_us"].update(B=float("nan")),
     r"^\.per_m\.4\.lone_hits_us\.B: want a finite number"),
    (lambda r: r["per_m"][4]["lone_hits_us"].update(B="x"),
     r"^\.per_m\.4\.lone_hits_us\.B: want a finite number"),
    (lambda r: r["per_m"][4]["lone_hits_us"].update(B=1e12),
     r"^\.per_m\.4\.lone_hits_us\.B: want a finite number of us within"),
    (lambda r: r["per_m"][4]["hits_us"].update(copy=float("nan")), r"^\.per_m\.4\.hits_us: want"),
    (lambda r: r["per_m"][4].update(hits_us="x"), r"^\.per_m\.4\.hits_us: want"),
    (lambda r: r.update(per_m={"016": r["per_m"][4]}), r"^\.per_m: want"),
])
def test_bad_lone_window_records_are_errors_at_their_key(change, want):
    rec = _lone_summary()
    change(rec)
    with pytest.raises(ValueError, match=want):
        check_step_fill(rec)


# -- lab/experiments/ship_step_fill.py ----------------------------------------------

def _ship_module():
    spec = importlib.util.spec_from_file_location("ship_step_fill",
                                                  ROOT / "lab/experiments/ship_step_fill.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_shipping_a_record_changes_only_what_the_probe_derives(tmp_path, monkeypatch):
    ship = _ship_module()
    path = ROOT / "l2sched/data/devices/h200.toml"
    text = path.read_text(encoding="utf-8")
    rec = _step_record({"attn.o_proj": 2.0})
    rec["ratio"] = {"copy": 1.0, "bulk": 0.5}
    rec["hits_us"] = {"copy": 20.0, "bulk": 10.0}
    new, notes = ship.ship(text, rec, "h200.toml")
    dev = load_device_text(new, "h200.toml")
    assert dev.fill_mode("bulk").landed[-1][1] == pytest.approx(
        0.5 * dev.fill_mode("copy").landed[-1][1], abs=1e-3)
    assert dev.op_times("glm5next")[("kda+moe", "attn.o_proj")].step_gap_us == (pytest.approx(2.0, abs=0.01),)
    assert "ops.kda+moe.attn.o_proj.step_gap_us" in dev.measured
    # the rest of the text is untouched, and shipping again gives the same text
    changed = [d[2:] for d in difflib.ndiff(text.splitlines(), new.splitlines())
               if d[:2] in ("- ", "+ ")]
    assert all(line.startswith(('"', "landed", "effect")) for line in changed)
    assert ship.ship(new, rec, "h200.toml")[0] == new
    # the script: a state without a step_fill record, one without per-op records, or
    # --out naming the state are one line, exit 1, nothing written
    state = tmp_path / "s.json"
    out = str(tmp_path / "p.toml")
    no_ops = json.loads(json.dumps(rec))
    for r in no_ops["per_m"].values():
        del r["ops_us"]
    for results, target in (({}, out), ({"step_fill": no_ops}, out),
                            ({"step_fill": rec}, str(state))):
        state.write_text(json.dumps({"results": results}), encoding="utf-8")
        monkeypatch.setattr(sys, "argv", ["ship_step_fill.py", str(state), "--out", target])
        assert ship.main() == 1 and not (tmp_path / "p.toml").exists()
        assert json.loads(state.read_text(encoding="utf-8"))["results"] == results
    # a record measured with the h200 profile's schedule goes into no other profile
    state.write_text(json.dumps({"results": {"step_fill": rec}}), encoding="utf-8")
    monkeypatch.setattr(sys, "argv", ["ship_step_fill.py", str(state), "--profile",
                                      "sm120-rtx-pro-6000-maxq", "--out", out])
    assert ship.main() == 1 and not (tmp_path / "p.toml").exists()
