"""The markdown of ``python -m lab bench report``: one function per section of the
report, each returning its lines, from the summary dict ``report`` builds
(targets, step times and gains per arm x M, the timed graph's overhead and
its event-overhead correction, ideal gain, expert stream and fills, lint vs
measurement, step-level prediction). Units: us unless a name says otherwise.
"""

from __future__ import annotations

from lab.bench.controls import control_lines
from l2sched.units import format_signed


def _pct(x) -> str:
    return "-" if x is None else f"{x:.0%}"


def _us(x, fmt="{:.0f}") -> str:
    if x is None:
        return "-"
    return format_signed(x, fmt[2:-1]) if fmt.startswith("{:+") else fmt.format(x)


def markdown(s: dict) -> str:
    """The human tables: step times and gains per arm x M, the timed graph's
    overhead, ideal gain, expert stream and fills, lint vs measurement."""
    Ms = list(s["per_m"])
    arms = list(next(iter(s["per_m"].values()))["arms"])
    src = ", ".join(s.get("per_op_source", []))
    out = _front_matter(s)
    out += _validation_table(s)
    out += _step_table(s, Ms, arms, src)
    out += _timed_graph_table(s, Ms, arms)
    out += _event_overhead_table(s, Ms, arms)
    out += _ideal_table(s, Ms)
    out += _expert_table(s, Ms)
    out += _verdict_table(s, Ms)
    out += _agreement_lines(s, Ms)
    out += _step_level_table(s, Ms)
    return "\n".join(out) + "\n"


def _m_header(Ms, what: str = "") -> list[str]:
    """The header and separator of a table with an ``arm`` column and one
    column per M (``M=<M><what>``)."""
    return ["| arm | " + " | ".join(f"M={M}{what}" for M in Ms) + " |",
            "|---|" + "---|" * len(Ms)]


def _arm_rows(s: dict, Ms, arms, cell) -> list[str]:
    """One row per arm: ``cell(arm, row)`` of the arm's summary row at every M."""
    return [f"| {a} | " + " | ".join(cell(a, s["per_m"][M]["arms"][a]) for M in Ms) + " |"
            for a in arms]


def _front_matter(s: dict) -> list[str]:
    """The header (verbatim), the targets met or missed, the lint's device
    profile and the command, each when the summary has it."""
    out = []
    if s.get("header"):
        out += [s["header"].rstrip("\n"), ""]
    if s.get("targets"):
        out += ["## Targets", "", "Numbers computed by `python -m lab bench report` from this result "
                "(per-M values of the `compiled` arm: M=value).", ""]
        for t in s["targets"]:
            out.append(f"- **{'met' if t['met'] else 'missed'}**: {t['target']}: "
                       + _target_values(t))
        out.append("")
    if s.get("device_profile"):
        out += [f"Lint device profile: {s['device_profile']}.", ""]
    if s.get("command"):
        out += ["## Command", "", "```sh", s["command"],
                "python -m lab bench report RESULT --json-out J --md-out M --command ... --header H",
                "```", ""]
    return out


def _validation_table(s: dict) -> list[str]:
    """The out-of-sample validation (docs/lint.md#validation): its status,
    the A/A noise floor per M and one row per arm and M with the predicted
    and measured gain, their difference and the three-way verdicts."""
    v = s.get("validation")
    if not v:
        return []
    out = ["## Validation (out of sample)", "", f"Status: {v['status']}.", ""]
    if not v.get("rows"):
        return out
    out += ["Noise floor per M from the A/A arm (90th percentile of |A/A gain| over "
            "resampled rounds): " + ", ".join(
                f"M={M}: {f['floor_us']:.1f} us "
                f"(A/A gain {format_signed(f['aa_gain_us'], '+.1f')} us)"
                for M, f in v["floors"].items()) + ".", "",
            "| arm | M | predicted gain us | measured gain us | predicted - measured us "
            "| verdict predicted / measured | agree | lint errors |",
            "|---|---|---|---|---|---|---|---|"]
    for r in v["rows"]:
        out.append(f"| {r['arm']} | {r['M']} | {format_signed(r['pred_gain_us'], '+.1f')} | "
                   f"{format_signed(r['meas_gain_us'], '+.1f')} | "
                   f"{format_signed(r['gain_err_us'], '+.1f')} | "
                   f"{r['pred_verdict']} / {r['meas_verdict']} | "
                   f"{'yes' if r['agree'] else 'NO'} | {','.join(r['lint_errors']) or '-'} |")
    per_m = ", ".join(f"M={M}: " + ("-" if x is None else f"{x:.2f}")
                      for M, x in v["spearman_per_m"].items())
    out += ["", f"Spearman per M: {per_m}.", ""]
    return out + control_lines(v)


def _step_table(s: dict, Ms, arms, src: str) -> list[str]:
    """Where the per-op times come from (``src``), the notes, and the untimed
    graph's step time (median, p10-p90) and gain per arm x M."""
    def cell(a, r):
        st = r["step_us"]
        c = f"{st['median']:.0f} ({st['p10']:.0f}-{st['p90']:.0f})"
        if a != "none":
            c += (f", {format_signed(r['gain_us'], '+.0f')} us "
                  f"({format_signed(r['gain_pct'], '+.2f')}%)")
        return c
    return ([f"Per-op times: {src}" + (" (in-graph external CUDA events of a timed graph "
                                      "variant)" if src == "graph" else
                                      " (NOT in-graph: host-launch-bound fallback)"),
             f"Note: {s['note']}.", f"Fills: {s['fill_note']}.", ""]
            + _m_header(Ms, " step us (p10-p90)") + _arm_rows(s, Ms, arms, cell))


def _timed_graph_table(s: dict, Ms, arms) -> list[str]:
    """Untimed vs timed graph step (replay and in-graph), with the overhead."""
    def cell(a, r):
        t, ig = r.get("timed_step_us"), r.get("in_graph_step_us")
        ov = r.get("timing_overhead_pct")
        return (f"{r['step_us']['median']:.0f} / {_us(t and t['median'])} / "
                f"{_us(ig and ig['median'])} ({'-' if ov is None else format_signed(ov, '+.1f') + '%'})")
    return (["", "Timed graph variant (event nodes) vs untimed graph, median us: "
             "untimed / timed replay / timed in-graph first-to-last event (overhead %).", ""]
            + _m_header(Ms) + _arm_rows(s, Ms, arms, cell))


def _event_overhead_table(s: dict, Ms, arms) -> list[str]:
    """The event-overhead correction (``verdicts``) per arm x M: o / g / c."""
    def cell(a, r):
        ov = r.get("event_overhead")
        return ("-" if not ov else f"{ov['per_op_us']:.2f} / {ov['gap_us']:.2f} / "
                f"{ov['in_dur_us']:.2f} ({ov['n_main']})")
    return (["", "Event-overhead correction (per arm and M, us): o = (timed - untimed median "
             "step) / n timed main-stream ops, split into g = median gap between one op's end "
             "event and the next op's start event and c = o - g inside every op's e0->e1 "
             "duration. The k-th main-stream op (0-based, start order) measures d = D + c, "
             "starts s0 + T_start + k*o and finishes s0 + T_finish + k*o + c after the start "
             "event (s0: lead to the first op's start event; every earlier op added o, its "
             "own end event is inside its duration), so D = max(0, d - c), finish = f - s0 - "
             "k*o - c. Aux-stream ops carry the same event pair, so the same c; fill exits and "
             "expert starts are shifted by the main ops before them. Calibration and "
             "finish-time errors use the corrected values; the JSON keeps the uncorrected ones "
             "under `raw`. Cells: o / g / c (n main ops).", ""]
            + _m_header(Ms) + _arm_rows(s, Ms, arms, cell))


def _ideal_table(s: dict, Ms) -> list[str]:
    """The ideal gain per M and the ``compiled`` arm's fraction of it."""
    out = ["", "| M | ideal gain us | compiled gain us | fraction of ideal |",
           "|---|---|---|---|"]
    for M in Ms:
        p = s["per_m"][M]
        r = p["arms"].get("compiled")
        if r:
            out.append(f"| {M} | {p['ideal_gain_us']:.0f} | {r['gain_us']:.0f} | "
                       f"{_pct(r['gain_of_ideal'])} |")
    return out


def _expert_table(s: dict, Ms) -> list[str]:
    """The expert stream and the fill margins per arm and M, corrected (and
    uncorrected in brackets)."""
    out = ["", "Expert stream = sum of the routed-expert GEMMs per step (timed graph, "
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
    return out


def _verdict_table(s: dict, Ms) -> list[str]:
    """The verdict rule and, per linted arm and M, the lint (uncalibrated and
    calibrated) vs the measurement."""
    out = ["", f"Verdicts: {s['verdict_rule']}.", "",
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
                       f"{format_signed(u['pred_gain_us'], '+.0f')} / "
                       f"{format_signed(c['pred_gain_us'], '+.0f')} | "
                       f"{format_signed(r['gain_us'], '+.0f')} | "
                       f"{r['noise_us']:.0f} | {vu} | {vc} | {r['measured_verdict']} | "
                       f"{'yes' if r['agree'] else 'NO'} | "
                       f"{_pct(fu and fu['median'])} / {_pct(fc and fc['median'])} |")
    return out


def _agreement_lines(s: dict, Ms) -> list[str]:
    """The verdict agreement (both counts), the median finish-time errors and
    the no-prefetch baseline's per M."""
    va = s["verdict_agreement"]
    fe, fs = s["finish_err_median"], s.get("finish_err_median_schedule_arms", {})
    fr = s.get("raw", {}).get("finish_err_median", {})

    def frac(a):
        return f"{a['agree']}/{a['total']}" + (f" ({a['agree'] / a['total']:.0%})"
                                               if a["total"] else "")
    out = ["", "In-sample diagnostic (the lint calibrated on this run's own no-prefetch arm; "
           "not a validation, see the validation table above):",
           f"Two-way lint verdict agreement (calibrated), schedule arms: "
           f"{frac(va['schedule_arms'])}; all arms including kernel-mode and dispatch-control "
           f"arms: "
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
    return out


def _step_level_table(s: dict, Ms) -> list[str]:
    """The lint's predicted step time (uncalibrated and calibrated) vs the
    untimed graph's median step, per arm and M."""
    kg = s.get("lint_kernel_gap")
    out = ["", "Step level: the lint's predicted step time vs the untimed graph's median step "
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
                return "-" if not x else (f"{x['pred_step_us']:.0f} "
                                          f"({format_signed(x['step_err_pct'], '+.1f')}%)")
            out.append(f"| {a} | {M} | {r['step_us']['median']:.0f} | {cell(u)} | {cell(c)} |")
    return out


def _target_values(t: dict) -> str:
    v = t["values"]
    if "shown" in t:
        return t["shown"]
    if "agree" in t:
        return f"{t['agree']}/{t['total']}" + ("" if v is None else f" = {v:.0%}")
    if not isinstance(v, dict):
        return "-" if v is None else f"{v:.1%}"
    if "noise_us" in t:
        cells = [f"M={M}: {format_signed(x, '+.0f')} us (noise {t['noise_us'][M]:.0f} us)"
                 for M, x in v.items()]
        return ", ".join(cells) + (
            "; strictly slower at " + ", ".join(f"M={M}" for M, x in v.items() if x < 0)
            + (", within the noise threshold" if t["met_within_noise"] else
               ", NOT within the noise threshold")
            if not t["met"] else "")
    if "ideal" in t["target"]:
        return ", ".join(f"M={M}: {_pct(x)}" for M, x in v.items())
    return ", ".join(f"M={M}: {_us(x, '{:+.2f}')}%" for M, x in v.items())
