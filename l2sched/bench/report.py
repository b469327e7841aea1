"""``l2sched bench report``: lint every measured arm on CPU and write the
summary JSON and markdown.

Verdicts: the lint says ``bad`` when an error finding remains; the
measurement says ``bad`` when the arm's median CUDA-graph step time is above
the no-prefetch median by more than the larger of the two arms' p10-p90
half-spreads. Calibration: ``run_lint(measured=...)`` with the no-prefetch
arm's measured per-op durations (the ``(layer kind, op) -> us`` dict that
``lint.calibrate.measure`` returns). Finish-time error: |predicted - measured|
/ measured per main-stream op, measured = the timed eager pass. Units: us.
"""

from __future__ import annotations

import json
import statistics

from .run import AR_NOTE, _finish_err


def report(result: str, json_out: str, md_out: str, command: str = "") -> dict:
    """Read ``result`` (``bench run`` JSON), lint, write ``json_out``/``md_out``."""
    from ..devices import load_device
    from ..inventory import analytical_inventory, load_model_config
    from ..lint import run_lint
    from ..semantic import load_schedule

    d = json.load(open(result))
    cfg = load_model_config(None)
    inv = analytical_inventory(cfg, tp=4, ep=False, tp_rank=0)
    prof = load_device("h200")
    scheds = {a["name"]: load_schedule(a["path"], a["overrides"])
              for a in d["arms"] if a["path"]}
    summary = {"note": AR_NOTE, "machine": d["machine"], "command": command,
               "replays": d["replays"], "per_m": {}}
    agree = total = 0
    errs_unc, errs_cal = [], []
    for M, m in d["per_m"].items():
        none = m["arms"]["none"]["graph_step_us"]
        half = lambda s: (s["p90"] - s["p10"]) / 2
        ideal = m["ideal"]["ideal_gain_us"]
        base_ops = m["arms"]["none"]["ops"]
        per = {}
        for k, v in base_ops.items():
            layer, op = k.split(":", 1)
            per.setdefault((str(inv.kinds[int(layer)]), op), []).append(v["dur_us"])
        measured = {k: statistics.median(v) for k, v in per.items()}
        rows = {}
        for name, a in m["arms"].items():
            g = a["graph_step_us"]
            gain = none["median"] - g["median"]
            row = {"step_us": g, "gain_us": gain,
                   "gain_pct": 100 * gain / none["median"],
                   "gain_of_ideal": gain / ideal if ideal else None,
                   "eager_expert_stream_us": a["expert_stream_us"],
                   "runtime_stats": a.get("runtime_stats")}
            if name in scheds:
                noise = max(half(g), half(none))
                row["measured_verdict"] = "bad" if gain < -noise else "ok"
                for label, meas in (("uncalibrated", None), ("calibrated", measured)):
                    lr = run_lint(scheds[name], inv, device=prof, tokens=int(M),
                                  measured=meas, model_config=cfg)
                    e = sorted({f.code for f in lr.findings if f.severity == "error"})
                    fe = _finish_err(lr.sg, lr.sim, a["ops"])
                    row[label] = {"errors": e, "verdict": "bad" if e else "ok",
                                  "pred_gain_us": lr.step_period("base") - lr.step_period("sim"),
                                  "finish_err": fe}
                    if fe:
                        (errs_unc if meas is None else errs_cal).append(fe["median"])
                row["agree"] = row["calibrated"]["verdict"] == row["measured_verdict"]
                agree += row["agree"]
                total += 1
            rows[name] = row
        summary["per_m"][M] = {"ideal_gain_us": ideal, "ideal": m["ideal"]["consumers"],
                               "distinct_experts": m["distinct_experts"], "arms": rows}
    summary["verdict_agreement"] = {"agree": agree, "total": total}
    summary["finish_err_median"] = {
        "uncalibrated": statistics.median(errs_unc) if errs_unc else None,
        "calibrated": statistics.median(errs_cal) if errs_cal else None}
    with open(json_out, "w") as f:
        json.dump(summary, f, indent=1, default=str)
    with open(md_out, "w") as f:
        f.write(markdown(summary))
    return summary


def markdown(s: dict) -> str:
    """The human table: arms x M, gains, lint verdicts."""
    Ms = list(s["per_m"])
    arms = list(next(iter(s["per_m"].values()))["arms"])
    out = ["| arm | " + " | ".join(f"M={M} step us (p10-p90)" for M in Ms) + " |",
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
    out += ["", "| M | ideal gain us | compiled gain us | fraction of ideal |", "|---|---|---|---|"]
    for M in Ms:
        p = s["per_m"][M]
        r = p["arms"]["compiled"]
        out.append(f"| {M} | {p['ideal_gain_us']:.0f} | {r['gain_us']:.0f} | "
                   f"{r['gain_of_ideal']:.0%} |")
    out += ["", "| arm | M | lint errors (calibrated) | lint verdict | measured verdict | agree | "
            "finish-time error median (uncal / cal) |", "|---|---|---|---|---|---|---|"]
    for M in Ms:
        for a, r in s["per_m"][M]["arms"].items():
            if "agree" not in r:
                continue
            fu, fc = r["uncalibrated"]["finish_err"], r["calibrated"]["finish_err"]
            out.append(f"| {a} | {M} | {','.join(r['calibrated']['errors']) or '-'} | "
                       f"{r['calibrated']['verdict']} | {r['measured_verdict']} | "
                       f"{'yes' if r['agree'] else 'NO'} | "
                       f"{fu['median']:.0%} / {fc['median']:.0%} |" if fu and fc else "| - |")
    return "\n".join(out) + "\n"
