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

formed where ``hit >= MIN_HIT_LAYERS``; scale(M) makes the lint's hits of
the probe's schedule equal the probe's own step hits (the untimed
replays; ``_total_scale``). ``OpTimes.at`` then gives hot = cold - step
gap. Units: us, bytes.
"""

from __future__ import annotations

import functools

#: Least summed hit share (in layers' worth of fully resident weights) for
#: which a step gap is formed: below it the saved time over the hit share
#: magnifies the per-op noise (per-layer medians of 30 replays differ by
#: 0.05-0.2 us) past the gaps being measured (0.5-2 us).
MIN_HIT_LAYERS = 0.5
#: Bounds of the factor that matches the lint's hits of the probe's schedule
#: to the probe's step (``_total_scale``): outside them the per-op records
#: and the step disagree by more than a scale, and the records are wrong.
TOTAL_SCALE_RANGE = (0.5, 2.0)


@functools.lru_cache(maxsize=4)
def _lint_setup(schedule_text: str):
    """``(schedule, inventory, config)`` the probe's schedule is linted
    with: built once per schedule text, not once per lint."""
    from l2sched.lang.resolve import load_schedule_text
    from l2sched.model.config import load_model_config
    from l2sched.model.inventory import analytical_inventory
    cfg = load_model_config(None)
    inv = analytical_inventory(cfg, tp=4, ep=False, tp_rank=0)
    return load_schedule_text(schedule_text, "<step_fill>", []), inv, cfg


def predicted_hits(profile, schedule_text: str, tokens) -> tuple[dict, dict]:
    """``({M: {"L:op": effective hit share}}, {"L:op": layer kind})``: the
    lint's share of each op's weight bytes that ``schedule_text`` (the
    probe's ``.l2s`` text) makes resident, times the fill kernel's effect,
    with ``profile`` (a ``DeviceProfile``) in the decode step of ``bench
    run`` (TP4 inventory, all-reduces as idle intervals), at each M of
    ``tokens``; and each node's layer kind."""
    from l2sched.bench.validation import spin_collectives
    from l2sched.lint import run_lint
    sched, inv, cfg = _lint_setup(schedule_text)
    prof = spin_collectives(profile)
    out: dict = {}
    kinds: dict = {}
    for M in tokens:
        run = run_lint(sched, inv, device=prof, tokens=M, model_config=cfg)
        out[M] = {v: t.fast_bytes / t.read_bytes
                  for v, t in run.sim.timing.items() if t.read_bytes > 0}
        if not kinds:  # the same node ids at every M
            kinds = {v: d["kind"] for v, d in run.sg.nodes.items() if "kind" in d}
    return out, kinds


def step_hits_us(profile, schedule_text: str, M: int) -> float:
    """The lint's hits (us per step) of ``schedule_text`` at ``M`` with
    ``profile``: its decoy's step (fills that land nothing) minus its own,
    in ``bench run``'s decode step."""
    from l2sched.bench.controls import without_hits
    from l2sched.bench.validation import spin_collectives
    from l2sched.lint import run_lint
    sched, inv, cfg = _lint_setup(schedule_text)
    prof = spin_collectives(profile)
    arm = run_lint(sched, inv, device=prof, tokens=M, model_config=cfg)
    dec = run_lint(sched, inv, device=without_hits(prof), tokens=M, model_config=cfg)
    return dec.step_period("sim") - arm.step_period("sim")


def with_step_gaps(profile, gaps: dict, scale: float = 1.0, at: int | None = None):
    """``profile`` whose ops in ``gaps`` (``step_gaps``'s shape) have those
    step gaps times ``scale`` (only M ``at`` when given)."""
    import dataclasses
    ops = dict(profile.ops)
    for k, per in gaps.items():
        ms = sorted(m for m in per if at is None or m == at)
        if ms:
            ops[k] = dataclasses.replace(ops[k], step_m=tuple(ms),
                                         step_gap_us=tuple(scale * per[m]["gap_us"] for m in ms))
    return dataclasses.replace(profile, ops=ops)


def step_gaps(step: dict, profile) -> dict:
    """``{(kind, op): {M: {"gap_us", "saved_us", "hit", "scale"}}}`` from a
    ``step_fill`` record (``profile_step.step_fill_summary``, with
    ``ops_us``) and ``profile`` (the profile being written, its op table
    without step gaps): per op of the table and M whose summed hit share
    reaches ``MIN_HIT_LAYERS``, each M's gaps times that M's ``scale``
    (``_total_scale``). Empty without per-op records."""
    per_m = {int(m): r for m, r in (step.get("per_m") or {}).items() if r.get("ops_us")}
    if not per_m or not profile.ops:
        return {}
    hits, kinds = predicted_hits(profile, step["schedule"], sorted(per_m))
    out: dict = {}
    for M in sorted(per_m):
        arm, dec = per_m[M]["ops_us"]["arm"], per_m[M]["ops_us"]["decoy"]
        saved: dict = {}
        hit: dict = {}
        for key, us in arm.items():
            kind, op = kinds.get(key), key.split(":", 1)[-1]
            if kind is None or (kind, op) not in profile.ops or key not in dec:
                continue
            saved[(kind, op)] = saved.get((kind, op), 0.0) + dec[key] - us
            hit[(kind, op)] = hit.get((kind, op), 0.0) + hits[M].get(key, 0.0)
        for k, h in hit.items():
            if h >= MIN_HIT_LAYERS:
                out.setdefault(k, {})[M] = {"gap_us": max(0.0, saved[k] / h),
                                            "saved_us": round(saved[k], 2), "hit": round(h, 3)}
    for M in sorted(per_m):
        want = per_m[M].get("hits_us", {}).get(step.get("reference", ""))
        scale = _total_scale(step["schedule"], want, profile, out, M)
        for k, per in out.items():
            if M in per:
                cold = profile.ops[k].at(M)[0]
                per[M]["gap_us"] = round(min(cold, per[M]["gap_us"] * scale), 3)
                per[M]["scale"] = round(scale, 3)
    return dict(sorted(out.items()))


def _total_scale(text: str, want: float | None, profile, gaps: dict, M: int) -> float:
    """The factor on M's step gaps with which the lint's hits of the probe's
    schedule ``text`` equal the probe's own, ``want`` (the reference
    kernel's step medians, ``hits_us``, us): the per-op times come from the timed graph, whose event
    nodes add noise to every op (their sum over all ops differed from the
    untimed step's hits by -37..+86 us in run S3), so they apportion the
    step's hits among the ops and the untimed replays give the total.
    1 where the reference's hits are under ``MIN_REFERENCE_HITS_US``; within
    ``TOTAL_SCALE_RANGE``."""
    from l2sched.bench.profile_step import MIN_REFERENCE_HITS_US
    if want is None or want < MIN_REFERENCE_HITS_US:
        return 1.0
    other = step_hits_us(with_step_gaps(profile, gaps, 0.0, M), text, M)
    full = step_hits_us(with_step_gaps(profile, gaps, 1.0, M), text, M)
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


def gap_probe_text(per: dict) -> str:
    """The ``[measured]`` probe text of one op's step gaps."""
    return ("step_fill (bench run's decode step, the shipped schedule's windows, copy; "
            "decoy minus arm over the lint's hit share, summed over the kind's layers, x "
            "the step total's scale: "
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
    return md + [""]
