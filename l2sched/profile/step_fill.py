"""The profile's ``step_fill`` probe: what each fill kernel's landed bytes buy
inside the decode step, relative to the reference kernel's.

Why: the ``fill`` probe (flush, fill, wait, an M=8 GEMM) credits the bulk
kernel 0.1-0.3 of a copy fill, while in the bench's decode step its fills
make the consumer kernels as much faster as copy's (arm minus decoy,
benchmarks/results/h200-2026-12-01-decoy.md and -step-fill.md); neither the
consumer, the launch path (eager or CUDA graph), the stream arrangement nor
address translations explain the difference (-step-fill.md). So the profile
measures the ratio where the lint applies it: ``bench run`` (this package's
decode step, the GLM-5.3-Flash tree at TP4, all-reduces as idle intervals)
of ``STEP_FILL_WINDOWS`` installed with each fill kernel, each beside its
decoy control (the same fills reading a scratch buffer:
``bench.controls.DecoyRows``), at each of ``STEP_FILL_TOKENS`` tokens.

hits(mode) = median step of the decoy - median step of the arm (us), the
mean over the M; ratio(mode) = hits(mode) / hits(reference).
``profile_write`` turns a ratio into the mode's landed fraction per size:
the reference kernel's (from the ``fill`` probe, whose figures for copy
agree with the step) times the ratio. The reference arm and its decoy also
keep their in-graph op times, which ``profile_gaps`` turns into the ops'
step gaps; each window with targets of its own also runs alone (copy, at
``LONE_BUDGET_FRACTION`` of its budget, beside its decoy), and
``profile_gaps`` fits one scale per window's ops to those hits. Limits: ``bench run``'s step is the
TP4 tree and takes its idle intervals and the fill kernels' launch shapes
from the shipped ``h200`` profile whatever ``--base`` is, so on another GPU
the ratio is measured with the H200's shapes, and with ``--tp`` other than
4 the probe is skipped. torch comes in through ``bench.run``.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import tempfile

from l2sched.bench.arms import window_alone_variant
from l2sched.bench.options import run_arguments
from l2sched.bench.run import run as bench_run
from l2sched.bench.step import MODEL
from l2sched.errors import L2sError
from l2sched.lang.resolve import load_schedule_text

#: The fill kernel the other kernels are measured against: the one whose
#: ``fill`` probe figures agree with the decode step (copy: window A, A_MLA
#: and C hits +89 / +95 us measured against +91 / +99 from the lint,
#: benchmarks/results/h200-2026-12-01-decoy-b.md).
REFERENCE_MODE = "copy"
#: Decode tokens of the probe's steps: the validation set's (docs/lint.md).
STEP_FILL_TOKENS = (1, 4, 16, 64)
#: Timed replays per arm (more than the validation runs' 25: the hits are a
#: difference of two medians; S2 took 50 at two M, this takes four M).
STEP_FILL_REPLAYS = 30
#: The probe's windows: those of the shipped h200 schedule
#: (schedules/glm53-flash-h200-tp4.l2s), so that every kind of target the
#: schedules fill (output projections, the MLA core's weights, the mHC and
#: norm weights, the router, the next layer's attention, the MoE layers'
#: shared expert) is consumed inside the probe's step. Windows A and A_MLA
#: alone bought copy 50 us (run S2), window A alone 38 us (run S1), the
#: whole schedule 99-131 us (benchmarks/results/h200-2026-12-01-step-fill.md).
STEP_FILL_WINDOWS = (
    "window A at attn.after_first_proj budget 17MB layers kda & moe {\n"
    "    this self_attn.o_proj\n}\n\n"
    "window A_MLA at attn.after_first_proj budget 24MB layers mla {\n"
    "    this lazy self_attn.mla_attn.mla_attn.W_UK_T, self_attn.mla_attn.mla_attn.W_UV\n"
    "    this self_attn.o_proj\n}\n\n"
    "window B at attn.pre_all_reduce budget 30MB layers moe carry C {\n"
    "    this post_attention_layernorm, hc_ffn_*\n"
    "    this mlp.gate\n"
    "    next hc_attn_*, input_layernorm\n"
    "    next lazy self_attn.* except self_attn.o_proj, self_attn.kv_b_proj, "
    "self_attn.mla_attn, self_attn.?_conv1d\n}\n\n"
    "window C at moe.pre_all_reduce budget 10MB layers moe\n")
#: Each window of the probe's schedule with targets of its own is also run
#: alone at this fraction of its budget (the other windows at 0 B), beside
#: its decoy: what that window's ops buy by themselves, to which
#: ``profile_gaps`` fits one scale per window's ops. 3/4, so that no lone
#: arm of the probe is a validation arm (those run each window alone at its
#: budget and at half of it, docs/lint.md#validation).
LONE_BUDGET_FRACTION = 0.75
#: Mean reference hits per M (us) below which a ratio is not formed: about
#: 3x the A/A noise floor of one arm's gain at M=16 in the validation runs
#: (14.9 us, benchmarks/results/h200-2026-12-01-decoy.md, E3).
MIN_REFERENCE_HITS_US = 45.0
#: The TP degree of ``bench run``'s decode step (its inventory's).
BENCH_TP = 4


def arm_of(mode: str, reference: str = REFERENCE_MODE) -> str:
    """The ``bench run`` arm that runs the probe's schedule with fill kernel
    ``mode``: ``compiled`` for the reference kernel (the schedule's own),
    else the variant ``kernel-MODE``; its decoy is ``ctl-`` + that name."""
    return "compiled" if mode == reference else f"kernel-{mode}"


def lone_arm(window: str) -> str:
    """The ``bench run`` arm of the probe's ``window`` alone; its decoy is
    ``ctl-`` + that name."""
    return f"lone-{window}"


def lone_variants(text: str) -> dict[str, tuple[int, str]]:
    """``{window: (budget bytes, bench run --variant)}`` of each window of
    the probe's schedule ``text`` that has targets of its own, alone at
    ``LONE_BUDGET_FRACTION`` of its budget (rounded to kB), the others at
    0 B. Raises ``L2sError`` if ``text`` is not a valid schedule."""
    sched = load_schedule_text(text, "<step_fill>", [])
    out = {}
    for w in sched.windows:
        if not w.targets:  # window C: only what window B carries into it
            continue
        kb = round(w.budget * LONE_BUDGET_FRACTION / 1000)
        out[w.name] = (kb * 1000, window_alone_variant(lone_arm(w.name), sched, w.name,
                                                       f"{kb}KB"))
    return out


def step_fill_schedule(device: str, tp: int, mode: str = REFERENCE_MODE) -> str:
    """The ``.l2s`` text of the probe's schedule for ``device`` (a device
    profile name) at TP ``tp``, fill kernel ``mode``."""
    return (f"schedule profile_step_fill\n\nmodel {MODEL}\ndevice {device}\ntp {tp}\n"
            f"ep off\nmax_tokens 256\npolicy evict_last\nset_aside 0\nkernel {mode}\n\n"
            + STEP_FILL_WINDOWS)


def probe_step_fill(ctx) -> dict:
    """``bench run`` of the probe's schedule with every fill kernel of
    ``ctx.fill_shapes``, and of each of its windows alone (``lone_variants``),
    each beside its decoy; returns ``step_fill_summary``'s dict
    plus the schedule text (``ctx.dry``: ``bench run --dry``, meta tensors,
    for tests). Skipped (``{"skipped": reason}``) with ``--quick``, at a TP
    other than 4 (``bench run``'s step) and where the reference kernel is
    not among the shapes."""
    if ctx.quick:
        return {"skipped": "--quick"}
    if ctx.tp != BENCH_TP:
        return {"skipped": f"bench run's decode step is TP{BENCH_TP}, the profile --tp {ctx.tp}"}
    if REFERENCE_MODE not in ctx.fill_shapes:
        return {"skipped": f"no {REFERENCE_MODE} kernel in the profile"}
    text = step_fill_schedule(ctx.device_name, ctx.tp)
    others = [m for m in ctx.fill_shapes if m != REFERENCE_MODE]
    lone = lone_variants(text)
    with tempfile.TemporaryDirectory(prefix="l2sched-step-fill-") as tmp:
        path = os.path.join(tmp, "step-fill.l2s")
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        p = argparse.ArgumentParser()
        run_arguments(p)
        args = p.parse_args(
            ["--output", os.path.join(tmp, "step-fill.json"), "--schedule", path,
             "--tokens", ",".join(map(str, STEP_FILL_TOKENS)),
             "--replays", str(STEP_FILL_REPLAYS)]
            + [f"--variant={arm_of(m)}:kernel={m}" for m in others]
            + [f"--variant={v}" for _, v in lone.values()]
            + (["--dry"] if getattr(ctx, "dry", False) else []))
        args.controls = "decoy"  # each arm's fills beside their decoy
        result = bench_run(args)
    if args.dry:  # meta tensors: arms captured, nothing timed
        rec = next(iter(result["per_m"].values()))
        return {"skipped": "--dry (no GPU timings)", "arms": sorted(rec["arms"]),
                "schedule": text}
    out = step_fill_summary(result, others, {w: b for w, (b, _) in lone.items()})
    out["schedule"] = text
    return out


def step_fill_summary(result: dict, others: list[str], lone: dict | None = None) -> dict:
    """From a ``bench run`` result with the arms ``compiled`` (the reference
    kernel), ``kernel-MODE`` per mode in ``others``, ``lone-W`` per window
    in ``lone`` (``{window: budget bytes}``) and their decoys ``ctl-*``:
    ``{"tokens": [M, ...], "reference", "hits_us": {mode: us, mean over M},
    "per_m": {M: {"hits_us", "step_us": {arm: median us}, "ops_us",
    "lone_hits_us": {window: us}}}, "ratio": {mode: hits / reference
    hits}, "lone_budgets": lone}`` (the lone keys only with ``lone``);
    ratios are None where the reference hits are below
    ``MIN_REFERENCE_HITS_US``.
    ``ops_us`` (where the run timed its ops in the graph): ``{"arm": {"L:op":
    median us}, "decoy": {...}}`` of the reference kernel's arm and its decoy
    (``bench.profile_gaps`` turns them into per-op step gaps). Raises
    ``ValueError`` when an arm is missing."""
    names = {m: arm_of(m) for m in [REFERENCE_MODE, *others]}
    lone = lone or {}
    per_m = {}
    for m_key, rec in result["per_m"].items():
        arms = rec["arms"]
        step = {}
        for name in [*names.values(), *map(lone_arm, lone)]:
            for arm in (name, f"ctl-{name}"):
                if arm not in arms:
                    raise ValueError(f"step_fill: the bench result has no arm {arm!r}")
                step[arm] = statistics.median(arms[arm]["graph_step_us_all"])
        hits = {mode: step[f"ctl-{name}"] - step[name] for mode, name in names.items()}
        per_m[int(m_key)] = {"hits_us": hits, "step_us": step}
        if lone:
            per_m[int(m_key)]["lone_hits_us"] = {
                w: step[f"ctl-{lone_arm(w)}"] - step[lone_arm(w)] for w in lone}
        ref = names[REFERENCE_MODE]
        if arms[ref].get("per_op_source") == "graph":
            per_m[int(m_key)]["ops_us"] = {
                side: {k: round(v["dur_us"], 3) for k, v in arms[arm]["ops"].items()}
                for side, arm in (("arm", ref), ("decoy", f"ctl-{ref}"))}
    hits = {mode: statistics.fmean(r["hits_us"][mode] for r in per_m.values())
            for mode in names}
    ref = hits[REFERENCE_MODE]
    ratio = {m: (hits[m] / ref if ref >= MIN_REFERENCE_HITS_US else None) for m in hits}
    return {"tokens": sorted(per_m), "reference": REFERENCE_MODE, "hits_us": hits,
            "per_m": per_m, "ratio": ratio} | ({"lone_budgets": dict(lone)} if lone else {})


def check_step_fill(rec: dict | None) -> None:
    """Check a ``step_fill`` record read back from a state file (None, a
    skipped one or ``step_fill_summary``'s shape). Raises ``ValueError``
    whose text starts with the bad key's path (``.ratio.bulk: ...``)."""
    if rec is None:
        return
    if not isinstance(rec, dict):
        raise ValueError(f": want an object, got {rec!r:.40}")
    if "skipped" in rec:
        return
    if not isinstance(rec.get("reference"), str):
        raise ValueError(".reference: want a fill kernel name")
    ratio, hits = rec.get("ratio"), rec.get("hits_us")
    if not isinstance(ratio, dict) or not isinstance(hits, dict):
        raise ValueError(": want objects 'ratio' and 'hits_us' (kernel -> number)")
    for key, table, none_ok in (("ratio", ratio, True), ("hits_us", hits, False)):
        for mode, v in table.items():
            if not (isinstance(v, (int, float)) and not isinstance(v, bool)
                    or (none_ok and v is None)):
                raise ValueError(f".{key}.{mode}: want a number, got {v!r:.40}")
            if key == "ratio" and v is not None and not 0 <= v <= 10:
                raise ValueError(f".ratio.{mode}: {v} is outside 0..10")
            if key == "ratio" and mode not in hits:
                raise ValueError(f".hits_us: no {mode!r}, which has a ratio")
    if rec["reference"] not in hits:
        raise ValueError(f".hits_us: no entry for the reference {rec['reference']!r}")
    toks = rec.get("tokens")
    if not (isinstance(toks, list) and toks
            and all(isinstance(m, int) and not isinstance(m, bool) and m >= 1 for m in toks)):
        raise ValueError(f".tokens: want a list of token counts >= 1, got {toks!r:.40}")
    for mode, v in hits.items():
        if not math.isfinite(v):
            raise ValueError(f".hits_us.{mode}: want a finite number, got {v}")
    sched = rec.get("schedule")
    if sched is not None and not (isinstance(sched, str) and sched.strip()):
        raise ValueError(f".schedule: want the probe's .l2s text, got {sched!r:.40}")
    lone = rec.get("lone_budgets")
    if lone is not None:
        _check_lone_budgets(lone, sched)
    _check_per_m(rec.get("per_m"), toks, lone, rec["reference"])


def _check_lone_budgets(lone, sched: str | None) -> None:
    """``check_step_fill`` of ``lone_budgets``: ``{window: bytes}``, exactly
    the lone windows ``lone_variants`` makes of the record's schedule."""
    if not (isinstance(lone, dict) and lone and all(
            isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in lone.values())):
        raise ValueError(f".lone_budgets: want {{window: budget bytes > 0}}, got {lone!r:.40}")
    if sched is None:
        raise ValueError(".schedule: the record has lone windows but not the probe's schedule")
    try:
        want = {w: b for w, (b, _) in lone_variants(sched).items()}
    except L2sError as e:
        raise ValueError(f".schedule: {e}") from None
    for w, b in lone.items():
        if w not in want:
            raise ValueError(f".lone_budgets.{w}: the probe's schedule has no window {w} "
                             "with targets of its own")
        if b != want[w]:
            raise ValueError(f".lone_budgets.{w}: {b} B, but the schedule's window {w} alone "
                             f"at {LONE_BUDGET_FRACTION:g} of its budget is {want[w]} B")
    if set(lone) != set(want):
        raise ValueError(f".lone_budgets: no {sorted(set(want) - set(lone))[0]}, a window of "
                         "the probe's schedule")


def _finite(v) -> bool:
    """A JSON number (not a bool) that is finite."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _check_per_m(per_m, toks: list, lone: dict | None, reference: str) -> None:
    """``check_step_fill`` of the record's ``per_m`` (absent is allowed: a
    record from before it was kept), with the lone windows' hits where the
    record has ``lone`` budgets."""
    if per_m is None:
        return
    if not isinstance(per_m, dict) or not all(
            isinstance(r, dict) and re.fullmatch(r"[1-9][0-9]*", str(k)) for k, r in per_m.items()):
        raise ValueError(".per_m: want {token count >= 1: {...}}")
    if sorted(int(k) for k in per_m) != sorted(toks):
        raise ValueError(f".per_m: its token counts {sorted(int(k) for k in per_m)} are not "
                         f".tokens {sorted(toks)}")
    for m_key, r in per_m.items():
        hits = r.get("hits_us")
        if hits is not None and not (isinstance(hits, dict) and reference in hits
                                     and all(_finite(v) for v in hits.values())):
            raise ValueError(f".per_m.{m_key}.hits_us: want {{kernel: finite us}} with the "
                             f"reference {reference!r}, got {hits!r:.60}")
        got = r.get("lone_hits_us")
        if got is not None and not lone:
            raise ValueError(f".per_m.{m_key}.lone_hits_us: the record has no lone_budgets")
        if lone and not (isinstance(got, dict) and set(got) == set(lone) and hits is not None):
            raise ValueError(f".per_m.{m_key}.lone_hits_us: want the hits of each lone window "
                             f"{sorted(lone)} (and hits_us beside them), got {got!r:.40}")
        for w, v in (got or {}).items():
            if not (_finite(v) and abs(v) < 1e6):
                raise ValueError(f".per_m.{m_key}.lone_hits_us.{w}: want a finite number of "
                                 f"us within +-1e6, got {v!r:.40}")
        ops = r.get("ops_us")
        if ops is None:
            continue
        if not isinstance(ops, dict) or set(ops) != {"arm", "decoy"}:
            raise ValueError(f".per_m.{m_key}.ops_us: want {{'arm': ..., 'decoy': ...}}")
        for side, table in ops.items():
            bad = next((k for k, v in table.items()
                        if not isinstance(v, (int, float)) or isinstance(v, bool)
                        or not 0 <= v < 1e6), None) \
                if isinstance(table, dict) else "(not an object)"
            if bad is not None:
                raise ValueError(f".per_m.{m_key}.ops_us.{side}: want 'layer:op' -> us "
                                 f"in 0..1e6, bad entry {bad!r:.40}")


def scale_landed(reference: dict, ratio: float) -> dict:
    """A fill kernel's ``landed``/``effect`` from the reference kernel's fill
    table entry ``reference`` (``landed``: [[MB, fraction], ...]) scaled by
    the step ratio, each fraction capped at 1: ``{"landed", "effect"}``."""
    landed = [[mb, round(max(0.0, min(1.0, f * ratio)), 3)] for mb, f in reference["landed"]]
    effs = [f for _, f in landed]
    return {"landed": landed,
            "effect": round(statistics.median(effs), 3) if effs else 0.0}


def apply_step_fill(modes: dict, step: dict, measured: dict) -> None:
    """Each fill kernel with a ``step_fill`` ratio gets the reference
    kernel's landed fractions times that ratio (``scale_landed``)
    in ``modes``; the ratio goes into ``measured``. Nothing without the
    probe, its reference kernel's fill table or a ratio."""
    ref = modes.get(step.get("reference", ""))
    if not ref or not step.get("ratio"):
        return
    for mode, ratio in step["ratio"].items():
        if mode == step["reference"] or mode not in modes or ratio is None:
            continue
        modes[mode].update(scale_landed(ref, ratio))
        modes[mode]["source"] = (f"l2sched profile: {step['reference']}'s landed fractions "
                                 "x step_fill, interference")
        measured[f"fill.{mode}.step_ratio"] = {
            "probe": (f"step_fill (bench run's decode step at M={step['tokens']}: decoy "
                      f"minus arm, {mode} over {step['reference']}; mean hits "
                      f"{step['hits_us'][mode]:.1f} / "
                      f"{step['hits_us'][step['reference']]:.1f} us)"),
            "median": ratio}
        measured[f"fill.{mode}.effect"] = {
            "probe": f"step_fill ratio x {step['reference']}'s fill effect",
            "median": modes[mode]["effect"]}


def step_fill_markdown(step: dict | None) -> list[str]:
    """The report section of the ``step_fill`` probe (none without it)."""
    if not step:
        return []
    if "skipped" in step:
        return ["## Fill kernels in the decode step", "", f"Skipped: {step['skipped']}.", ""]
    ms = sorted(step["per_m"], key=int)
    md = ["## Fill kernels in the decode step", "",
          f"`bench run`, {STEP_FILL_REPLAYS} replays, the windows of the shipped h200 "
          "schedule, each kernel beside its decoy; hits = "
          "decoy's median step - arm's (us).", "",
          "| kernel | " + " | ".join(f"M={m}: arm / decoy us, hits" for m in ms)
          + " | mean hits | ratio to " + step["reference"] + " |",
          "|---|" + "---|" * (len(ms) + 2)]
    for mode, hits in step["hits_us"].items():
        arm = arm_of(mode, step["reference"])
        cells = []
        for m in ms:
            r = step["per_m"][m]
            cells.append(f"{r['step_us'][arm]:.1f} / {r['step_us']['ctl-' + arm]:.1f}, "
                         f"{r['hits_us'][mode]:+.1f}")
        ratio = step["ratio"].get(mode)
        md.append(f"| {mode} | " + " | ".join(cells)
                  + f" | {hits:+.1f} | {'-' if ratio is None else f'{ratio:.2f}'} |")
    for w, budget in (step.get("lone_budgets") or {}).items():
        arm = lone_arm(w)
        cells = []
        for m in ms:
            r = step["per_m"][m]
            both = [r.get("step_us", {}).get(a) for a in (arm, "ctl-" + arm)]
            cells.append(("" if None in both else f"{both[0]:.1f} / {both[1]:.1f}, ")
                         + f"{r['lone_hits_us'][w]:+.1f}")
        mean = statistics.fmean(step["per_m"][m]["lone_hits_us"][w] for m in ms)
        md.append(f"| {step['reference']}, window {w} alone at {budget / 1e6:g} MB | "
                  + " | ".join(cells) + f" | {mean:+.1f} | - |")
    return md + [""]
