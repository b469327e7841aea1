"""The out-of-sample validation section of ``python -m lab bench tp-report``: the
rules of docs/lint.md#validation (``bench.validation``) applied to a ``bench
tp --validation`` result, as ``bench report`` applies them to ``bench run
--validation``.

- Prediction: the uncalibrated lint (``run_lint``) of each schedule arm with
  the device profile the run used (the copy recorded in the result,
  ``device_profile_toml``; else the profile named by ``device_profile``), at
  the run's modelled TP degree (``tp``: inventory and plan) and ``tokens =
  M``. The all-reduces are modelled as the ones that ran: the profile's
  ``[allreduce.tpW]`` of the run's world size W (``collectives_as_run``),
  when the profile has that table. Nothing the run measured feeds it.
- Measured step time of an arm at M: per round, the **maximum over ranks**
  of that round's replay time (every rank replayed the arm in the same
  round, behind a barrier; the tensor-parallel step is done when its
  slowest rank is), then the median over rounds. Gain = that of ``none``
  minus that of the arm (us, positive = faster).
- Noise floor per M: ``aa_noise_floor`` of the per-round maxima of
  ``none`` and ``none-aa`` (the no-prefetch step captured twice).
- Verdicts, figures and pass marks: ``validate``. The status says "NOT a
  validation" when the profile is not measured (``DeviceProfile.
  is_measured``).

Units: us. torch-free.
"""

from __future__ import annotations

import dataclasses
import statistics

from l2sched.bench import recorded_profile
from l2sched.bench.arms import arm_schedule
from lab.bench.controls import control_lines, kind_of, status_note
from l2sched.bench.arms import AA_ARM
from lab.bench.validation import aa_noise_floor, validate
from lab.bench.verdicts import is_schedule_arm
from l2sched.lint import run_lint
from l2sched.model.config import load_model_config
from l2sched.device import load_device
from l2sched.model.inventory import analytical_inventory
from l2sched.units import format_signed

#: How the measured step time of an arm is formed (said in the report).
MEASURED_RULE = ("measured step time = per round the maximum over ranks of the "
                 "replay time (the TP step ends with its slowest rank), median over "
                 "rounds; gain = none minus the arm")


def arm_rounds(d: dict, M: str, arm: str) -> list[float] | None:
    """Per timed round, the maximum over ranks of ``arm``'s replay time at
    ``M`` (us); None when a rank lacks it or the ranks' round counts
    differ."""
    series = []
    for r in d["ranks"]:
        a = r["per_m"].get(M, {}).get("arms", {}).get(arm, {})
        xs = a.get("graph_step_us_all")
        if not xs:
            return None
        series.append(xs)
    if len({len(xs) for xs in series}) != 1:
        return None
    return [max(xs) for xs in zip(*series)]


def runtime_problems(d: dict, M: str, arm: str) -> list[str]:
    """Ranks on which ``arm``'s fills did not run at ``M``: its runtime
    disabled prefetch (kernel, stream or table setup failed), or issued
    nothing although its plan has issues."""
    out = []
    for r in d["ranks"]:
        st = r["per_m"].get(M, {}).get("arms", {}).get(arm, {}).get("runtime_stats")
        if st is None:
            continue
        if not st.get("enabled", True):
            out.append(f"rank {r['rank']}: prefetch disabled")
        elif r.get("plans", {}).get(arm, {}).get("issues") and not st.get("issued"):
            out.append(f"rank {r['rank']}: no fill issued")
    return out


def lint_profile(d: dict, where: str = "the result"):
    """``(DeviceProfile, where it came from)`` of result ``d``: the copy of
    the profile recorded by the run, else the named profile as shipped now.
    ``where`` (the result file) locates problems in the recorded copy."""
    prof = recorded_profile(d, where)
    if prof is not None:
        return prof, f"the copy of {d['device_profile']} recorded in the result"
    return (load_device(d["device_profile"]),
            f"{d['device_profile']} as of now (the result does not record the one it "
            f"ran with)")


def collectives_as_run(prof, tp: int, world_size: int):
    """``(profile, note)``: ``prof`` whose collective model at TP degree
    ``tp`` is its ``[allreduce.tpW]`` table for the run's world size W (the
    all-reduces a ``bench tp`` run makes are W-way whatever TP it models);
    ``prof`` unchanged when W == tp or the profile has no such table. The
    note says which table the prediction uses."""
    if world_size == tp or world_size not in prof.allreduce:
        pick = next((k for k in sorted(prof.allreduce) if k >= tp), None)
        return prof, f"[allreduce.tp{pick}] (the modelled TP {tp})"
    models = dict(prof.allreduce)
    models[tp] = prof.allreduce[world_size]
    return (dataclasses.replace(prof, allreduce=models),
            f"[allreduce.tp{world_size}] (the run's {world_size}-way all-reduces; "
            f"inventory and plans at TP {tp})")


def lint_predictor(d: dict, prof):
    """``predict(arm spec, M) -> (gain us, lint error codes)``: the
    uncalibrated lint of the arm's schedule at the result's TP, ``prof``
    (pass it through ``collectives_as_run`` first for the run's all-reduces)."""
    cfg = load_model_config(None)
    inv = analytical_inventory(cfg, tp=d["tp"], ep=False, tp_rank=0)
    scheds: dict = {}

    def predict(spec: dict, M: int):
        name = spec["name"]
        if name not in scheds:
            scheds[name] = arm_schedule(spec)
        lr = run_lint(scheds[name], inv, device_profile=prof, tokens=int(M), model_config=cfg)
        errs = sorted({f.code for f in lr.findings if f.severity == "error"})
        return lr.step_period("base") - lr.step_period("sim"), errs
    return predict


def gain_rows(d: dict, predict) -> tuple[list[dict], dict]:
    """``(rows, floors)``: per schedule arm and M of result ``d`` the
    predicted gain (``predict(arm spec, M) -> (gain us, error codes)``) and
    the measured one (module docstring), with the A/A floor; ``floors``
    per M (``{floor_us, aa_gain_us, none_step_us, rounds}``). M without an
    A/A arm are left out. The rows ``validation.validate`` takes."""
    specs = [a for a in d.get("arms", []) if is_schedule_arm(a)]
    rows, floors = [], {}
    for M in map(str, d["tokens"]):
        none, aa = arm_rounds(d, M, "none"), arm_rounds(d, M, AA_ARM)
        if none is None or aa is None:
            continue
        base = statistics.median(none)
        floor = aa_noise_floor(none, aa)
        floors[M] = {"floor_us": floor, "aa_gain_us": base - statistics.median(aa),
                     "none_step_us": base, "rounds": len(none)}
        for spec in specs:
            xs = arm_rounds(d, M, spec["name"])
            if xs is None:
                continue
            pred, errs = predict(spec, int(M))
            rows.append({"arm": spec["name"], "M": int(M), "floor_us": floor,
                         "pred_gain_us": pred, "meas_gain_us": base - statistics.median(xs),
                         "meas_step_us": statistics.median(xs), "lint_errors": errs,
                         "runtime_problems": runtime_problems(d, M, spec["name"])})
    return rows, floors


def run_predictor(d: dict, prof):
    """``lint_predictor`` of result ``d`` with ``prof``'s collective model
    set to the run's all-reduces (``collectives_as_run``)."""
    as_run, _ = collectives_as_run(prof, d["tp"], d.get("world_size", d["tp"]))
    return lint_predictor(d, as_run)


def validation(d: dict, predict=None, controls: tuple | None = None) -> dict:
    """The validation of result ``d`` (see the module docstring).
    ``predict``: ``(arm spec, M) -> (gain us, error codes)``, default the
    uncalibrated lint (``lint_predictor``). ``controls``: ``(residuals,
    path)`` of a controls run, added to every prediction
    (``validation.validate``; raises ``L2sError`` for an arm without
    one). Without an A/A arm: only ``status``."""
    prof, source = lint_profile(d)
    prof, collectives = collectives_as_run(prof, d["tp"], d.get("world_size", d["tp"]))
    rows, floors = gain_rows(d, predict or lint_predictor(d, prof))
    if not floors:
        return {"status": f"no A/A arm ({AA_ARM}) in the result: not a validation "
                          f"(run `python -m lab bench tp --validation`)"}
    out = validate(rows, controls)
    out.update(floors=floors, profile_measured=prof.is_measured,
               profile_provenance=dict(prof.provenance), profile_source=source,
               collectives=collectives,
               measured_rule=MEASURED_RULE)
    out["status"] = (f"profile measured by `l2sched profile` "
                     f"({prof.provenance.get('date', '?')}), a separate run"
                     if prof.is_measured else
                     "NOT a validation: the device profile is an estimate, not measured")
    if controls is not None:
        out["status"] += status_note(controls[1], kind_of(controls[0]))
    if d.get("dry"):
        out["status"] = "NOT a validation: a --dry (CPU) result; " + out["status"]
        out["profile_measured"] = False
    return out


def validation_lines(v: dict, tp: int, world_size: int) -> list[str]:
    """The markdown of ``validation``'s result ``v``."""
    out = ["## Validation (out of sample)", "", f"Status: {v['status']}.", ""]
    if not v.get("rows"):
        return out
    th = v["thresholds"]

    def fig(key, fmt):
        x = v[key]
        return ("-" if x is None else fmt.format(x)) + (
            " (met)" if v["met"][key] and v["profile_measured"] else " (missed)")
    out += [f"Rules: docs/lint.md#validation. Predicted gain: the uncalibrated lint with "
            f"{v['profile_source']}, TP{tp}; its all-reduces: "
            f"{v.get('collectives', f'the TP{tp} collective model')} (the run's were "
            f"{world_size}-way real all-reduces). "
            f"Measured: {v['measured_rule']}.", "",
            f"- three-way verdict agreement: {fig('verdict_agreement', '{:.0%}')}, "
            f"pass mark >= {th['verdict_agreement']:.0%}",
            f"- median |predicted - measured gain|: "
            f"{fig('median_abs_gain_err_us', '{:.1f} us')}, pass mark <= "
            f"{th['median_abs_gain_err_us']:g} us",
            f"- Spearman rank correlation: {fig('spearman', '{:.2f}')}, pass mark >= "
            f"{th['spearman']:g}",
            f"- over {v['n']} arm x M pairs", "",
            "Noise floor per M from the A/A arm (90th percentile of |A/A gain| over "
            "resampled rounds): " + ", ".join(
                f"M={M}: {f['floor_us']:.1f} us (A/A gain {format_signed(f['aa_gain_us'], '+.1f')} us, "
                f"none {f['none_step_us']:.0f} us, {f['rounds']} rounds)"
                for M, f in v["floors"].items()) + ".", "",
            "| arm | M | measured step us | predicted gain us | measured gain us | "
            "predicted - measured us | verdict predicted / measured | agree | lint errors |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in v["rows"]:
        out.append(f"| {r['arm']} | {r['M']} | {r['meas_step_us']:.0f} | "
                   f"{format_signed(r['pred_gain_us'], '+.1f')} | {format_signed(r['meas_gain_us'], '+.1f')} | "
                   f"{format_signed(r['gain_err_us'], '+.1f')} | {r['pred_verdict']} / {r['meas_verdict']} | "
                   f"{'yes' if r['agree'] else 'NO'} | {','.join(r['lint_errors']) or '-'} |")
    per_m = ", ".join(f"M={M}: " + ("-" if x is None else f"{x:.2f}")
                      for M, x in v["spearman_per_m"].items())
    out += ["", f"Spearman per M: {per_m}.", ""] + control_lines(v)
    bad = [f"{r['arm']} M={r['M']} ({'; '.join(r['runtime_problems'])})"
           for r in v["rows"] if r.get("runtime_problems")]
    if bad:
        out += ["**Fills did not run** (these rows measure no prefetch): "
                + ", ".join(bad) + ".", ""]
    return out
