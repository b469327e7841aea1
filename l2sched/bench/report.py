"""``l2sched bench report``: lint every measured arm on CPU, compare with the
measurement and write the summary JSON and markdown.

Noise threshold of an arm at one M (us): the larger of the arm's and the
no-prefetch arm's p10-p90 half-spreads of the untimed CUDA-graph step time.

Verdicts:

- measured ``bad``: the arm's median step time is above the no-prefetch
  median by more than the noise threshold;
- lint ``bad``: the lint reports an error finding, OR its predicted step-time
  change (``step_period("base") - step_period("sim")``, us; negative = the
  schedule makes the step slower) is a slowdown beyond the same noise
  threshold. A lint that predicts a slower step predicts a bad schedule, even
  when no rule fires. The agreement counts the calibrated lint's verdict.

Calibration: ``run_lint(measured=...)`` with the no-prefetch arm's measured
per-op durations, median per ``(layer kind, op)`` (the dict
``lint.calibrate.measure`` returns). With ``per_op_source`` ``graph`` they
come from the timed CUDA-graph variant (in-graph external events); ``eager``
marks the old host-launch-bound fallback. Finish-time error: |predicted -
measured| / measured finish time (us from the step's start) per main-stream
op of the step, predicted by the arm's lint simulation, measured in the
arm's timed graph. Units: us unless a name says otherwise.
"""

from __future__ import annotations

import json
import statistics

from .run import AR_NOTE, FILL_NOTE, _q

VERDICT_RULE = ("lint verdict bad = an error finding, or a predicted step-time change "
                "that is a slowdown beyond the noise threshold; measured verdict bad = "
                "median step slower than no prefetch by more than the noise threshold "
                "(the larger p10-p90 half-spread of the arm and no prefetch)")


def half_spread(s: dict) -> float:
    """Half the p10-p90 spread of a ``stats`` dict (us)."""
    return (s["p90"] - s["p10"]) / 2


def noise_us(arm: dict, none: dict) -> float:
    """Noise threshold (us) of an arm's step-time ``stats`` vs the
    no-prefetch arm's."""
    return max(half_spread(arm), half_spread(none))


def measured_verdict(gain_us: float, noise: float) -> str:
    """``bad`` when the measured gain (us, positive = faster) is a slowdown
    beyond ``noise`` (us), else ``ok``."""
    return "bad" if gain_us < -noise else "ok"


def lint_verdict(errors, pred_gain_us: float, noise: float) -> tuple[str, str]:
    """``(verdict, reason)`` of a lint run: ``bad`` on an error finding
    (``errors``: codes) or a predicted gain (us) below ``-noise`` (us)."""
    if errors:
        return "bad", "error " + ",".join(errors)
    if pred_gain_us < -noise:
        return "bad", f"predicted slowdown {-pred_gain_us:.0f} us > noise {noise:.0f} us"
    return "ok", ""


def measured_durations(ops: dict, kinds) -> dict:
    """``(layer kind, op) -> us``: the median of the measured per-op
    durations ``ops`` (``"layer:op" -> {dur_us, ...}``) over the layers of
    each kind (``kinds[layer]`` = the inventory's ``LayerKind``)."""
    per: dict = {}
    for k, v in ops.items():
        layer, op = k.split(":", 1)
        per.setdefault((str(kinds[int(layer)]), op), []).append(v["dur_us"])
    return {k: statistics.median(v) for k, v in per.items()}


def finish_errors(sg, sim, ops) -> list[float]:
    """|predicted - measured| / measured finish time of every main-stream op
    of the step (positions < N, active) that ``ops`` measured
    (``"layer:op" -> {finish_us}``, us from the step start); ``sg``/``sim``:
    a lint run's step graph and simulation."""
    n = sg.num_layers
    errs = []
    for v in sg.graph.nodes:
        d = sg.graph.nodes[v]
        if d.get("pos", n) >= n or d.get("stream") != "main" or not d.get("active", True):
            continue
        m = ops.get(f"{d['layer']}:{d['op']}")
        if not m or m["finish_us"] <= 0:
            continue
        errs.append(abs(sim.timing[v].finish - m["finish_us"]) / m["finish_us"])
    return errs


def err_stats(errs: list[float]) -> dict | None:
    """``{median, p90, n}`` of relative errors, None when empty."""
    if not errs:
        return None
    return {"median": statistics.median(errs), "p90": _q(errs, 0.9), "n": len(errs)}


def expert_summary(arm: dict, none: dict) -> dict:
    """Expert stream (sum of its GEMMs per step, us) of ``arm`` and the
    slowdown vs no prefetch (%, positive = slower); fills: how many side
    events, how many exited after the expert stream after them started,
    the smallest and median margin (expert start - fill exit, us)."""
    def med(x):
        return x["median"] if isinstance(x, dict) else x
    e, e0 = med(arm.get("expert_stream_us")), med(none.get("expert_stream_us"))
    margins = [f["exit_before_experts_us"] for f in arm.get("fills", {}).values()
               if f.get("exit_before_experts_us") is not None]
    return {"expert_stream_us": e,
            "expert_slowdown_pct": 100 * (e - e0) / e0 if e and e0 else None,
            "fill_points": len(arm.get("fills", {})),
            "exits_after_expert_start": sum(1 for m in margins if m < 0),
            "min_margin_us": min(margins) if margins else None,
            "median_margin_us": statistics.median(margins) if margins else None}


def report(result: str, json_out: str, md_out: str, command: str = "") -> dict:
    """Read ``result`` (``bench run`` JSON), lint, write ``json_out``/``md_out``;
    returns the summary dict."""
    from ..devices import load_device
    from ..inventory import analytical_inventory, load_model_config
    from ..lint import run_lint
    from ..semantic import load_schedule

    with open(result) as f:
        d = json.load(f)
    cfg = load_model_config(None)
    inv = analytical_inventory(cfg, tp=4, ep=False, tp_rank=0)
    prof = load_device("h200")
    scheds = {a["name"]: load_schedule(a["path"], a["overrides"])
              for a in d["arms"] if a["path"]}
    summary = {"note": AR_NOTE, "fill_note": d.get("fill_note", FILL_NOTE),
               "verdict_rule": VERDICT_RULE, "machine": d["machine"], "command": command,
               "replays": d["replays"], "per_m": {}}
    sources = set()
    agree = total = 0
    pooled = {"uncalibrated": [], "calibrated": []}
    for M, m in d["per_m"].items():
        arms = m["arms"]
        none = arms["none"]
        if "graph_step_us" not in none:
            raise ValueError(f"M={M}: no CUDA-graph step times in {result} (a dry run?)")
        ng = none["graph_step_us"]
        ideal = m["ideal"]["ideal_gain_us"]
        measured = measured_durations(none["ops"], inv.kinds)
        rows = {}
        base_err = None
        for name, a in arms.items():
            sources.add(a.get("per_op_source", "eager"))
            g = a["graph_step_us"]
            gain = ng["median"] - g["median"]
            row = {"step_us": g, "gain_us": gain,
                   "gain_pct": 100 * gain / ng["median"],
                   "gain_of_ideal": gain / ideal if ideal else None,
                   "timed_step_us": a.get("timed_graph_step_us"),
                   "in_graph_step_us": a.get("in_graph_step_us"),
                   "main_gap_us": a.get("main_gap_us"),
                   "per_op_source": a.get("per_op_source", "eager"),
                   "runtime_stats": a.get("runtime_stats")}
            if row["timed_step_us"]:
                row["timing_overhead_pct"] = 100 * (row["timed_step_us"]["median"]
                                                    - g["median"]) / g["median"]
            row.update(expert_summary(a, none))
            if name in scheds:
                noise = noise_us(g, ng)
                row["noise_us"] = noise
                row["measured_verdict"] = measured_verdict(gain, noise)
                for label, meas in (("uncalibrated", None), ("calibrated", measured)):
                    lr = run_lint(scheds[name], inv, device=prof, tokens=int(M),
                                  measured=meas, model_config=cfg)
                    e = sorted({f.code for f in lr.findings if f.severity == "error"})
                    pred = lr.step_period("base") - lr.step_period("sim")
                    verdict, why = lint_verdict(e, pred, noise)
                    errs = finish_errors(lr.sg, lr.sim, a["ops"])
                    pooled[label] += errs
                    row[label] = {"errors": e, "pred_gain_us": pred,
                                  "pred_step_us": lr.step_period("sim"),
                                  "pred_base_step_us": lr.step_period("base"),
                                  "verdict": verdict, "reason": why,
                                  "finish_err": err_stats(errs)}
                    if name == "compiled":
                        base_err = base_err or {}
                        base_err[label] = err_stats(finish_errors(lr.base_sg, lr.base,
                                                                  none["ops"]))
                row["agree"] = row["calibrated"]["verdict"] == row["measured_verdict"]
                agree += row["agree"]
                total += 1
            rows[name] = row
        summary["per_m"][M] = {"ideal_gain_us": ideal, "ideal": m["ideal"]["consumers"],
                               "distinct_experts": m["distinct_experts"],
                               "calibration_us": {f"{k[0]}|{k[1]}": v
                                                  for k, v in sorted(measured.items())},
                               "none_finish_err": base_err, "arms": rows}
    summary["per_op_source"] = sorted(sources)
    summary["verdict_agreement"] = {"agree": agree, "total": total}
    summary["finish_err_median"] = {k: statistics.median(v) if v else None
                                    for k, v in pooled.items()}
    with open(json_out, "w") as f:
        json.dump(summary, f, indent=1, default=str)
    with open(md_out, "w") as f:
        f.write(markdown(summary))
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
    out = [f"Per-op times: {src}" + (" (in-graph external CUDA events of a timed graph "
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
    out += ["", "| M | ideal gain us | compiled gain us | fraction of ideal |",
            "|---|---|---|---|"]
    for M in Ms:
        p = s["per_m"][M]
        r = p["arms"].get("compiled")
        if r:
            out.append(f"| {M} | {p['ideal_gain_us']:.0f} | {r['gain_us']:.0f} | "
                       f"{_pct(r['gain_of_ideal'])} |")
    out += ["", "Expert stream = sum of the routed-expert GEMMs per step (timed graph); "
            "margin = expert-stream start - fill kernel exit (negative = the fill kernel "
            "was still running when the experts started).", "",
            "| arm | M | expert stream us | vs none | fill points | exits after expert start "
            "| min / median margin us |", "|---|---|---|---|---|---|---|"]
    for M in Ms:
        for a, r in s["per_m"][M]["arms"].items():
            out.append(f"| {a} | {M} | {_us(r['expert_stream_us'], '{:.1f}')} | "
                       f"{_us(r['expert_slowdown_pct'], '{:+.2f}')}% | {r['fill_points']} | "
                       f"{r['exits_after_expert_start']} | {_us(r['min_margin_us'], '{:.1f}')}"
                       f" / {_us(r['median_margin_us'], '{:.1f}')} |")
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
            out.append(f"| {a} | {M} | {','.join(c['errors']) or '-'} | "
                       f"{u['pred_gain_us']:+.0f} / {c['pred_gain_us']:+.0f} | {r['gain_us']:+.0f} | "
                       f"{r['noise_us']:.0f} | {vu} | {vc} | {r['measured_verdict']} | "
                       f"{'yes' if r['agree'] else 'NO'} | "
                       f"{_pct(fu and fu['median'])} / {_pct(fc and fc['median'])} |")
    va = s["verdict_agreement"]
    fe = s["finish_err_median"]
    out += ["", f"Lint verdict agreement (calibrated): {va['agree']}/{va['total']}"
            + (f" ({va['agree'] / va['total']:.0%})" if va["total"] else ""),
            f"Median per-op finish-time error over all arms and M: uncalibrated "
            f"{_pct(fe['uncalibrated'])}, calibrated {_pct(fe['calibrated'])}"]
    for M in Ms:
        b = s["per_m"][M].get("none_finish_err")
        if b:
            out.append(f"- M={M}, no-prefetch step (lint baseline vs the none arm): "
                       f"uncalibrated {_pct(b['uncalibrated'] and b['uncalibrated']['median'])}, "
                       f"calibrated {_pct(b['calibrated'] and b['calibrated']['median'])}")
    return "\n".join(out) + "\n"
