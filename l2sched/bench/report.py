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

Event-overhead correction. The timed graph brackets every op with two
event-record nodes on its stream; they lengthen the step by a constant
(additive, independent of M) amount per op. Per arm and M, with ``n`` the
number of timed main-stream ops:

- ``o = (timed_graph_step_us.median - graph_step_us.median) / n``: the
  overhead per main-stream op (the timed and untimed graphs are the same
  step otherwise; the start/end events and the aux/side events are folded
  into ``o``, i.e. assumed off the critical path or negligible);
- ``g = main_gap_us.median``: the part that shows as the gap between an op's
  end event and the next op's start event (taken as pure overhead: an
  untimed graph's own inter-kernel latency is absorbed into the durations);
- ``c = o - g``: the part inside each op's e0->e1 duration.

Model of the timed main stream (``s0`` = start_us of the first main op, the
lead after the start event; ``T`` = untimed times from the first op's start;
``D`` = untimed durations, so ``T^s_k = sum_{j<k} D_j``, ``T^f_k = T^s_k +
D_k``): op ``k`` (0-based, in start order) measures ``d_k = D_k + c``, the
next op starts ``g`` after it ends, so ``s_k = s0 + T^s_k + k*o`` (each
earlier op added ``c + g = o``) and ``f_k = s_k + d_k = s0 + T^f_k + k*o +
c`` (this op's own in-duration part is in, its trailing gap is not yet).
Hence the corrected values ``D_k = max(0, d_k - c)``, start ``s_k - s0 -
k*o`` and finish ``f_k - s0 - k*o - c``. Aux-stream (shared-expert) ops
carry the same pair of event nodes on their stream, so the same ``c`` is in
their durations; the aux chain of a layer forks after the ``j`` main ops that
finished before its first op started, and op ``i`` of the chain is shifted
by ``s0 + (j + i)*o`` (start; finish also ``- c``); aux ops are not counted
in ``n`` because they overlap main-stream ops. Fill exits (side events)
fork from the main stream at the op ``p`` they are keyed to (``step_end``:
the last main op) and are not delayed by later main-stream events: shifted
by ``s0 + p*o + c`` (fork after op p's body; a fill forked at op p's start
is over-corrected by at most ``c``). Expert start = a ``moe.w13`` start,
shifted like a main op start; the expert stream (sum of the expert GEMMs'
durations) loses ``c`` per expert GEMM. The calibration and the finish-time
errors use the corrected values; the uncorrected ones stay in the JSON under
``raw``. Step-level check: the calibrated lint's predicted step
(``step_period("sim")``) vs the untimed graph's median step.

Verdict agreement is counted two ways: over the schedule arms (the headline)
and over all arms. Kernel-mode arms (a ``runtime`` option, e.g. ``load``)
run the same schedule with a different fill kernel, which the .l2s language
cannot express, so the lint sees the same schedule as ``compiled``.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

from l2sched.bench import read_json_file, shipped_path
from l2sched.bench.run import AR_NOTE, FILL_NOTE, quantile
from l2sched.errors import L2sInputError
from l2sched.files import write_texts_atomically
from l2sched.lang.resolve import load_schedule
from l2sched.lint import run_lint
from l2sched.model.config import load_model_config
from l2sched.model.devices import load_device
from l2sched.model.inventory import analytical_inventory
from l2sched.units import format_signed

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


KERNEL_MODE_WHY = ("kernel-mode arms (a runtime option such as the load-mode fill kernel) "
                   "run the same schedule with a different fill kernel, which the .l2s "
                   "language cannot express, so the lint cannot tell them from the "
                   "schedule arm; the headline counts the schedule arms only")


def event_overhead(a: dict) -> dict | None:
    """The timed graph's event overhead of one arm (module docstring):
    ``{per_op_us: o, gap_us: g, in_dur_us: c, n_main, lead_us: s0}``; None
    without a timed and an untimed graph step or main-stream ops."""
    t, u = a.get("timed_graph_step_us"), a.get("graph_step_us")
    main = [v for v in a.get("ops", {}).values() if v["stream"] == "main"]
    if not t or not u or not main:
        return None
    n = len(main)
    o = (t["median"] - u["median"]) / n
    gap = a.get("main_gap_us") or {}
    g = gap.get("median") or 0.0
    return {"per_op_us": o, "gap_us": g, "in_dur_us": o - g, "n_main": n,
            "lead_us": min(v["start_us"] for v in main)}


def _main_order(ops: dict) -> list[str]:
    return sorted((k for k, v in ops.items() if v["stream"] == "main"),
                  key=lambda k: ops[k]["start_us"])


def correct_ops(ops: dict, ov: dict | None) -> dict:
    """Per-op ``{dur_us, start_us, finish_us, stream}`` with the event
    overhead ``ov`` (``event_overhead``) removed (module docstring); ``ops``
    unchanged when ``ov`` is None."""
    if ov is None:
        return ops
    from bisect import bisect_right
    o, c, s0 = ov["per_op_us"], ov["in_dur_us"], ov["lead_us"]
    main = _main_order(ops)
    k_of = {k: i for i, k in enumerate(main)}
    fins = sorted(ops[k]["finish_us"] for k in main)
    shift = {k: s0 + i * o for k, i in k_of.items()}
    chains: dict = {}
    for k, v in ops.items():
        if v["stream"] != "main":
            chains.setdefault(k.split(":", 1)[0], []).append(k)
    for chain in chains.values():
        chain.sort(key=lambda k: ops[k]["start_us"])
        j = bisect_right(fins, ops[chain[0]]["start_us"])
        for i, k in enumerate(chain):
            shift[k] = s0 + (j + i) * o
    return {k: {"dur_us": max(0.0, v["dur_us"] - c), "start_us": v["start_us"] - shift[k],
                "finish_us": v["finish_us"] - shift[k] - c, "stream": v["stream"]}
            for k, v in ops.items()}


def correct_fills(fills: dict, ops: dict, ov: dict | None) -> dict:
    """Fill exits, expert starts and margins with the event overhead removed
    (module docstring); ``ops``: the arm's raw per-op values."""
    if ov is None:
        return fills
    o, c, s0 = ov["per_op_us"], ov["in_dur_us"], ov["lead_us"]
    main = _main_order(ops)
    k_of = {k: i for i, k in enumerate(main)}
    starts = [ops[k]["start_us"] for k in main]
    out = {}
    for key, f in fills.items():
        p = k_of.get(key, len(main) - 1)     # step_end: after the last main op
        r = dict(f)
        if f.get("fill_exit_us") is not None:
            r["fill_exit_us"] = f["fill_exit_us"] - s0 - p * o - c
        es = f.get("expert_start_us")
        if es is not None:
            kw = min(range(len(starts)), key=lambda i: abs(starts[i] - es))
            r["expert_start_us"] = es - s0 - kw * o
            if f.get("exit_before_experts_us") is not None:
                r["exit_before_experts_us"] = f["exit_before_experts_us"] - (kw - p) * o + c
        out[key] = r
    return out


def correct_arm(a: dict) -> tuple[dict, dict | None]:
    """``(arm with ops, fills and expert stream corrected, overhead)``."""
    ov = event_overhead(a)
    if ov is None:
        return a, None
    r = dict(a)
    r["ops"] = correct_ops(a["ops"], ov)
    r["fills"] = correct_fills(a.get("fills", {}), a["ops"], ov)
    e = a.get("expert_stream_us")
    if isinstance(e, dict):
        n_exp = sum(1 for k, v in a["ops"].items()
                    if v["stream"] == "main" and k.split(":", 1)[1] in ("moe.w13", "moe.w2"))
        r["expert_stream_us"] = {q: (x - n_exp * ov["in_dur_us"] if q != "n" and x is not None
                                     else x) for q, x in e.items()}
    return r, ov


def is_schedule_arm(spec: dict) -> bool:
    """A schedule arm (linted, counted in the headline agreement): has a
    schedule path and no kernel-mode runtime option."""
    return bool(spec.get("path")) and not spec.get("runtime")


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
    return {"median": statistics.median(errs), "p90": quantile(errs, 0.9), "n": len(errs)}


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
    if x is None:
        return "-"
    return format_signed(x, fmt[2:-1]) if fmt.startswith("{:+") else fmt.format(x)


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
                c += (f", {format_signed(r['gain_us'], '+.0f')} us "
                      f"({format_signed(r['gain_pct'], '+.2f')}%)")
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
                         f"{_us(ig and ig['median'])} ({'-' if ov is None else format_signed(ov, '+.1f') + '%'})")
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
                       f"{format_signed(u['pred_gain_us'], '+.0f')} / "
                       f"{format_signed(c['pred_gain_us'], '+.0f')} | "
                       f"{format_signed(r['gain_us'], '+.0f')} | "
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
                return "-" if not x else (f"{x['pred_step_us']:.0f} "
                                          f"({format_signed(x['step_err_pct'], '+.1f')}%)")
            out.append(f"| {a} | {M} | {r['step_us']['median']:.0f} | {cell(u)} | {cell(c)} |")
    return "\n".join(out) + "\n"


def _target_values(t: dict) -> str:
    v = t["values"]
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
