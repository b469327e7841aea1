"""Per-op step gaps from the profile's ``step_fill`` probe: the cold -> hot
gap each op shows inside the decode step, where the op table's isolated
cold/hot times disagree with it.

Why: the ops probe's cold->hot gaps credit the mHC mixing ops about 0.5 us
each (40 us per step for window B's mHC and norm weights), while in the
decode step those weights' fills buy nothing (arm minus decoy -0.1 us over
the 92 mHC kernels of run T's M=16 traces; +9 / +15 / -23 us per step at
M = 4 / 16 / 64), and the next layer's attention weights buy 30-50 us where
the table gives 9-13 (`kda.in_proj`, whose 52.6 MB weight exceeds the L2,
has a 0.04-1.1 us table gap in a 19-21 us op;
benchmarks/results/h200-2026-12-01-step-fill.md, -decoy-b.md). The probe's
reference arm (the shipped schedule's windows, copy fills) and its decoy
time every op in the CUDA graph, so per layer kind, op and M:

    saved = sum over the kind's layers of decoy's median op time - arm's (us)
    hit   = sum over the same layers of the lint's effective hit share of
            the op's weight bytes in the arm (``NodeTiming.fast_bytes`` /
            ``read_bytes``, with the profile's fill kernels and residency)
    step_gap_us = saved / hit x scale(M), within 0 .. the op's cold time

formed where ``hit >= MIN_HIT_LAYERS``. The per-op times come from the
timed graph, whose event nodes add noise to every op (their sum over all
ops differed from the untimed step's hits by -37..+86 us in run S3), so they
apportion hits among the ops and the untimed replays give the totals:
scale(M) makes the lint's hits of the probe's schedule equal the probe's
own step hits (``_total_scale``); with the record's lone windows (each
window alone, ``profile_step.lone_variants``) there is one scale per window's
ops instead, the same at every M, the bounded least-squares fit of the lint's
hits of the whole schedule and of each lone window to the probe's at every M
together (``window_scales``).
``OpTimes.at`` then gives hot = cold - step gap. Units: us, bytes.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools

from l2sched.bench.arms import spin_collectives, split_variant
from l2sched.bench.controls import without_hits
from l2sched.bench.step import MODEL
from l2sched.lang.resolve import load_schedule_text
from l2sched.lint import run_lint
from l2sched.model.config import load_model_config
from l2sched.model.inventory import analytical_inventory
from l2sched.profile.step_fill import (
    LONE_BUDGET_FRACTION,
    MIN_REFERENCE_HITS_US,
    lone_variants,
)
from l2sched.device import DeviceProfile

#: Least summed hit share (in layers' worth of fully resident weights) for
#: which a step gap is formed: below it the saved time over the hit share
#: magnifies the per-op noise (per-layer medians of 30 replays differ by
#: 0.05-0.2 us) past the gaps being measured (0.5-2 us).
MIN_HIT_LAYERS = 0.5
#: Bounds of the factor that matches the lint's hits of the probe's schedule
#: to the probe's step (``_total_scale``): outside them the per-op records
#: and the step disagree by more than a scale, and the records are wrong.
TOTAL_SCALE_RANGE = (0.5, 2.0)
#: Bounds of one window's scale (``window_scales``): wider than
#: ``TOTAL_SCALE_RANGE`` because one window's ops are a few ops, whose timed
#: records carry more relative noise than the whole step's; a scale at a
#: bound is reported as such.
WINDOW_SCALE_RANGE = (0.25, 4.0)


@functools.lru_cache(maxsize=16)
def _lint_setup(schedule_text: str, overrides: tuple = ()):
    """``(schedule, inventory, config)`` the probe's schedule (with
    ``overrides``, ``KEY=VALUE`` settings) is linted with: built once per
    schedule, not once per lint."""
    cfg = load_model_config(None)
    inv = analytical_inventory(cfg, tp=4, ep=False, tp_rank=0)
    return load_schedule_text(schedule_text, "<step_fill>", list(overrides)), inv, cfg


def predicted_hits(device_profile: DeviceProfile, schedule_text: str, tokens,
                   overrides: tuple = ()) -> tuple[dict, dict]:
    """``({M: {"L:op": effective hit share}}, {"L:op": layer kind})``: the
    lint's share of each op's weight bytes that ``schedule_text`` (the
    probe's ``.l2s`` text) makes resident, times the fill kernel's effect,
    with ``device_profile`` (a ``DeviceProfile``) in the decode step of ``bench
    run`` (TP4 inventory, all-reduces as idle intervals), at each M of
    ``tokens``; and each node's layer kind. ``overrides``: settings on top
    of the schedule (a lone window's budgets)."""
    sched, inv, cfg = _lint_setup(schedule_text, tuple(overrides))
    spun_device_profile = spin_collectives(device_profile)
    out: dict = {}
    kinds: dict = {}
    for M in tokens:
        run = run_lint(sched, inv, device_profile=spun_device_profile, tokens=M, model_config=cfg)
        out[M] = {v: t.fast_bytes / t.read_bytes
                  for v, t in run.sim.timing.items() if t.read_bytes > 0}
        if not kinds:  # the same node ids at every M
            kinds = {v: d["kind"] for v, d in run.sg.nodes.items() if "kind" in d}
    return out, kinds


def step_hits_us(device_profile: DeviceProfile, schedule_text: str, M: int,
                 overrides: tuple = ()) -> float:
    """The lint's hits (us per step) of ``schedule_text`` (with
    ``overrides``) at ``M`` with ``device_profile``: its decoy's step (fills that
    land nothing) minus its own, in ``bench run``'s decode step."""
    return _decoy_step_us(device_profile, schedule_text, M, overrides) - _step_us(
        device_profile, schedule_text, M, overrides)


def _step_us(device_profile: DeviceProfile, schedule_text: str, M: int,
             overrides: tuple = ()) -> float:
    """The lint's step period (us) of the schedule in ``bench run``'s step."""
    sched, inv, cfg = _lint_setup(schedule_text, tuple(overrides))
    run = run_lint(sched, inv, device_profile=spin_collectives(device_profile), tokens=M,
                   model_config=cfg)
    return run.step_period("sim")


def _decoy_step_us(device_profile: DeviceProfile, schedule_text: str, M: int,
                   overrides: tuple = ()) -> float:
    """``_step_us`` of the schedule's decoy (its fills land nothing)."""
    return _step_us(without_hits(device_profile), schedule_text, M, overrides)


def with_step_gaps(device_profile: DeviceProfile, gaps: dict, scale=1.0, at: int | None = None):
    """``device_profile`` whose ops in ``gaps`` (``step_gaps``'s shape) have those
    step gaps times ``scale`` (a number, or ``{(kind, op): factor}`` with 1
    for an op it lacks; only M ``at`` when given)."""
    ops = dict(device_profile.op_times(MODEL))
    for k, per in gaps.items():
        ms = sorted(m for m in per if at is None or m == at)
        f = scale.get(k, 1.0) if isinstance(scale, dict) else scale
        if ms:
            ops[k] = dataclasses.replace(ops[k], step_m=tuple(ms),
                                         step_gap_us=tuple(f * per[m]["gap_us"] for m in ms))
    return dataclasses.replace(device_profile, ops={**device_profile.ops, MODEL: ops})


class StepGaps(dict):
    """``step_gaps``' result, ``{(kind, op): {M: {...}}}``, with ``fits``:
    ``{M: window_scales(...)}`` at each M fitted to lone windows."""

    def __init__(self, items=(), fits: dict | None = None):
        super().__init__(items)
        self.fits = fits or {}


def step_gaps(step: dict, device_profile: DeviceProfile) -> StepGaps:
    """``{(kind, op): {M: {"gap_us", "saved_us", "hit", "scale"[,
    "window"]}}}`` from a ``step_fill`` record
    (``profile_step.step_fill_summary``, with ``ops_us``) and ``device_profile``
    (the profile being written, its op table without step gaps): per op of
    the table and M whose summed hit share reaches ``MIN_HIT_LAYERS``, each
    M's gaps times that M's ``scale``: the window's that fills the op
    (``window_scales``, where the record has lone windows) or the whole
    step's (``_total_scale``). Empty without per-op records."""
    per_m = {int(m): r for m, r in (step.get("per_m") or {}).items() if r.get("ops_us")}
    table = device_profile.op_times(MODEL)
    if not per_m or not table:
        return StepGaps()
    hits, kinds = predicted_hits(device_profile, step["schedule"], sorted(per_m))
    out: dict = {}
    for M in sorted(per_m):
        arm, dec = per_m[M]["ops_us"]["arm"], per_m[M]["ops_us"]["decoy"]
        saved: dict = {}
        hit: dict = {}
        for key, us in arm.items():
            kind, op = kinds.get(key), key.split(":", 1)[-1]
            if kind is None or (kind, op) not in table or key not in dec:
                continue
            saved[(kind, op)] = saved.get((kind, op), 0.0) + dec[key] - us
            hit[(kind, op)] = hit.get((kind, op), 0.0) + hits[M].get(key, 0.0)
        for k, h in hit.items():
            if h >= MIN_HIT_LAYERS:
                out.setdefault(k, {})[M] = {"gap_us": max(0.0, saved[k] / h),
                                            "saved_us": round(saved[k], 2), "hit": round(h, 3)}
    fits = {}
    lone_ms = [M for M in sorted(per_m) if per_m[M].get("lone_hits_us")]
    joint = window_scales(step, device_profile, out, lone_ms) if lone_ms else None
    for M in sorted(per_m):
        want = per_m[M].get("hits_us", {}).get(step.get("reference", ""))
        if M in lone_ms:
            fits[M] = fit = {"scale": joint["scale"], "window_of": joint["window_of"],
                             "rows": joint["rows"][M]}
            scales = {k: fit["scale"][w] for k, w in fit["window_of"].items()}
            windows = fit["window_of"]
        else:
            scales, windows = _total_scale(step["schedule"], want, device_profile, out, M), {}
        for k, per in out.items():
            if M in per:
                f = scales.get(k, 1.0) if isinstance(scales, dict) else scales
                cold = table[k].at(M)[0]
                per[M]["gap_us"] = round(min(cold, per[M]["gap_us"] * f), 3)
                per[M]["scale"] = round(f, 3)
                if k in windows:
                    per[M]["window"] = windows[k]
    return StepGaps(sorted(out.items()), fits)


def window_scales(step: dict, device_profile: DeviceProfile, gaps: dict, tokens) -> dict:
    """One scale per window's ops, the same at every M of ``tokens`` (a list,
    or one M): ``{"scale": {window: factor}, "window_of": {(kind, op):
    window}, "rows": {M: [(arm, probe hits us, lint hits us with the
    scales)]}}``. Each op of ``gaps`` (unscaled, ``step_gaps``'s shape)
    belongs to the lone window (``lone_budgets``) whose lint gives it the
    largest hit share summed over the M; an op none gives a share keeps
    factor 1. The factors are the least-squares fit, within
    ``WINDOW_SCALE_RANGE``, of the lint's hits (linear in them) of the
    probe's schedule and of each lone window to the record's (``hits_us`` of
    the reference kernel, ``lone_hits_us``) at every M together; an M whose
    reference hits are under ``MIN_REFERENCE_HITS_US`` (the probe moved too
    little) adds no rows, and with none left every factor is 1.

    One factor across M because it multiplies an op's gap, a property of the
    op: a factor per M let one lone arm write into the op what the lint's
    residency got wrong at that M (window B alone measured -5 us at M=64
    against +94..+159 at M = 1..16 and set kda.in_proj's gap to 4.3 us at
    M=64 against 14.7-19.0, while the fitted schedule's in_proj saved as much
    at M=64 as at M=16:
    benchmarks/results/h100-2026-12-06-issue45-validation/README.md)."""
    tokens = [tokens] if isinstance(tokens, int) else list(tokens)
    text = step["schedule"]
    recs = {M: step["per_m"].get(M) or step["per_m"][str(M)] for M in tokens}
    lone = {w: tuple(split_variant(v)[1]) for w, (_, v) in lone_variants(text).items()
            if all(w in r["lone_hits_us"] for r in recs.values())}
    window_of: dict = {}
    share: dict = {}
    for w, ov in lone.items():
        hits, kinds = predicted_hits(device_profile, text, tokens, ov)
        for M in tokens:
            for node, h in hits[M].items():
                k = (kinds.get(node), node.split(":", 1)[-1])
                if k in gaps:
                    share[(w, k)] = share.get((w, k), 0.0) + h
    best: dict = {}
    for (w, k), h in share.items():
        if h > best.get(k, 0.0):
            best[k], window_of[k] = h, w
    rows = {M: [("", (), r["hits_us"][step["reference"]])]
            + [(w, ov, r["lone_hits_us"][w]) for w, ov in lone.items()]
            for M, r in recs.items()}
    fit_ms = [M for M in tokens if rows[M][0][2] >= MIN_REFERENCE_HITS_US]
    names = sorted(set(window_of.values()))
    scale = {w: 1.0 for w in lone}
    if fit_ms and names:
        def hits(factors):
            out = []
            for M in fit_ms:
                gapped = with_step_gaps(
                    device_profile, gaps, {k: factors[w] for k, w in window_of.items()}, M)
                out += [dec - _step_us(gapped, text, M, ov)
                        for dec, (_, ov, _) in zip(decoys[M], rows[M])]
            return out
        decoys = {M: [_decoy_step_us(device_profile, text, M, ov) for _, ov, _ in rows[M]]
                  for M in fit_ms}
        wants = [want for M in fit_ms for _, _, want in rows[M]]
        base = hits({w: 0.0 for w in names})
        cols = [[a - b for a, b in zip(hits({v: float(v == w) for v in names}), base)]
                for w in names]
        x = bounded_least_squares(cols, [want - b for want, b in zip(wants, base)],
                                  *WINDOW_SCALE_RANGE)
        scale |= dict(zip(names, x))
    out_rows = {}
    for M in tokens:
        fitted = with_step_gaps(device_profile, gaps,
                                {k: scale[w] for k, w in window_of.items()}, M)
        out_rows[M] = [(w or "schedule", want, step_hits_us(fitted, text, M, ov))
                       for w, ov, want in rows[M]]
    return {"scale": scale, "window_of": window_of, "rows": out_rows}


def bounded_least_squares(cols: list[list[float]], y: list[float], lo: float,
                          hi: float) -> list[float]:
    """``x`` minimizing |sum_j x_j cols[j] - y|^2 with ``lo <= x_j <= hi``
    (a handful of unknowns): each way of holding every unknown free or at a
    bound (3^n) solved by the normal equations, the best feasible one. A
    column of zeros (an unknown nothing depends on) gets 1. (What
    ``scipy.optimize.lsq_linear`` does; l2sched does not depend on scipy,
    and neither vLLM 0.33 nor torch brings it, for one fit of <= 4
    unknowns.)"""
    n = len(cols)
    best, best_x = None, [1.0] * n
    for fix in itertools.product((None, lo, hi), repeat=n):
        x = [1.0 if not any(cols[j]) else f for j, f in enumerate(fix)]
        free = [j for j in range(n) if x[j] is None]
        r = [yi - sum(x[j] * cols[j][i] for j in range(n) if x[j] is not None)
             for i, yi in enumerate(y)]
        sol = _solve([[sum(a * b for a, b in zip(cols[j], cols[k])) for k in free]
                      for j in free], [sum(a * b for a, b in zip(cols[j], r)) for j in free])
        if sol is None or any(not lo - 1e-9 <= v <= hi + 1e-9 for v in sol):
            continue
        for j, v in zip(free, sol):
            x[j] = v
        err = sum((yi - sum(x[j] * cols[j][i] for j in range(n))) ** 2 for i, yi in enumerate(y))
        if best is None or err < best - 1e-12:
            best, best_x = err, x
    return best_x


def _solve(a: list[list[float]], b: list[float]) -> list[float] | None:
    """``a x = b`` by Gaussian elimination with partial pivoting; None when
    ``a`` is singular."""
    n = len(b)
    m = [row[:] + [bi] for row, bi in zip(a, b)]
    for c in range(n):
        p = max(range(c, n), key=lambda i: abs(m[i][c]))
        if abs(m[p][c]) < 1e-12:
            return None
        m[c], m[p] = m[p], m[c]
        for i in range(c + 1, n):
            f = m[i][c] / m[c][c]
            m[i] = [u - f * v for u, v in zip(m[i], m[c])]
    x = [0.0] * n
    for i in reversed(range(n)):
        x[i] = (m[i][n] - sum(m[i][j] * x[j] for j in range(i + 1, n))) / m[i][i]
    return x


def _total_scale(text: str, want: float | None, device_profile: DeviceProfile, gaps: dict,
                 M: int) -> float:
    """The factor on M's step gaps with which the lint's hits of the probe's
    schedule ``text`` equal the probe's own, ``want`` (the reference
    kernel's step medians, ``hits_us``, us): the per-op times come from the timed graph, whose event
    nodes add noise to every op (their sum over all ops differed from the
    untimed step's hits by -37..+86 us in run S3), so they apportion the
    step's hits among the ops and the untimed replays give the total.
    1 where the reference's hits are under ``MIN_REFERENCE_HITS_US``; within
    ``TOTAL_SCALE_RANGE``."""
    if want is None or want < MIN_REFERENCE_HITS_US:
        return 1.0
    other = step_hits_us(with_step_gaps(device_profile, gaps, 0.0, M), text, M)
    full = step_hits_us(with_step_gaps(device_profile, gaps, 1.0, M), text, M)
    if full - other <= 1e-6:
        return 1.0
    lo, hi = TOTAL_SCALE_RANGE
    return min(hi, max(lo, (want - other) / (full - other)))


def apply_step_gaps(derived: dict, gaps: dict) -> None:
    """Write ``gaps`` (``step_gaps``) into ``derived`` (``profile_write
    .derive``'s dict): each op's ``[ops]`` entry gets ``step_m`` and
    ``step_gap_us``, and ``[measured]`` a record ``ops.KIND.OP.step_gap_us``
    with the saved time and hit share per M."""
    for (kind, op), per in gaps.items():
        entry = derived["ops"].get(kind, {}).get(op)
        if entry is None:
            continue
        ms = sorted(per)
        entry["step_m"] = ms
        entry["step_gap_us"] = [per[M]["gap_us"] for M in ms]
        derived["measured"][f"ops.{kind}.{op}.step_gap_us"] = {
            "probe": gap_probe_text(per), "median": per[ms[len(ms) // 2]]["gap_us"]}
    derived["measured"].update(window_scale_records(gaps))


def window_scale_records(gaps) -> dict:
    """``[measured]`` records ``step_fill.WINDOW.scale`` of ``gaps``' window
    fits (``StepGaps.fits``): the factor (one across M, ``window_scales``) and
    per M the probe's hits of the window alone and the lint's with it (us)."""
    fits = getattr(gaps, "fits", {})
    out: dict = {}
    for w in sorted({w for f in fits.values() for w in f["scale"]}):
        per = {M: (f["scale"][w], next((r for r in f["rows"] if r[0] == w), None))
               for M, f in sorted(fits.items()) if w in f["scale"]}
        vals = [x for x, _ in per.values()]
        factor = sorted(vals)[len(vals) // 2]
        out[f"step_fill.{w}.scale"] = {
            "probe": (f"step_fill (window alone at {LONE_BUDGET_FRACTION:g} of its budget, copy, "
                      "beside its decoy; "
                      f"the factor x{factor:.2f} on its ops' step gaps at every M, fitted with "
                      "the whole schedule's hits over the M: " + ", ".join(
                          f"M={M} probe {r[1]:+.1f} us, lint {r[2]:+.1f} us"
                          for M, (x, r) in per.items() if r) + ")"),
            "median": round(factor, 3)}
    whole = {M: next(r for r in f["rows"] if r[0] == "schedule") for M, f in sorted(fits.items())}
    if whole:
        wants = sorted(r[1] for r in whole.values())
        out["step_fill.schedule.hits_us"] = {
            "probe": ("step_fill (the whole schedule, copy, decoy minus arm; the lint's with the "
                      "window scales beside it: " + ", ".join(
                          f"M={M} probe {r[1]:+.1f} us, lint {r[2]:+.1f} us"
                          for M, r in whole.items()) + ")"),
            "median": round(wants[len(wants) // 2], 1)}
    return out


def gap_probe_text(per: dict) -> str:
    """The ``[measured]`` probe text of one op's step gaps."""
    windows = sorted({r["window"] for r in per.values() if "window" in r})
    whose = (f"window {', '.join(windows)}'s scale (step_fill.W.scale)" if windows
             else "the step total's scale")
    return ("step_fill (bench run's decode step, the shipped schedule's windows, copy; "
            "decoy minus arm over the lint's hit share, summed over the kind's layers, x "
            f"{whose}: "
            + ", ".join(f"M={M} {r['saved_us']:+.1f} us / {r['hit']:.2f} x {r.get('scale', 1):.2f}"
                        for M, r in sorted(per.items())) + ")")


def step_gap_markdown(derived: dict) -> list[str]:
    """The report section of the per-op step gaps in ``derived`` (none
    without them): per op, the table's cold -> hot gap and the step's."""
    rows = [(kind, op, e) for kind, per in derived.get("ops", {}).items()
            for op, e in per.items() if e.get("step_m")]
    if not rows:
        return []
    md = ["## Cold -> hot gaps inside the decode step", "",
          "The `step_fill` probe's copy arm and its decoy, per op and M: decoy minus arm summed "
          "over the kind's layers, over the lint's summed hit share (formed at a hit share of "
          f"at least {MIN_HIT_LAYERS:g}); us.", "",
          "| kind | op | M | table gap | step gap |", "|---|---|---|---|---|"]
    for kind, op, e in rows:
        for M, g in zip(e["step_m"], e["step_gap_us"]):
            j = e["m"].index(M) if M in e["m"] else None
            table = "-" if j is None else f"{e['cold_us'][j] - e['hot_us'][j]:.2f}"
            md.append(f"| {kind} | {op} | {M} | {table} | {g:.2f} |")
    fits = {k: v for k, v in derived.get("measured", {}).items()
            if k.startswith("step_fill.") and k.endswith(".scale")}
    if fits:
        md += ["", "Each window's ops share one factor per M, fitted (least squares, within "
               f"{WINDOW_SCALE_RANGE[0]:g}..{WINDOW_SCALE_RANGE[1]:g}) so that the lint's hits "
               "of the whole schedule and of each window alone come near the probe's:", ""]
        md += [f"- `{k}`: {v['probe']}" for k, v in fits.items()]
    return md + [""]
