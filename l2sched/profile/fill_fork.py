"""The profile's ``fill_fork`` probe: what a forked fill costs the main stream
of the captured decode step, whatever it moves (``latency.fill_fork_us``).

Why: in ``bench run``'s decode step (the GLM-5.3-Flash tree at TP4,
all-reduces as idle intervals, the shared experts on their aux stream,
CUDA-graph replays) a lone window that moves almost nothing costs the step
a few us per fill: window C alone at 0.5 MB -95.5 us with 42 fills per step
at M=4 and -177.2 us at M=16, window A alone -73.8 / -162.1 us with 31
(benchmarks/results/h200-2026-12-01-diag-fork.md); bytes, fill kernel and
cache policy hardly change it, it needs the aux stream
(-diag-streams.md) and CUDA's several hardware queues (-diag-connections.md).
The lint charges a fill its launch and bytes only, so it cannot see this.

The probe: one ``bench run`` of the shipped h200 schedule at
``FILL_FORK_TOKENS`` with the arms ``none``, its A/A arm ``none-aa`` and
each of ``FORK_WINDOWS`` alone at ``FORK_BUDGET`` (every other window at 0 B;
the lone windows of ``lab/experiments/capture_launches.sh``), the fills
entered into the capture by the runtime's default capture launch
(``runtime.capture_nodes.DEFAULT_CAPTURE_LAUNCH``, recorded as
``capture_launch``: a different default changes the cost). Per M:

    per fill(W) = (median step of W alone - median step of none) / fills per step of W
    fork_us     = max(0, median over the windows of per fill(W))
    spread_us   = median over the windows of A/A floor / fills per step of W

(medians of the untimed graph replays; fills per step from the run's timed
graph, the fills the runtime issued; A/A floor: ``lint.noise.aa_noise_floor``
of ``none`` and ``none-aa``). Units: us. The cost is not additive (windows
A, B and C together at 0.5 MB lost less than A alone; B alone 0.6 us per
fill): the median over the lone windows is what one fork costs where it
sits alone, not what a whole schedule's forks cost together (docs/lint.md,
"Fork cost"), so ``l2sched profile`` runs this probe only when asked
(``--fill-fork``, about 60 s; the H100's full profile of 2026-12-07 took
265 s with it and 202 s of probes without it:
benchmarks/results/h100-2026-12-07-issue45-second-attempt/). Skipped with
``--quick`` and at a TP other than 4 (``bench run``'s step). torch comes in
through ``bench.run``.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile

from l2sched.bench import shipped_path
from l2sched.bench.arms import window_alone_variant
from l2sched.bench.options import SCHEDULE, run_arguments
from l2sched.bench.run import run as bench_run
from l2sched.lang.resolve import load_schedule
from l2sched.lint.noise import aa_noise_floor
from l2sched.profile.step_fill import BENCH_TP, STEP_FILL_REPLAYS, STEP_FILL_TOKENS
from l2sched.runtime.capture_nodes import DEFAULT_CAPTURE_LAUNCH
from l2sched.device import DeviceProfile

#: The shipped h200 schedule's windows run alone (A: after the attention's
#: first projection, B: before the attention all-reduce, C: before the MoE
#: all-reduce): the lone windows of the diagnostic runs.
FORK_WINDOWS = ("A", "B", "C")
#: Each lone window's budget: a fill that moves almost nothing (0.5 MB, the
#: diagnostic runs' size; at 5 MB window C lost as much).
FORK_BUDGET = "0.5MB"
#: Decode tokens and timed replays: the ``step_fill`` probe's.
FILL_FORK_TOKENS = STEP_FILL_TOKENS
FILL_FORK_REPLAYS = STEP_FILL_REPLAYS


def fork_arm(window: str) -> str:
    """The ``bench run`` arm of ``window`` alone at ``FORK_BUDGET``."""
    return f"fork-{window}"


def fork_variants(schedule_path: str) -> dict[str, str]:
    """``{window: bench run --variant}`` of each of ``FORK_WINDOWS`` alone
    at ``FORK_BUDGET`` in the schedule at ``schedule_path`` (the others at
    0 B). Raises ``L2sError`` for a schedule that does not resolve and
    ``ValueError`` when it lacks one of the windows."""
    sched = load_schedule(shipped_path(schedule_path), [])
    names = {w.name for w in sched.windows}
    missing = [w for w in FORK_WINDOWS if w not in names]
    if missing:
        raise ValueError(f"fill_fork: schedule {schedule_path} has no window {missing[0]}")
    return {w: window_alone_variant(fork_arm(w), sched, w, FORK_BUDGET)
            for w in FORK_WINDOWS}


#: The skip record of a profile run that did not ask for the probe; a resumed
#: state with it runs the probe once ``--fill-fork`` asks (``forget_unasked_fill_fork``).
NOT_ASKED = "not asked (l2sched profile --fill-fork)"


def probe_fill_fork(ctx) -> dict:
    """``bench run`` of the lone windows beside ``none`` and ``none-aa``
    (module docstring); returns ``fill_fork_summary``'s dict (``ctx.dry``:
    ``bench run --dry``, meta tensors, for tests: the arms, nothing timed).
    Skipped (``{"skipped": reason}``) unless asked (``ctx.fill_fork``;
    ``l2sched profile --fill-fork``), with ``--quick`` and at a TP other
    than 4."""
    if not getattr(ctx, "fill_fork", True):
        return {"skipped": NOT_ASKED}
    if ctx.quick:
        return {"skipped": "--quick"}
    if ctx.tp != BENCH_TP:
        return {"skipped": f"bench run's decode step is TP{BENCH_TP}, the profile --tp {ctx.tp}"}
    launch = DEFAULT_CAPTURE_LAUNCH
    variants = fork_variants(SCHEDULE)
    with tempfile.TemporaryDirectory(prefix="l2sched-fill-fork-") as tmp:
        p = argparse.ArgumentParser()
        run_arguments(p)
        args = p.parse_args(
            ["--output", os.path.join(tmp, "fill-fork.json"), "--schedule", SCHEDULE,
             "--tokens", ",".join(map(str, FILL_FORK_TOKENS)),
             "--replays", str(FILL_FORK_REPLAYS), "--aa"]
            + [f"--variant={v}" for v in variants.values()]
            + (["--dry"] if getattr(ctx, "dry", False) else []))
        result = bench_run(args)
    if args.dry:  # meta tensors: arms captured, nothing timed
        rec = next(iter(result["per_m"].values()))
        return {"skipped": "--dry (no GPU timings)", "arms": sorted(rec["arms"]),
                "capture_launch": launch, "schedule": SCHEDULE}
    out = fill_fork_summary(result, launch)
    out["schedule"] = SCHEDULE
    return out


def forget_unasked_fill_fork(results: dict, asked: bool) -> None:
    """Drop a state's ``fill_fork`` record that was skipped only for not
    being asked, when this run asks for the probe (``--fill-fork`` on a
    resumed state), so that it runs; ``results``: the state's probe results,
    changed in place."""
    rec = results.get("fill_fork")
    if asked and isinstance(rec, dict) and rec.get("skipped") == NOT_ASKED:
        del results["fill_fork"]


def fills_per_step(arm: dict) -> int:
    """Fills one step of ``bench run`` arm ``arm`` forked: the sum over its
    hook ops of the fills its timed graph recorded (``timed_graph.summarize``)."""
    return sum(int(f["fills"]) for f in (arm.get("fills") or {}).values())


def fill_fork_summary(result: dict, capture_launch: str,
                      windows: tuple[str, ...] = FORK_WINDOWS) -> dict:
    """From a ``bench run`` result with the arms ``none``, ``none-aa`` and
    ``fork-W`` per window (each with ``graph_step_us_all``, the untimed
    replays, and its timed graph's ``fills``): ``{"tokens": [M, ...],
    "windows", "budget", "capture_launch", "fork_us": [us per M], "spread_us":
    [us per M], "per_m": {M: {"step_us": {arm: median us}, "fills": {W: n},
    "per_fill_us": {W: us}, "floor_us", "fork_us", "spread_us"}}}`` (module
    docstring). Raises ``ValueError`` when an arm is missing or a window
    forked no fill."""
    per_m = {}
    for m_key, rec in sorted(result["per_m"].items(), key=lambda kv: int(kv[0])):
        arms = rec["arms"]
        names = ["none", "none-aa", *map(fork_arm, windows)]
        for name in names:
            if not (arms.get(name) or {}).get("graph_step_us_all"):
                raise ValueError(f"fill_fork: the bench result has no replays of arm "
                                 f"{name!r} at M={m_key}")
        step = {n: statistics.median(arms[n]["graph_step_us_all"]) for n in names}
        fills = {w: fills_per_step(arms[fork_arm(w)]) for w in windows}
        for w, n in fills.items():
            if n <= 0:
                raise ValueError(f"fill_fork: window {w} alone forked no fill at M={m_key}")
        floor = aa_noise_floor(arms["none"]["graph_step_us_all"],
                               arms["none-aa"]["graph_step_us_all"])
        per_fill = {w: (step[fork_arm(w)] - step["none"]) / fills[w] for w in windows}
        per_m[int(m_key)] = {
            "step_us": step, "fills": fills, "per_fill_us": per_fill, "floor_us": floor,
            "fork_us": max(0.0, statistics.median(per_fill.values())),
            "spread_us": statistics.median(floor / fills[w] for w in windows)}
    ms = sorted(per_m)
    return {"tokens": ms, "windows": list(windows), "budget": FORK_BUDGET,
            "capture_launch": capture_launch,
            "fork_us": [per_m[m]["fork_us"] for m in ms],
            "spread_us": [per_m[m]["spread_us"] for m in ms], "per_m": per_m}


def check_fill_fork(rec: dict | None) -> None:
    """Check a ``fill_fork`` record read back from a state file (None, a
    skipped one or ``fill_fork_summary``'s shape; ``state.load_state`` has
    checked that it is an object). Raises ``ValueError`` whose text starts
    with the bad key's path (``.fork_us: ...``)."""
    if not rec or "skipped" in rec:
        return
    toks = rec.get("tokens")
    if not (isinstance(toks, list) and toks and all(
            isinstance(m, int) and not isinstance(m, bool) and m >= 1 for m in toks)
            and toks == sorted(set(toks))):
        raise ValueError(f".tokens: want increasing token counts >= 1, got {toks!r:.40}")
    for key in ("fork_us", "spread_us"):
        xs = rec.get(key)
        if not (isinstance(xs, list) and len(xs) == len(toks)):
            raise ValueError(f".{key}: want one number per token count of .tokens, "
                             f"got {xs!r:.40}")
        bad = next((x for x in xs if not (isinstance(x, (int, float))
                                          and not isinstance(x, bool) and math.isfinite(x)
                                          and 0 <= x < 1e6)), None)
        if bad is not None:
            raise ValueError(f".{key}: {bad!r:.40} is not a time in 0..1e6 us")
    if not isinstance(rec.get("capture_launch"), str):
        raise ValueError(".capture_launch: want the capture launch the probe ran with")


def apply_fill_fork(rec: dict | None, device_profile: DeviceProfile, sec: dict,
                    measured: dict, kept: list) -> None:
    """Write ``latency.fill_fork_m`` / ``fill_fork_us`` into the profile's
    sections ``sec`` from the probe's record ``rec`` (measured: its probe,
    capture launch and per-M spread in ``measured``), else those of
    ``device_profile`` (the base profile; named in ``kept``), else nothing (the
    term stays absent: not measured, 0 us)."""
    if rec and rec.get("fork_us"):
        sec["latency"]["fill_fork_m"] = list(rec["tokens"])
        sec["latency"]["fill_fork_us"] = [round(x, 3) for x in rec["fork_us"]]
        per = ", ".join(f"M={m} {v:.2f} +- {s:.2f} us" for m, v, s in
                        zip(rec["tokens"], rec["fork_us"], rec["spread_us"]))
        measured["latency.fill_fork_us"] = {
            "probe": (f"fill_fork (bench run's decode step, windows "
                      f"{', '.join(rec.get('windows', FORK_WINDOWS))} each alone at "
                      f"{rec.get('budget', FORK_BUDGET)}, capture launch "
                      f"{rec['capture_launch']}: median over the windows of (step - "
                      f"none's) / fills per step; +- the A/A floor / fills: {per})"),
            "capture_launch": rec["capture_launch"],
            "m": list(rec["tokens"]),
            "spread_us": [round(x, 3) for x in rec["spread_us"]]}
    elif device_profile.fill_fork_us:
        sec["latency"]["fill_fork_m"] = list(device_profile.fill_fork_m)
        sec["latency"]["fill_fork_us"] = list(device_profile.fill_fork_us)
        kept.append("latency.fill_fork_us")


def fill_fork_markdown(rec: dict | None) -> list[str]:
    """The report section of the ``fill_fork`` probe (none without it)."""
    if not rec:
        return []
    head = ["## Fork cost in the decode step", ""]
    if "skipped" in rec:
        return head + [f"Skipped: {rec['skipped']}.", ""]
    ws = rec.get("windows", list(FORK_WINDOWS))
    md = head + [f"`bench run`, {FILL_FORK_REPLAYS} replays, the shipped h200 schedule's "
                 f"windows each alone at {rec.get('budget', FORK_BUDGET)}, capture launch "
                 f"`{rec['capture_launch']}`; per fill = (median step - none's) / fills "
                 "per step (us).", "",
                 "| M | none us | A/A floor us | "
                 + " | ".join(f"{w}: step us, fills, per fill" for w in ws)
                 + " | fork_us | +- |", "|---|---|---|" + "---|" * (len(ws) + 2)]
    for m in rec["tokens"]:
        r = rec["per_m"].get(m) or rec["per_m"].get(str(m))
        cells = [f"{r['step_us'][fork_arm(w)]:.1f}, {r['fills'][w]}, "
                 f"{r['per_fill_us'][w]:+.2f}" for w in ws]
        md.append(f"| {m} | {r['step_us']['none']:.1f} | {r['floor_us']:.1f} | "
                  + " | ".join(cells) + f" | {r['fork_us']:.2f} | {r['spread_us']:.2f} |")
    return md + [""]
