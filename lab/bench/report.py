"""``python -m lab bench report``: lint every measured arm on CPU, compare with the
measurement and write the summary JSON and markdown.

The headline is the out-of-sample validation (``validation``,
docs/lint.md#validation): the uncalibrated lint with the result's measured
device profile against the measured gains, noise floor from the A/A arm.
The in-sample diagnostics (noise threshold, two-way verdicts, calibration,
finish-time errors, the timed graph's event-overhead correction, the two
agreement counts) are in ``verdicts``. Units: us unless a name says otherwise.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from l2sched.bench import read_json_file, recorded_profile
from l2sched.bench.arms import arm_schedule
from lab.bench.calibrate_model import pooled_controls
from l2sched.bench.controls import is_control, without_hits
from lab.bench.controls import kind_of, status_note
from lab.bench.markdown import markdown
from l2sched.bench.run import AR_NOTE, FILL_NOTE
from l2sched.bench.arms import AA_ARM, spin_collectives
from lab.bench.validation import aa_noise_floor, validate
from lab.bench.verdicts import (
    KERNEL_MODE_WHY,
    VERDICT_RULE,
    correct_arm,
    err_stats,
    expert_summary,
    finish_errors,
    is_schedule_arm,
    lint_verdict,
    measured_durations,
    measured_verdict,
    noise_us,
)
from l2sched.errors import L2sInputError
from l2sched.files import check_output_path, write_texts_atomically
from l2sched.lint import run_lint
from l2sched.model.config import load_model_config, validate_config
from l2sched.device import load_device
from l2sched.model.inventory import analytical_inventory


def _lint_row(run_lint, sched, inv, prof, M, cfg, meas, noise, ops, step_us):
    """One lint run of an arm: errors, predicted gain/step, verdict, finish
    errors against ``ops`` and the step-level error vs ``step_us``."""
    lr = run_lint(sched, inv, device_profile=prof, tokens=int(M), measured=meas, model_config=cfg)
    e = sorted({f.code for f in lr.findings if f.severity == "error"})
    pred = lr.step_period("base") - lr.step_period("sim")
    verdict, why = lint_verdict(e, pred, noise)
    errs = finish_errors(lr.sg, lr.sim, ops)
    step = lr.step_period("sim")
    return lr, errs, {"errors": e, "pred_gain_us": pred, "pred_step_us": step,
                      "pred_base_step_us": lr.step_period("base"),
                      "step_err_pct": 100 * (step - step_us) / step_us,
                      "verdict": verdict, "reason": why, "finish_err": err_stats(errs)}


def _targets(s: dict) -> list[dict]:
    """The benchmark's targets, met or missed, from the summary ``s`` (the
    ``compiled`` arm for the per-M ones)."""
    Ms = list(s["per_m"])
    c = {M: s["per_m"][M]["arms"].get("compiled") for M in Ms}
    c = {M: r for M, r in c.items() if r}
    out = []
    g = {M: r["gain_of_ideal"] for M, r in c.items()}
    out.append({"target": "step-time gain >= 90% of the ideal gain (compiled, every M)",
                "values": g, "met": bool(g) and all(x is not None and x >= 0.9 for x in g.values())})
    e = {M: r["expert_slowdown_pct"] for M, r in c.items()}
    out.append({"target": "expert stream slowed <= 1% vs no prefetch (compiled, every M, "
                          "corrected timed graph)",
                "values": e, "met": bool(e) and all(x is not None and x <= 1.0 for x in e.values())})
    gu = {M: r["gain_us"] for M, r in c.items()}
    nz = {M: r.get("noise_us") for M, r in c.items()}
    out.append({"target": "never slower than no prefetch at any M (compiled)",
                "values": gu, "noise_us": nz,
                "met": bool(gu) and all(x >= 0 for x in gu.values()),
                "met_within_noise": bool(gu) and all(r.get("measured_verdict") == "ok"
                                                     for r in c.values())})
    v = s.get("validation", {})
    if v.get("rows"):
        th = v["thresholds"]
        for key, what, fmt in (
                ("verdict_agreement", f"three-way verdict agreement >= "
                                      f"{th['verdict_agreement']:.0%}", "{:.0%}"),
                ("median_abs_gain_err_us", f"median |predicted - measured gain| <= "
                                           f"{th['median_abs_gain_err_us']:g} us", "{:.1f} us"),
                ("spearman", f"Spearman rank correlation >= {th['spearman']:g}", "{:.2f}")):
            x = v[key]
            out.append({"target": f"{what} (out of sample, {v['n']} arm x M pairs; "
                                  f"{v['status']})",
                        "values": x, "shown": "-" if x is None else fmt.format(x),
                        "met": bool(v["met"][key]) and v["profile_measured"]})
    return out


def validation(summary: dict, d: dict, prof, controls: tuple | None = None) -> dict:
    """The out-of-sample validation (``validation`` module,
    docs/lint.md#validation) of the uncalibrated lint rows of ``summary``
    against the measured gains of result ``d``; the noise floor per M from
    the A/A arm. ``status`` says whether it is one: the profile ``prof``
    must be measured (``[provenance]``), else the figures are shown but
    marked as not a validation. Without an A/A arm: only ``status``.
    ``controls``: ``(residuals, path)`` of a controls run
    (``calibrate_model.control_residuals``), added to every prediction
    (``validation.validate``; raises ``L2sError`` for an arm without
    one)."""
    rows, floors = [], {}
    for M, m in d["per_m"].items():
        arms = m["arms"]
        if AA_ARM not in arms or "graph_step_us_all" not in arms[AA_ARM]:
            continue
        floor = aa_noise_floor(arms["none"]["graph_step_us_all"],
                               arms[AA_ARM]["graph_step_us_all"])
        floors[M] = {"floor_us": floor,
                     "aa_gain_us": summary["per_m"][M]["arms"][AA_ARM]["gain_us"]}
        for name, r in summary["per_m"][M]["arms"].items():
            if "uncalibrated" not in r or r.get("kernel_mode"):
                continue
            rows.append({"arm": name, "M": int(M), "floor_us": floor,
                         "pred_gain_us": r["uncalibrated"]["pred_gain_us"],
                         "meas_gain_us": r["gain_us"],
                         "lint_errors": r["uncalibrated"]["errors"]})
    if not floors:
        return {"status": f"no A/A arm ({AA_ARM}) in the result: not a validation "
                          f"(run `python -m lab bench run --validation`)"}
    out = validate(rows, controls)
    out["floors"] = floors
    out["profile_measured"] = prof.is_measured
    out["profile_provenance"] = dict(prof.provenance)
    out["status"] = ("profile measured by `l2sched profile` "
                     f"({prof.provenance.get('date', '?')}), a separate run"
                     if prof.is_measured else
                     "NOT a validation: the device profile is an estimate, not measured")
    if controls is not None:
        out["status"] += status_note(controls[1], kind_of(controls[0]))
    return out


def report(result: str, json_out: str, md_out: str, command: str = "",
           header: str = "", device_profile: str = "",
           controls: Sequence[str] = ()) -> dict:
    """Read ``result`` (``bench run`` JSON), lint, write ``json_out``/``md_out``;
    returns the summary dict. ``header``: markdown put verbatim at the top of
    ``md_out`` (machine, what is measured; kept in the JSON too).

    The lint uses the device profile the run's idle intervals came from: the
    copy recorded in the result (``device_profile_toml``), else
    ``device_profile`` (name or path), else the shipped ``h200`` (said so in
    the report: a profile edited since the run would lint a different
    all-reduce than was measured). ``controls``: controls runs (``bench
    run --controls``, other runs than ``result``) whose dispatch controls
    (their mean per arm and M, ``pooled_control_residuals``) are added to
    the validation's predictions (``report.validation``).
    Raises ``L2sInputError`` for a bad profile or controls run, ``L2sError``
    for an arm without a control there."""
    d = _read_result(result)
    cfg = d.get("model_config")  # the step's config (bench run --model-config)
    if cfg:
        validate_config(cfg, f"{result}: model_config")
    else:
        cfg = load_model_config(None)
    inv = analytical_inventory(cfg, tp=4, ep=False, tp_rank=0)
    prof, profile_source = _lint_profile(d, device_profile, result)
    controls = list(controls)
    protect = [result] + controls + ([device_profile] if device_profile
                                     and Path(device_profile).exists() else [])
    for out in (json_out, md_out):  # before the lint: a clash is no reason to wait
        check_output_path(out, protect=protect)
    ctl = pooled_controls(controls, prof, d, result)
    lint = _Lint(cfg=cfg, inv=inv, prof=prof,
                 specs={a["name"]: a for a in d["arms"]},
                 scheds={a["name"]: arm_schedule(a) for a in d["arms"] if a["path"]})
    summary = {"note": d.get("note", AR_NOTE), "fill_note": d.get("fill_note", FILL_NOTE),
               "verdict_rule": VERDICT_RULE, "machine": d["machine"], "command": command,
               "header": header, "replays": d["replays"], "kernel_mode_note": KERNEL_MODE_WHY,
               "device_profile": profile_source, "per_m": {}}
    totals = _Totals()
    for M, m in d["per_m"].items():
        summary["per_m"][M] = _per_m(lint, totals, result, M, m)
    _add_totals(summary, totals, prof)
    summary["validation"] = validation(summary, d, prof, ctl)
    summary["targets"] = _targets(summary)
    write_texts_atomically([(json_out, json.dumps(summary, indent=1, default=str)),
                            (md_out, markdown(summary))], protect=protect)
    return summary


def _read_result(result: str) -> dict:
    """The ``bench run`` result at path ``result``; ``L2sInputError`` when it
    is not one, is a ``--dry`` result or has no per-op records."""
    d = read_json_file(result)
    if not isinstance(d, dict) or d.get("kind") != "l2sched bench":
        raise L2sInputError(f"{result}: not a `l2sched bench run` result")
    if d.get("dry"):
        raise L2sInputError(f"{result}: a --dry result has no CUDA-graph step times to "
                            f"report")
    if any("ops" not in a for m in d.get("per_m", {}).values()
           for a in m.get("arms", {}).values()):
        raise L2sInputError(f"{result}: has no per-op records (the arms' 'ops'; committed "
                            "results drop them to stay small); lab/experiments/model_recal.py "
                            "scores its predicted vs measured gains without them")
    return d


def _lint_profile(d: dict, device_profile: str, where: str = "the result"):
    """``(DeviceProfile, where it came from)`` for the lint of result ``d``
    (see ``report``), its all-reduces the run's spin kernels
    (``validation.spin_collectives``)."""
    prof = recorded_profile(d, where)
    if prof is not None:
        profile_source = "the copy recorded in the result"
        if device_profile:  # never silently: the run's own spin lengths win
            print(f"note: --device-profile {device_profile} is not used: {where} records the "
                  f"profile it ran with (to lint it with another: lab/experiments/"
                  f"model_recal.py --profile)", file=sys.stderr)
    elif device_profile:
        prof = load_device(device_profile)
        profile_source = device_profile
    else:
        prof = load_device("h200")
        profile_source = ("the shipped h200 profile as of now (the result does not "
                          "record the one it ran with)")
    return spin_collectives(prof), profile_source


@dataclasses.dataclass
class _Lint:
    """What every lint run of one report shares: model config, inventory,
    device profile (uncalibrated), the result's arm specs and the schedules
    of the arms that have one (by arm name)."""
    cfg: Any
    inv: Any
    prof: Any
    specs: dict
    scheds: dict


@dataclasses.dataclass
class _Totals:
    """Accumulated over every M and arm: per-op sources, verdict agreement
    ``[agree, total]`` per count, and the finish-time errors pooled per
    label (all linted arms, schedule arms only, uncorrected)."""
    sources: set = dataclasses.field(default_factory=set)
    agree: dict = dataclasses.field(
        default_factory=lambda: {"schedule_arms": [0, 0], "all_arms": [0, 0]})
    pooled: dict = dataclasses.field(
        default_factory=lambda: {"uncalibrated": [], "calibrated": []})
    pooled_sched: dict = dataclasses.field(
        default_factory=lambda: {"uncalibrated": [], "calibrated": []})
    pooled_raw: dict = dataclasses.field(
        default_factory=lambda: {"uncalibrated": [], "calibrated": []})


@dataclasses.dataclass
class _Reference:
    """The no-prefetch reference of one M: the ``none`` arm raw and
    corrected, its untimed graph step ``ng`` (stats, us), the ideal gain
    (us), the calibration (corrected and raw) and the calibrated profile;
    ``base_err``/``base_step``: the lint's no-prefetch baseline, filled from
    the ``compiled`` arm's lint runs (None without one)."""
    M: str
    none: dict
    none_c: dict
    ng: dict
    ideal: Any
    measured: dict
    measured_raw: dict
    prof_cal: Any
    base_err: dict | None = None
    base_step: dict | None = None


def _per_m(lint: _Lint, totals: _Totals, result: str, M: str, m: dict) -> dict:
    """The summary of one M (``m``: the result's ``per_m[M]``): calibration
    from the corrected no-prefetch arm, a row per arm. Raises ``ValueError``
    without CUDA-graph step times."""
    arms = m["arms"]
    none = arms["none"]
    if "graph_step_us" not in none:
        raise ValueError(f"M={M}: no CUDA-graph step times in {result} (a dry run?)")
    ng = none["graph_step_us"]
    ideal = m["ideal"]["ideal_gain_us"]
    none_c, _ = correct_arm(none)
    measured = measured_durations(none_c["ops"], lint.inv.kinds)
    measured_raw = measured_durations(none["ops"], lint.inv.kinds)
    # calibrated kernel gap: what the untimed no-prefetch step leaves
    # after its corrected main-stream durations, per main-stream op
    main_durs = [o["dur_us"] for o in none_c["ops"].values() if o["stream"] == "main"]
    gap_us = (max(0.0, (ng["median"] - sum(main_durs)) / len(main_durs))
              if main_durs else lint.prof.kernel_gap_us)
    ref = _Reference(M=M, none=none, none_c=none_c, ng=ng, ideal=ideal, measured=measured,
                     measured_raw=measured_raw,
                     prof_cal=dataclasses.replace(lint.prof, kernel_gap_us=gap_us))
    rows = {}
    for name, a in arms.items():
        rows[name] = _arm_row(lint, totals, ref, name, a)
    return {"ideal_gain_us": ideal, "ideal": m["ideal"]["consumers"],
            "distinct_experts": m["distinct_experts"],
            "calibrated_kernel_gap_us": gap_us,
            "calibration_us": {f"{k[0]}|{k[1]}": v
                               for k, v in sorted(measured.items())},
            "raw_calibration_us": {f"{k[0]}|{k[1]}": v
                                   for k, v in sorted(measured_raw.items())},
            "none_finish_err": ref.base_err, "none_step_pred": ref.base_step,
            "arms": rows}


def _arm_row(lint: _Lint, totals: _Totals, ref: _Reference, name: str, a: dict) -> dict:
    """The summary row of arm ``name`` (``a``: its measurement at this M):
    step time and gain, the timed graph's overhead, expert stream and fills
    (corrected; uncorrected under ``raw``) and, for an arm with a schedule,
    the lint's (``_lint_arm``)."""
    totals.sources.add(a.get("per_op_source", "eager"))
    ac, ov = correct_arm(a)
    g = a["graph_step_us"]
    gain = ref.ng["median"] - g["median"]
    row = {"step_us": g, "gain_us": gain,
           "gain_pct": 100 * gain / ref.ng["median"],
           "gain_of_ideal": gain / ref.ideal if ref.ideal else None,
           "timed_step_us": a.get("timed_graph_step_us"),
           "in_graph_step_us": a.get("in_graph_step_us"),
           "main_gap_us": a.get("main_gap_us"),
           "event_overhead": ov,
           "per_op_source": a.get("per_op_source", "eager"),
           "runtime_stats": a.get("runtime_stats")}
    if row["timed_step_us"]:
        row["timing_overhead_pct"] = 100 * (row["timed_step_us"]["median"]
                                            - g["median"]) / g["median"]
    row.update(expert_summary(ac, ref.none_c))
    raw = {"expert": expert_summary(a, ref.none)}
    if name in lint.scheds:
        _lint_arm(lint, totals, ref, name, a, ac, gain, row, raw)
    row["raw"] = raw
    return row


def _lint_arm(lint: _Lint, totals: _Totals, ref: _Reference, name: str, a: dict,
              ac: dict, gain: float, row: dict, raw: dict) -> None:
    """Lint arm ``name`` (``a`` raw, ``ac`` corrected; ``gain`` measured, us)
    uncalibrated and calibrated: verdicts and finish-time errors against the
    corrected times into ``row``, against the uncorrected ones into ``raw``;
    agreement and pooled errors into ``totals``; for ``compiled``, the
    lint's no-prefetch baseline into ``ref`` (``_baseline``)."""
    g = a["graph_step_us"]
    kernel_mode = not is_schedule_arm(lint.specs.get(name, {}))
    scored = not kernel_mode and not is_control(name)  # what the headline counts
    row["kernel_mode"] = kernel_mode
    noise = noise_us(g, ref.ng)
    row["noise_us"] = noise
    row["measured_verdict"] = measured_verdict(gain, noise)
    for label, meas, meas_raw in (("uncalibrated", None, None),
                                  ("calibrated", ref.measured, ref.measured_raw)):
        lp = lint.prof if meas is None else ref.prof_cal
        lp_raw = lint.prof
        if lint.specs.get(name, {}).get("decoy"):  # its fills read a scratch buffer
            lp, lp_raw = without_hits(lp), without_hits(lp_raw)
        lr, errs, row[label] = _lint_row(run_lint, lint.scheds[name], lint.inv, lp, ref.M,
                                         lint.cfg, meas, noise, ac["ops"], g["median"])
        totals.pooled[label] += errs
        if scored:
            totals.pooled_sched[label] += errs
        # uncorrected: timed-graph finish times (and durations)
        if meas_raw is None:
            lr_raw, rr = lr, dict(row[label])
            errs_raw = finish_errors(lr.sg, lr.sim, a["ops"])
            rr["finish_err"] = err_stats(errs_raw)
        else:
            lr_raw, errs_raw, rr = _lint_row(run_lint, lint.scheds[name], lint.inv, lp_raw,
                                             ref.M, lint.cfg, meas_raw, noise, a["ops"],
                                             g["median"])
        totals.pooled_raw[label] += errs_raw
        raw[label] = rr
        if name == "compiled":
            _baseline(ref, label, lr, lr_raw)
    row["agree"] = row["calibrated"]["verdict"] == row["measured_verdict"]
    raw["agree"] = raw["calibrated"]["verdict"] == row["measured_verdict"]
    for key in ("all_arms",) + (("schedule_arms",) if scored else ()):
        totals.agree[key][0] += row["agree"]
        totals.agree[key][1] += 1


def _baseline(ref: _Reference, label: str, lr, lr_raw) -> None:
    """The lint's no-prefetch baseline under ``label``, from the
    ``compiled`` arm's lint runs ``lr`` (corrected) and ``lr_raw``: its
    finish-time errors vs the ``none`` arm (uncorrected under ``raw``) and
    its predicted step vs the untimed graph's."""
    ng = ref.ng
    ref.base_err = ref.base_err or {}
    ref.base_err[label] = err_stats(finish_errors(lr.base_sg, lr.base, ref.none_c["ops"]))
    ref.base_err.setdefault("raw", {})[label] = err_stats(
        finish_errors(lr_raw.base_sg, lr_raw.base, ref.none["ops"]))
    b = lr.step_period("base")
    ref.base_step = ref.base_step or {}
    ref.base_step[label] = {"pred_step_us": b,
                            "step_err_pct": 100 * (b - ng["median"]) / ng["median"]}


def _add_totals(summary: dict, totals: _Totals, prof) -> None:
    """The summary's keys over all M: per-op sources, verdict agreement,
    median finish-time errors, the profile's kernel gap per step."""
    summary["per_op_source"] = sorted(totals.sources)
    summary["verdict_agreement"] = {k: {"agree": v[0], "total": v[1]}
                                    for k, v in totals.agree.items()}
    summary["verdict_agreement"]["why"] = KERNEL_MODE_WHY

    def meds(p):
        return {k: statistics.median(v) if v else None for k, v in p.items()}
    summary["finish_err_median"] = meds(totals.pooled)
    summary["finish_err_median_schedule_arms"] = meds(totals.pooled_sched)
    summary["raw"] = {"finish_err_median": meds(totals.pooled_raw),
                      "note": "uncorrected: timed-graph durations (calibration) and finish "
                              "times, event overhead included"}
    n_main = next((r["event_overhead"]["n_main"] for p in summary["per_m"].values()
                   for r in p["arms"].values() if r.get("event_overhead")), None)
    if n_main:
        summary["lint_kernel_gap"] = {"kernel_gap_us": prof.kernel_gap_us, "n_main": n_main,
                                      "per_step_us": prof.kernel_gap_us * n_main}
