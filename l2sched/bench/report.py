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


def _pct(x) -> str:
    return "-" if x is None else f"{x:.0%}"


def _us(x, fmt="{:.0f}") -> str:
    return "-" if x is None else fmt.format(x)


def markdown(s: dict) -> str:
    """The human tables: step times and gains per arm x M, the timed graph's
    overhead, ideal gain, expert stream and fills, lint vs measurement."""
    Ms = list(s["per_m"])
    arms = list(next(iter(s["per_m"].values()))["arms"])
    src = ", ".join(s.get("per_op_source", []))
    out = []
    if s.get("header"):
        out += [s["header"].rstrip("\n"), ""]
    if s.get("targets"):
        out += ["## Targets", "", "Numbers computed by `l2sched bench report` from this result "
                "(per-M values of the `compiled` arm: M=value).", ""]
        for t in s["targets"]:
            out.append(f"- **{'met' if t['met'] else 'missed'}**: {t['target']}: "
                       + _target_values(t))
        out.append("")
    if s.get("device_profile"):
        out += [f"Lint device profile: {s['device_profile']}.", ""]
    if s.get("command"):
        out += ["## Command", "", "```sh", s["command"],
                "l2sched bench report RESULT --json-out J --md-out M --command ... --header H",
                "```", ""]
    out += [f"Per-op times: {src}" + (" (in-graph external CUDA events of a timed graph "
                                     "variant)" if src == "graph" else
                                     " (NOT in-graph: host-launch-bound fallback)"),
           f"Note: {s['note']}.", f"Fills: {s['fill_note']}.", "",
           "| arm | " + " | ".join(f"M={M} step us (p10-p90)" for M in Ms) + " |",
           "|---|" + "---|" * len(Ms)]
    for a in arms:
        cells = []
        for M in Ms:
            r = s["per_m"][M]["arms"][a]
            st = r["step_us"]
            c = f"{st['median']:.0f} ({st['p10']:.0f}-{st['p90']:.0f})"
            if a != "none":
                c += f", {r['gain_us']:+.0f} us ({r['gain_pct']:+.2f}%)"
            cells.append(c)
        out.append(f"| {a} | " + " | ".join(cells) + " |")
    out += ["", "Timed graph variant (event nodes) vs untimed graph, median us: "
            "untimed / timed replay / timed in-graph first-to-last event (overhead %).", "",
            "| arm | " + " | ".join(f"M={M}" for M in Ms) + " |", "|---|" + "---|" * len(Ms)]
    for a in arms:
        cells = []
        for M in Ms:
            r = s["per_m"][M]["arms"][a]
            t, ig = r.get("timed_step_us"), r.get("in_graph_step_us")
            ov = r.get("timing_overhead_pct")
            cells.append(f"{r['step_us']['median']:.0f} / {_us(t and t['median'])} / "
                         f"{_us(ig and ig['median'])} ({'-' if ov is None else f'{ov:+.1f}%'})")
        out.append(f"| {a} | " + " | ".join(cells) + " |")
    out += ["", "Event-overhead correction (per arm and M, us): o = (timed - untimed median "
            "step) / n timed main-stream ops, split into g = median gap between one op's end "
            "event and the next op's start event and c = o - g inside every op's e0->e1 "
            "duration. The k-th main-stream op (0-based, start order) measures d = D + c, "
            "starts s0 + T_start + k*o and finishes s0 + T_finish + k*o + c after the start "
            "event (s0: lead to the first op's start event; every earlier op added o, its "
            "own end event is inside its duration), so D = max(0, d - c), finish = f - s0 - "
            "k*o - c. Aux-stream ops carry the same event pair, so the same c; fill exits and "
            "expert starts are shifted by the main ops before them. Calibration and "
            "finish-time errors use the corrected values; the JSON keeps the uncorrected ones "
            "under `raw`. Cells: o / g / c (n main ops).", "",
            "| arm | " + " | ".join(f"M={M}" for M in Ms) + " |", "|---|" + "---|" * len(Ms)]
    for a in arms:
        cells = []
        for M in Ms:
            ov = s["per_m"][M]["arms"][a].get("event_overhead")
            cells.append("-" if not ov else f"{ov['per_op_us']:.2f} / {ov['gap_us']:.2f} / "
                         f"{ov['in_dur_us']:.2f} ({ov['n_main']})")
        out.append(f"| {a} | " + " | ".join(cells) + " |")
    out += ["", "| M | ideal gain us | compiled gain us | fraction of ideal |",
            "|---|---|---|---|"]
    for M in Ms:
        p = s["per_m"][M]
        r = p["arms"].get("compiled")
        if r:
            out.append(f"| {M} | {p['ideal_gain_us']:.0f} | {r['gain_us']:.0f} | "
                       f"{_pct(r['gain_of_ideal'])} |")
    out += ["", "Expert stream = sum of the routed-expert GEMMs per step (timed graph, "
            "event overhead c removed per GEMM); margin = expert-stream start - fill kernel "
            "exit, corrected (negative = the fill kernel was still running when the experts "
            "started). In brackets: uncorrected.", "",
            "| arm | M | expert stream us | vs none | fill points | exits after expert start "
            "| min / median margin us |", "|---|---|---|---|---|---|---|"]
    for M in Ms:
        for a, r in s["per_m"][M]["arms"].items():
            x = r.get("raw", {}).get("expert") or r
            out.append(f"| {a} | {M} | {_us(r['expert_stream_us'], '{:.1f}')} "
                       f"({_us(x['expert_stream_us'], '{:.1f}')}) | "
                       f"{_us(r['expert_slowdown_pct'], '{:+.2f}')}% "
                       f"({_us(x['expert_slowdown_pct'], '{:+.2f}')}%) | {r['fill_points']} | "
                       f"{r['exits_after_expert_start']} ({x['exits_after_expert_start']}) | "
                       f"{_us(r['min_margin_us'], '{:.1f}')} / "
                       f"{_us(r['median_margin_us'], '{:.1f}')} "
                       f"({_us(x['min_margin_us'], '{:.1f}')} / "
                       f"{_us(x['median_margin_us'], '{:.1f}')}) |")
    out += ["", f"Verdicts: {s['verdict_rule']}.", "",
            "| arm | M | lint errors (cal) | predicted gain us (uncal / cal) | measured gain us "
            "| noise us | lint verdict uncal | lint verdict cal | measured verdict | agree (cal) "
            "| finish-time error median (uncal / cal) |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for M in Ms:
        for a, r in s["per_m"][M]["arms"].items():
            if "agree" not in r:
                continue
            u, c = r["uncalibrated"], r["calibrated"]
            fu, fc = u["finish_err"], c["finish_err"]
            vu, vc = (x["verdict"] + (f" ({x['reason']})" if x["reason"] else "") for x in (u, c))
            out.append(f"| {a}{' (kernel mode)' if r.get('kernel_mode') else ''} | {M} | "
                       f"{','.join(c['errors']) or '-'} | "
                       f"{u['pred_gain_us']:+.0f} / {c['pred_gain_us']:+.0f} | {r['gain_us']:+.0f} | "
                       f"{r['noise_us']:.0f} | {vu} | {vc} | {r['measured_verdict']} | "
                       f"{'yes' if r['agree'] else 'NO'} | "
                       f"{_pct(fu and fu['median'])} / {_pct(fc and fc['median'])} |")
    va = s["verdict_agreement"]
    fe, fs = s["finish_err_median"], s.get("finish_err_median_schedule_arms", {})
    fr = s.get("raw", {}).get("finish_err_median", {})

    def frac(a):
        return f"{a['agree']}/{a['total']}" + (f" ({a['agree'] / a['total']:.0%})"
                                               if a["total"] else "")
    out += ["", f"Lint verdict agreement (calibrated), schedule arms (headline): "
            f"{frac(va['schedule_arms'])}; all arms including kernel-mode arms: "
            f"{frac(va['all_arms'])}. Why two counts: {va['why']}.",
            f"Median per-op finish-time error (corrected finish times) over all linted arms and "
            f"M: uncalibrated {_pct(fe['uncalibrated'])}, calibrated {_pct(fe['calibrated'])}; "
            f"schedule arms only: uncalibrated {_pct(fs.get('uncalibrated'))}, calibrated "
            f"{_pct(fs.get('calibrated'))}; uncorrected (timed graph, event overhead in the "
            f"calibration and the finish times): uncalibrated {_pct(fr.get('uncalibrated'))}, "
            f"calibrated {_pct(fr.get('calibrated'))}"]
    for M in Ms:
        b = s["per_m"][M].get("none_finish_err")
        if b:
            out.append(f"- M={M}, no-prefetch step (lint baseline vs the none arm): "
                       f"uncalibrated {_pct(b['uncalibrated'] and b['uncalibrated']['median'])}, "
                       f"calibrated {_pct(b['calibrated'] and b['calibrated']['median'])}")
    kg = s.get("lint_kernel_gap")
    out += ["", "Step level: the lint's predicted step time vs the untimed graph's median step "
            "(the real one), error = (predicted - measured) / measured. `none` = the lint's "
            "no-prefetch baseline."
            + (f" Uncalibrated, the profile's kernel_gap_us = {kg['kernel_gap_us']:g} us is "
               f"added on each of ~{kg['n_main']} same-stream kernel edges "
               f"({kg['per_step_us']:.0f} us per step). Calibrated, the gap is measured too: "
               f"(untimed no-prefetch step - sum of its corrected main-stream durations) / "
               f"main-stream ops = "
               + ", ".join(f"M={M}: {s['per_m'][M].get('calibrated_kernel_gap_us', 0):.2f} us"
                           for M in s["per_m"]) + "." if kg else ""), "",
            "| arm | M | measured step us | predicted uncal us (error) | predicted cal us (error) |",
            "|---|---|---|---|---|"]
    for M in Ms:
        for a, r in s["per_m"][M]["arms"].items():
            if a == "none":
                u = c = None
                b = s["per_m"][M].get("none_step_pred")
                if b:
                    u, c = b.get("uncalibrated"), b.get("calibrated")
            elif "agree" in r:
                u, c = r["uncalibrated"], r["calibrated"]
            else:
                continue

            def cell(x):
                return "-" if not x else f"{x['pred_step_us']:.0f} ({x['step_err_pct']:+.1f}%)"
            out.append(f"| {a} | {M} | {r['step_us']['median']:.0f} | {cell(u)} | {cell(c)} |")
    return "\n".join(out) + "\n"


def _target_values(t: dict) -> str:
    v = t["values"]
    if "agree" in t:
        return f"{t['agree']}/{t['total']}" + ("" if v is None else f" = {v:.0%}")
    if not isinstance(v, dict):
        return "-" if v is None else f"{v:.1%}"
    if "noise_us" in t:
        cells = [f"M={M}: {x:+.0f} us (noise {t['noise_us'][M]:.0f} us)" for M, x in v.items()]
        return ", ".join(cells) + (
            "; strictly slower at " + ", ".join(f"M={M}" for M, x in v.items() if x < 0)
            + (", within the noise threshold" if t["met_within_noise"] else
               ", NOT within the noise threshold")
            if not t["met"] else "")
    if "ideal" in t["target"]:
        return ", ".join(f"M={M}: {_pct(x)}" for M, x in v.items())
    return ", ".join(f"M={M}: {_us(x, '{:+.2f}')}%" for M, x in v.items())
