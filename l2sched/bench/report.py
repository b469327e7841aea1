"""``l2sched bench report``: lint every measured arm on CPU, compare with the
measurement and write the summary JSON and markdown.

The rules (noise threshold, verdicts, calibration, finish-time errors, the
timed graph's event-overhead correction, the two agreement counts) are in
``verdicts``. Units: us unless a name says otherwise.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

from l2sched.bench import read_json_file, shipped_path
from l2sched.bench.markdown import markdown
from l2sched.bench.run import AR_NOTE, FILL_NOTE
from l2sched.bench.verdicts import (
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
from l2sched.files import write_texts_atomically
from l2sched.lang.resolve import load_schedule
from l2sched.lint import run_lint
from l2sched.model.config import load_model_config
from l2sched.model.devices import load_device
from l2sched.model.inventory import analytical_inventory


def _lint_row(run_lint, sched, inv, prof, M, cfg, meas, noise, ops, step_us):
    """One lint run of an arm: errors, predicted gain/step, verdict, finish
    errors against ``ops`` and the step-level error vs ``step_us``."""
    lr = run_lint(sched, inv, device=prof, tokens=int(M), measured=meas, model_config=cfg)
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
    va, fe = s["verdict_agreement"], s["finish_err_median"]
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
    for key, what in (("schedule_arms", "schedule arms (headline)"), ("all_arms", "all arms")):
        a = va[key]
        frac = a["agree"] / a["total"] if a["total"] else None
        out.append({"target": f"lint verdict agreement >= 95% ({what})", "values": frac,
                    "agree": a["agree"], "total": a["total"],
                    "met": frac is not None and frac >= 0.95})
    out.append({"target": "median per-op finish-time error <= 10% after calibration "
                          "(corrected times, all linted arms and M)",
                "values": fe["calibrated"],
                "met": fe["calibrated"] is not None and fe["calibrated"] <= 0.10})
    return out


def report(result: str, json_out: str, md_out: str, command: str = "",
           header: str = "", device_profile: str = "") -> dict:
    """Read ``result`` (``bench run`` JSON), lint, write ``json_out``/``md_out``;
    returns the summary dict. ``header``: markdown put verbatim at the top of
    ``md_out`` (machine, what is measured; kept in the JSON too).

    The lint uses the device profile the run's idle intervals came from: the
    copy recorded in the result (``device_profile_toml``), else
    ``device_profile`` (name or path), else the shipped ``h200`` (said so in
    the report: a profile edited since the run would lint a different
    all-reduce than was measured). Raises ``L2sInputError`` for a bad
    profile."""


    d = read_json_file(result)
    if not isinstance(d, dict) or d.get("kind") != "l2sched bench":
        raise L2sInputError(f"{result}: not a `l2sched bench run` result")
    if d.get("dry"):
        raise L2sInputError(f"{result}: a --dry result has no CUDA-graph step times to "
                            f"report")
    cfg = load_model_config(None)
    inv = analytical_inventory(cfg, tp=4, ep=False, tp_rank=0)
    if d.get("device_profile_toml"):
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            p = Path(tmp) / "h200.toml"
            p.write_text(d["device_profile_toml"], encoding="utf-8")
            prof = load_device(str(p))
        profile_source = "the copy recorded in the result"
    elif device_profile:
        prof = load_device(device_profile)
        profile_source = device_profile
    else:
        prof = load_device("h200")
        profile_source = ("the shipped h200 profile as of now (the result does not "
                          "record the one it ran with)")
    specs = {a["name"]: a for a in d["arms"]}
    scheds = {a["name"]: load_schedule(shipped_path(a["path"]), a["overrides"])
              for a in d["arms"] if a["path"]}
    summary = {"note": AR_NOTE, "fill_note": d.get("fill_note", FILL_NOTE),
               "verdict_rule": VERDICT_RULE, "machine": d["machine"], "command": command,
               "header": header, "replays": d["replays"], "kernel_mode_note": KERNEL_MODE_WHY,
               "device_profile": profile_source, "per_m": {}}
    sources = set()
    agree = {"schedule_arms": [0, 0], "all_arms": [0, 0]}
    pooled = {"uncalibrated": [], "calibrated": []}
    pooled_sched = {"uncalibrated": [], "calibrated": []}
    pooled_raw = {"uncalibrated": [], "calibrated": []}
    for M, m in d["per_m"].items():
        arms = m["arms"]
        none = arms["none"]
        if "graph_step_us" not in none:
            raise ValueError(f"M={M}: no CUDA-graph step times in {result} (a dry run?)")
        ng = none["graph_step_us"]
        ideal = m["ideal"]["ideal_gain_us"]
        none_c, _ = correct_arm(none)
        measured = measured_durations(none_c["ops"], inv.kinds)
        measured_raw = measured_durations(none["ops"], inv.kinds)
        # calibrated kernel gap: what the untimed no-prefetch step leaves
        # after its corrected main-stream durations, per main-stream op
        main_durs = [o["dur_us"] for o in none_c["ops"].values() if o["stream"] == "main"]
        gap_us = (max(0.0, (ng["median"] - sum(main_durs)) / len(main_durs))
                  if main_durs else prof.kernel_gap_us)
        prof_cal = dataclasses.replace(prof, kernel_gap_us=gap_us)
        rows = {}
        base_err = base_step = None
        for name, a in arms.items():
            sources.add(a.get("per_op_source", "eager"))
            ac, ov = correct_arm(a)
            g = a["graph_step_us"]
            gain = ng["median"] - g["median"]
            row = {"step_us": g, "gain_us": gain,
                   "gain_pct": 100 * gain / ng["median"],
                   "gain_of_ideal": gain / ideal if ideal else None,
                   "timed_step_us": a.get("timed_graph_step_us"),
                   "in_graph_step_us": a.get("in_graph_step_us"),
                   "main_gap_us": a.get("main_gap_us"),
                   "event_overhead": ov,
                   "per_op_source": a.get("per_op_source", "eager"),
                   "runtime_stats": a.get("runtime_stats")}
            if row["timed_step_us"]:
                row["timing_overhead_pct"] = 100 * (row["timed_step_us"]["median"]
                                                    - g["median"]) / g["median"]
            row.update(expert_summary(ac, none_c))
            raw = {"expert": expert_summary(a, none)}
            if name in scheds:
                kernel_mode = not is_schedule_arm(specs.get(name, {}))
                row["kernel_mode"] = kernel_mode
                noise = noise_us(g, ng)
                row["noise_us"] = noise
                row["measured_verdict"] = measured_verdict(gain, noise)
                for label, meas, meas_raw in (("uncalibrated", None, None),
                                              ("calibrated", measured, measured_raw)):
                    lp = prof if meas is None else prof_cal
                    lr, errs, row[label] = _lint_row(run_lint, scheds[name], inv, lp, M, cfg,
                                                     meas, noise, ac["ops"], g["median"])
                    pooled[label] += errs
                    if not kernel_mode:
                        pooled_sched[label] += errs
                    # uncorrected: timed-graph finish times (and durations)
                    if meas_raw is None:
                        lr_raw, rr = lr, dict(row[label])
                        errs_raw = finish_errors(lr.sg, lr.sim, a["ops"])
                        rr["finish_err"] = err_stats(errs_raw)
                    else:
                        lr_raw, errs_raw, rr = _lint_row(run_lint, scheds[name], inv, prof, M,
                                                         cfg, meas_raw, noise, a["ops"],
                                                         g["median"])
                    pooled_raw[label] += errs_raw
                    raw[label] = rr
                    if name == "compiled":
                        base_err = base_err or {}
                        base_err[label] = err_stats(finish_errors(lr.base_sg, lr.base,
                                                                  none_c["ops"]))
                        base_err.setdefault("raw", {})[label] = err_stats(
                            finish_errors(lr_raw.base_sg, lr_raw.base, none["ops"]))
                        b = lr.step_period("base")
                        base_step = base_step or {}
                        base_step[label] = {"pred_step_us": b,
                                            "step_err_pct": 100 * (b - ng["median"]) / ng["median"]}
                row["agree"] = row["calibrated"]["verdict"] == row["measured_verdict"]
                raw["agree"] = raw["calibrated"]["verdict"] == row["measured_verdict"]
                for key in ("all_arms",) + (() if kernel_mode else ("schedule_arms",)):
                    agree[key][0] += row["agree"]
                    agree[key][1] += 1
            row["raw"] = raw
            rows[name] = row
        summary["per_m"][M] = {"ideal_gain_us": ideal, "ideal": m["ideal"]["consumers"],
                               "distinct_experts": m["distinct_experts"],
                               "calibrated_kernel_gap_us": gap_us,
                               "calibration_us": {f"{k[0]}|{k[1]}": v
                                                  for k, v in sorted(measured.items())},
                               "raw_calibration_us": {f"{k[0]}|{k[1]}": v
                                                      for k, v in sorted(measured_raw.items())},
                               "none_finish_err": base_err, "none_step_pred": base_step,
                               "arms": rows}
    summary["per_op_source"] = sorted(sources)
    summary["verdict_agreement"] = {k: {"agree": v[0], "total": v[1]} for k, v in agree.items()}
    summary["verdict_agreement"]["why"] = KERNEL_MODE_WHY

    def meds(p):
        return {k: statistics.median(v) if v else None for k, v in p.items()}
    summary["finish_err_median"] = meds(pooled)
    summary["finish_err_median_schedule_arms"] = meds(pooled_sched)
    summary["raw"] = {"finish_err_median": meds(pooled_raw),
                      "note": "uncorrected: timed-graph durations (calibration) and finish "
                              "times, event overhead included"}
    n_main = next((r["event_overhead"]["n_main"] for p in summary["per_m"].values()
                   for r in p["arms"].values() if r.get("event_overhead")), None)
    if n_main:
        summary["lint_kernel_gap"] = {"kernel_gap_us": prof.kernel_gap_us, "n_main": n_main,
                                      "per_step_us": prof.kernel_gap_us * n_main}
    summary["targets"] = _targets(summary)
    protect = [result] + ([device_profile] if device_profile
                          and Path(device_profile).exists() else [])
    write_texts_atomically([(json_out, json.dumps(summary, indent=1, default=str)),
                            (md_out, markdown(summary))], protect=protect)
    return summary
