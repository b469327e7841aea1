"""The rules of ``python -m lab bench report``: noise threshold, verdicts, the
calibration input, finish-time errors and the timed graph's event-overhead
correction of a measured arm (per-op times, fills, expert stream).

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

Verdict agreement (an in-sample diagnostic: the calibrated lint is fed
this run's own no-prefetch arm; the out-of-sample validation is
``validation``) is counted two ways: over the schedule arms and over all
arms. Kernel-mode arms (a ``runtime`` option, e.g. ``load``)
run the same schedule with a different fill kernel, which the .l2s language
cannot express, so the lint sees the same schedule as ``compiled``.
"""

from __future__ import annotations

import statistics
from bisect import bisect_right

from l2sched.bench.run import quantile

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
