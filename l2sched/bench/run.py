"""``l2sched bench``: measure arms of one GLM-5.3-Flash-shaped TP4 decode step.

Flow (one process, one GPU): build the bench tree (``tree``), compile each
arm's schedule for TP rank 0 against the same analytical inventory, install it
with the vLLM plugin's installer (``vllm_plugin._install``: one ``install``
per layer kind, the same ``CudaRuntime`` and CuTe DSL fill kernel), run one
eager step (binds rows), capture the whole step as one CUDA graph (the
*untimed* graph: step time) and a *timed graph variant* of the same step with
external CUDA events before/after every op on its stream (main, aux = shared
expert) and on the side stream after every op at which fills were issued
(``step`` module docstring), and remove the hooks. Then replay all graphs of
one M interleaved (shuffled order per round, untimed and timed graphs of
every arm in the same rounds), time each replay with CUDA events around it,
and read the timed graph's in-graph events after each of its replays:
per-op durations and finish times (us from the step's first event), the
expert stream (sum of its GEMMs), and each fill's exit vs the start of the
expert stream after it. A fill's "finish" is its kernel's exit: a bulk
``cp.async.bulk.prefetch`` kernel exits once its requests are issued, before
its lines land; a load-mode kernel exits when its loads returned. The timed
graph's step time is reported next to the untimed one (the event nodes'
overhead). ``--per-op eager`` (``args.per_op``) is the old, host-launch-bound eager fallback, labelled so.
Ideal gain: each prefetched consumer op timed standalone cold (after a 256 MB
read flush) and L2-resident (right after itself) (``ideal``). The lint runs
in ``report``, not here.

All-reduces are IDLE INTERVALS of the device profile's collective model (one
GPU standing in for rank 0 of TP4); every report says so. Units: us,
bytes, MB = 10^6 B.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from l2sched.bench import shipped_path
from l2sched.bench.arms import arm_specs, schedule_text  # noqa: F401 (re-exported)
from l2sched.bench.ideal import ideal_gain
from l2sched.bench.isolation import SetAsideIsolation
from l2sched.bench.trace import trace_replays
from l2sched.bench.options import SCHEDULE  # noqa: F401 (re-exported)
from l2sched.bench.step import StepRunner
from l2sched.bench.timed_graph import (  # noqa: F401 (quantile, stats re-exported)
    capture_timed, collect, quantile, stats, summarize, sync_unless_dry, timed_eager)
from l2sched.bench.tree import build_tree, distinct_experts
from l2sched.bench.controls import DecoyRows
from l2sched.compiler.compile import compile_plan
from l2sched.errors import L2sUsageError
from l2sched.files import write_text_atomically
from l2sched.lang.resolve import load_schedule
from l2sched.model.config import load_model_config
from l2sched.device import load_device
from l2sched.model.inventory import analytical_inventory
from l2sched.progress import enabled as progress_enabled, stage as progress_stage
from l2sched.runtime import make_runtime
from l2sched.runtime.capture_nodes import NODE_LAUNCHES
from l2sched.runtime.gate import StepInfo
from l2sched.runtime.kernel import cutlass_version
from l2sched.runtime.sites import install_plan

AR_NOTE = ("all-reduces are idle intervals (spin kernels) of the h200 device "
           "profile's collective model, not NCCL: one GPU stands in for TP rank 0")

FILL_NOTE = ("fill finish = the side-stream event right after the fill kernel, "
             "i.e. the kernel's exit; a bulk prefetch kernel exits once its "
             "requests are issued, before its lines land in L2")


def ar_note(profile_name: str) -> str:
    """``AR_NOTE`` naming the device profile the idle intervals come from."""
    return AR_NOTE.replace("the h200 device", f"the {profile_name} device")


def step_model(args):
    """``(config, inventory, profile)`` of the step ``args`` asks for: the
    GLM-5.3 text config of ``--model-config`` (default: the embedded
    GLM-5.3-Flash), its analytical TP4 rank-0 inventory and the device
    profile of ``--device-profile`` (default ``h200``). Raises
    ``L2sModelError`` / ``L2sInputError`` for an unreadable config or profile,
    ``L2sUsageError`` for a config of another model (the step is GLM-shaped)."""
    path = getattr(args, "model_config", None)
    cfg = load_model_config(path)
    inv = analytical_inventory(cfg, tp=4, ep=False, tp_rank=0)
    if inv.model != "glm5next":
        raise L2sUsageError(f"--model-config {path}: a {inv.model} config; bench run's "
                            "step is GLM-5.3-shaped (glm5next)")
    return cfg, inv, load_device(getattr(args, "device_profile", None) or "h200")


class Progress:
    """Progress lines on stderr: what runs now, elapsed and estimated left;
    only where ``l2sched.progress.enabled`` says so (a terminal, or
    ``L2SCHED_PROGRESS=1``)."""

    def __init__(self, total: int):
        self.total, self.done, self.t0 = total, 0, time.time()
        self.shown = progress_enabled(sys.stderr)

    def tick(self, what: str) -> None:
        """Count one unit done and print ``what`` with time left (s); the
        command's progress stage (``l2sched.progress``) names it too, so a
        stage of an earlier phase (compiling) is not shown for minutes."""
        self.done += 1
        progress_stage(f"bench run {self.done}/{self.total}: {what}")
        if not self.shown:
            return
        el = time.time() - self.t0
        left = el / self.done * (self.total - self.done)
        print(f"[bench {self.done}/{self.total}] {what}  elapsed {el:.0f}s, "
              f"~{left:.0f}s left", file=sys.stderr, flush=True)


def run(args) -> dict:
    """Run the benchmark per ``args`` (see ``add_arguments``); returns the
    result dict (also written to ``args.out``)."""
    import torch

    dry = args.dry
    cfg, inv, device_profile = step_model(args)
    # a schedule without its own model_config line is resolved for the step's
    own_config = cfg if getattr(args, "model_config", None) else None
    dev = "meta" if dry else "cuda"
    t0 = time.time()
    model = build_tree(inv, device=dev, expert_pools=args.expert_pools)
    runner = StepRunner(model, device_profile, tokens=args.tokens[0],
                        top_k=int(cfg["num_experts_per_tok"]))
    cyc = runner.calibrate_sleep()
    # the lab's research runs (python -m lab bench run) add arm variants, the
    # verdict set's folder and controls on the same args
    bench_dir = getattr(args, "bench_dir", "")
    arms = arm_specs(args.schedule, shipped_path(bench_dir) if bench_dir else "",
                     args.load_mode, list(getattr(args, "arm_variants", [])) + args.variant,
                     aa=args.aa, controls=getattr(args, "controls", False))
    for a in arms:
        if a["path"]:
            a["schedule"] = load_schedule(shipped_path(a["path"]), a["overrides"],
                                          model_config=own_config)
            a["plan"] = compile_plan(a["schedule"], inv, 0)
    _decoy_buffers(arms, torch, dry)
    progress_stage("bench run: capturing the arms")
    out: dict[str, Any] = {
        "kind": "l2sched bench", "note": ar_note(device_profile.name), "dry": dry,
        # the step's model: the report lints this config (default: embedded)
        "model_config": cfg,
        "argv": sys.argv, "tokens": args.tokens, "replays": args.replays,
        "lead_us": getattr(args, "lead_us", 0.0),
        "warmup": args.warmup, "per_op": getattr(args, "per_op", "graph"),
        "fill_note": FILL_NOTE,
        # the idle intervals come from this profile; the report lints with it
        "device_profile_toml": Path(device_profile.path).read_text(encoding="utf-8"),
        "machine": _machine(torch, dry), "spin_cycles_per_us": cyc,
        "build_s": time.time() - t0,
        "expert_pools": args.expert_pools,
        "arms": [{"name": a["name"], "path": a["path"],
                  "schedule_text": schedule_text(a["path"]),
                  "overrides": a.get("overrides", []),
                  "runtime": a.get("runtime", {}),
                  "install": a.get("install", {}),
                  **({"decoy": True} if a.get("decoy") else {}),
                  "plan_bytes": sum(w.nbytes for w in a["plan"].issues) if a.get("plan") else 0,
                  "plan_issues": len(a["plan"].issues) if a.get("plan") else 0}
                 for a in arms],
        "per_m": {},
    }
    prog = Progress(len(args.tokens) * (len(arms) + 2))
    for M in args.tokens:
        try:
            _one_m(M, args, arms, runner, model, inv, prog, out, torch, dry)
        except Exception as e:  # keep what was measured; say what broke
            traceback.print_exc()
            out.setdefault("errors", []).append(f"M={M}: {type(e).__name__}: {e}")
            if args.out:
                _write(args.out, out)
    out["total_s"] = time.time() - t0
    if args.out:
        _write(args.out, out)
    return out


def _one_m(M, args, arms, runner, model, inv, prog, out, torch, dry) -> None:
    """Measure every arm at ``M`` tokens into ``out["per_m"][str(M)]``.

    Per arm: install, one eager step (binds rows, loads kernels), capture the
    untimed graph (step time) and the timed graph variant (``timed_graph.capture_timed``;
    per-op times), remove the hooks. Then ``warmup + replays`` rounds; each
    round replays every arm's untimed and timed graph once, in a shuffled
    order, timing each replay with events outside the graph (us) and reading
    the timed graph's in-graph events after it (``timed_graph.collect``). With
    ``args.per_op == "eager"`` (fallback, host-launch-bound) the per-op times
    come from timed eager steps instead and no timed graph is captured."""
    per_op = getattr(args, "per_op", "graph")
    runner.set_tokens(M)
    picked = runner.distinct_experts(M)
    rec: dict[str, Any] = {"distinct_experts": picked,
                           "expert_bytes_per_layer": picked * (
                               inv.tensor(3, "mlp.experts.routed_experts.w13_weight").bytes_per_expert
                               + inv.tensor(3, "mlp.experts.routed_experts.w2_weight").bytes_per_expert),
                           "arms": {}}
    graphs, timed, acc = {}, {}, {}
    keep = []
    for a in arms:
        keep.append(_capture_arm(a, M, args, per_op, runner, model, inv, torch, dry,
                                 rec, graphs, timed, acc))
        prog.tick(f"arm {a['name']} M={M} captured")
    launch: dict = {k: [] for k in graphs}
    isolation = SetAsideIsolation(
        {a["name"]: a["plan"].set_aside if a.get("plan") else 0 for a in arms},
        device=0 if dry else torch.cuda.current_device(), dry=dry)
    isolation.start(keep)
    try:
        times, outer_timed = _replay_interleaved(graphs, timed, acc, args, torch, runner,
                                                 launch, before=isolation.before)
        if getattr(args, "trace_dir", "") and not dry:
            rec["traces"] = trace_replays(graphs, args.trace_dir, M, torch,
                                          before=isolation.before)
    finally:
        isolation.close()
    rec["set_aside_replays"] = isolation.record()
    for a in arms:
        k = a["name"]
        if launch.get(k):
            rec["arms"][k]["host_launch_us"] = stats(launch[k])
        rec["arms"][k].update(summarize(acc[k], "graph" if per_op == "graph" else "eager"))
        if times.get(k):
            rec["arms"][k]["graph_step_us"] = stats(times[k])
            rec["arms"][k]["graph_step_us_all"] = times[k]
        if outer_timed.get(k):
            rec["arms"][k]["timed_graph_step_us"] = stats(outer_timed[k])
    prog.tick(f"replays M={M} ({args.replays} x {len(arms)} arms x "
              f"{'untimed+timed' if timed else 'untimed'}, interleaved)")
    compiled = next(a for a in arms if a["name"] == "compiled")
    rec["ideal"] = ideal_gain(runner, compiled["plan"], inv, torch, dry, args.ideal_reps)
    prog.tick(f"ideal gain M={M}")
    out["per_m"][str(M)] = rec
    del graphs, timed
    keep.clear()
    if not dry:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    if args.out:
        _write(args.out, out)


def _decoy_buffers(arms: list[dict], torch, dry: bool) -> None:
    """Give every decoy control (``controls.DecoyRows``) ``decoy_buffer``:
    ``(device address, bytes)`` of one scratch buffer as long as the
    largest decoy plan's fill bytes per step, shared by them (they are
    captured and replayed one at a time); a fake address in dry mode."""
    need = max((sum(w.nbytes for w in a["plan"].issues) for a in arms
                if a.get("decoy") and a.get("plan")), default=0)
    if not need:
        return
    need += 1 << 20
    if dry:
        where = (1 << 40, need)
    else:
        buf = torch.empty(need, dtype=torch.uint8, device="cuda")
        where = (buf.data_ptr(), need)
    for a in arms:
        if a.get("decoy"):
            a["decoy_buffer"] = where
            if not dry:
                a["decoy_tensor"] = buf  # keeps the buffer alive with the arm


def _capture_arm(a, M, args, per_op, runner, model, inv, torch, dry,
                 rec, graphs, timed, acc):
    """Arm ``a`` at ``M`` tokens (see ``_one_m``): install its plan on a new
    runtime, one eager step, the timed eager steps (``per_op`` ``eager``)
    into ``acc``, the untimed graph into ``graphs`` (not in dry mode), the
    timed graph variant into ``timed`` (``per_op`` ``graph``), the runtime's
    stats into ``rec``; remove the hooks. Returns the runtime (None for an
    arm without a plan), kept alive until the M is done."""
    inst = rt = None
    if a.get("plan"):
        rt = make_runtime(a["plan"], "dry-run" if dry else "cuda",
                          device_profile=runner.device_profile,
                          **({k: v for k, v in a.get("runtime", {}).items()
                              if k == "merge_fills"} if dry else a.get("runtime", {})))
        if a.get("decoy"):
            DecoyRows(*a["decoy_buffer"]).attach(rt)
        rt.set_step(StepInfo(num_tokens=M, graph_mode="full"))
        inst = install_plan(model.layers, inv, a["plan"], rt, **a.get("install", {}))
        if not dry:
            rt.prepare()
    count = (lambda rt=rt: rt.stats.issued) if rt is not None else (lambda: 0)
    try:
        runner.step()          # binds rows, loads kernels
        sync_unless_dry(torch, dry)
        acc[a["name"]] = {}
        if per_op == "eager":
            for rep in range(args.eager_reps):
                tg = timed_eager(runner, torch, dry, count)
                collect(tg, acc[a["name"]])
        if not dry:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                runner.step()
            torch.cuda.synchronize()
            graphs[a["name"]] = g
        if per_op == "graph":
            timed[a["name"]] = capture_timed(
                runner, torch, dry, count, getattr(rt, "capture_launch", "fork") not in NODE_LAUNCHES)
        rec["arms"][a["name"]] = {}
        if rt is not None:
            rec["arms"][a["name"]]["runtime_stats"] = {
                "issued": rt.stats.issued, "bytes_issued": rt.stats.bytes_issued,
                "skipped": dict(rt.stats.skipped),
                "enabled": bool(getattr(rt, "enabled", True))}
    finally:
        if inst is not None:
            inst.remove()
    return rt


def _replay_interleaved(graphs, timed, acc, args, torch, runner=None, launch=None,
                        before=None):
    """``warmup + replays`` rounds over the untimed graphs (``graphs``) and
    the timed variants (``timed``) of every arm, in a shuffled order per
    round, each replay timed with CUDA events around it (us); after each
    counted replay of a timed variant its in-graph events go to ``acc``
    (``timed_graph.collect``). With ``args.lead_us`` > 0 the stream first spins that
    long (``runner.spin``) so the host has submitted the whole graph
    before the start event runs: the time then excludes the graph's launch
    (without it, the launch of a graph on an idle GPU is inside the
    measured step). ``launch``: arm -> host time (us) of each counted
    untimed ``replay()`` call, appended. Returns ``(untimed, timed)``: arm
    -> us per counted replay. ``before``: called with the arm's name before
    each of its replays, outside the timed region (``SetAsideIsolation``)."""
    lead = getattr(args, "lead_us", 0.0) or 0.0
    times = {k: [] for k in graphs}
    outer_timed = {k: [] for k in timed}
    order = [(k, "untimed") for k in graphs] + [(k, "timed") for k in timed]
    for r in range(args.warmup + args.replays):
        random.Random(r).shuffle(order)
        for k, which in order:
            tg = timed[k] if which == "timed" else None
            g = tg.graph if tg is not None else graphs[k]
            if g is not None:
                if before is not None:
                    before(k)
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                if lead > 0 and runner is not None:
                    runner.spin(lead)
                e0.record()
                h0 = time.perf_counter()
                g.replay()
                h1 = time.perf_counter()
                e1.record()
                if launch is not None and tg is None and r >= args.warmup:
                    launch.setdefault(k, []).append((h1 - h0) * 1e6)
                torch.cuda.synchronize()
                if r >= args.warmup:
                    (times if tg is None else outer_timed)[k].append(e0.elapsed_time(e1) * 1000.0)
            if tg is not None and r >= args.warmup:
                collect(tg, acc[k])
    return times, outer_timed


def _write(path, out):
    write_text_atomically(path, json.dumps(out, indent=1, default=str))


def _machine(torch, dry) -> dict:
    d = {"python": sys.version.split()[0], "torch": torch.__version__}
    # how many hardware queues CUDA spreads a graph's branches over (None: its default)
    d["cuda_device_max_connections"] = os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS")
    try:
        d["cutlass_dsl"] = cutlass_version()
    except Exception:
        pass
    if not dry and torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        d.update(gpu=p.name, sm=f"{p.major}.{p.minor}", sms=p.multi_processor_count,
                 l2_bytes=getattr(p, "L2_cache_size", None), cuda=torch.version.cuda,
                 memory_bytes=p.total_memory)
    return d
