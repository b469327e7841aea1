"""``l2sched bench``: measure arms of one GLM-5.3-Flash-shaped TP4 decode step.

Flow (one process, one GPU): build the bench tree (``tree``), compile each
arm's schedule for TP rank 0 against the same analytical inventory, install it
with the vLLM plugin's installer (``vllm_plugin._install``: one ``install``
per layer kind, the same ``CudaRuntime`` and CuTe DSL fill kernel), run one
eager step (binds rows), one timed eager step (per-op CUDA events), capture
the whole step as one CUDA graph, and remove the hooks. Then replay all graphs
of one M interleaved (shuffled order per round) and time each replay with CUDA
events. Ideal gain: each prefetched consumer op timed standalone cold (after a
256 MB read flush) and L2-resident (right after itself). Lint: ``run_lint``
per arm and M, uncalibrated and with the no-prefetch arm's measured per-op
durations (``measured`` = what ``lint.calibrate.measure`` returns).

All-reduces are IDLE INTERVALS of the device profile's collective model (one
GPU standing in for rank 0 of TP4); every report says so. Units: us,
bytes, MB = 10^6 B.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import time
from typing import Any

SCHEDULE = "schedules/glm53-flash-h200-tp4.l2s"
BENCH_DIR = "schedules/bench"
AR_NOTE = ("all-reduces are idle intervals (spin kernels) of the h200 device "
           "profile's collective model, not NCCL: one GPU stands in for TP rank 0")


def _q(xs, q):
    xs = sorted(xs)
    if not xs:
        return None
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def stats(xs) -> dict:
    """``{median, p10, p90, n}`` of a list of us values."""
    return {"median": _q(xs, 0.5), "p10": _q(xs, 0.1), "p90": _q(xs, 0.9),
            "n": len(xs)}


class Progress:
    """Progress lines on stderr: what runs now, elapsed and estimated left."""

    def __init__(self, total: int):
        self.total, self.done, self.t0 = total, 0, time.time()

    def tick(self, what: str) -> None:
        """Count one unit done and print ``what`` with time left (s)."""
        self.done += 1
        el = time.time() - self.t0
        left = el / self.done * (self.total - self.done)
        print(f"[bench {self.done}/{self.total}] {what}  elapsed {el:.0f}s, "
              f"~{left:.0f}s left", file=sys.stderr, flush=True)


def arm_specs(schedule_path: str, bench_dir: str, load_mode: bool,
              variants: list[str]) -> list[dict]:
    """The arms: ``none``; ``compiled`` (the H200 schedule, default bulk
    kernel); ``evict_normal`` (same windows, no cache policy: the Kimi-K3
    kernel's behaviour); ``load`` (load-mode kernel, optional); one per
    ``--variant`` override set; one per ``schedules/bench/*.l2s``."""
    from ..kernel import H200_LOAD_SHAPE
    arms = [{"name": "none", "path": None},
            {"name": "compiled", "path": schedule_path, "overrides": []},
            {"name": "evict_normal", "path": schedule_path,
             "overrides": ["policy=evict_normal"]}]
    if load_mode:
        arms.append({"name": "load", "path": schedule_path, "overrides": [],
                     "runtime": dict(H200_LOAD_SHAPE)})
    for v in variants:
        name, _, ov = v.partition(":")
        arms.append({"name": name, "path": schedule_path,
                     "overrides": [o for o in ov.split(",") if o]})
    if bench_dir and os.path.isdir(bench_dir):
        for f in sorted(os.listdir(bench_dir)):
            if f.endswith(".l2s"):
                arms.append({"name": "bench/" + f[:-4],
                             "path": os.path.join(bench_dir, f), "overrides": []})
    return arms


def run(args) -> dict:
    """Run the benchmark per ``args`` (see ``add_arguments``); returns the
    result dict (also written to ``args.out``)."""
    import torch

    from ..devices import load_device
    from ..inventory import analytical_inventory, load_model_config
    from ..semantic import load_schedule
    from ..compile import compile_plan
    from .step import StepRunner
    from .tree import build_tree

    dry = args.dry
    cfg = load_model_config(None)
    inv = analytical_inventory(cfg, tp=4, ep=False, tp_rank=0)
    prof = load_device("h200")
    dev = "meta" if dry else "cuda"
    t0 = time.time()
    model = build_tree(inv, device=dev, expert_pools=args.expert_pools)
    runner = StepRunner(model, prof, tokens=args.tokens[0])
    cyc = runner.calibrate_sleep()
    arms = arm_specs(args.schedule, args.bench_dir, args.load_mode, args.variant)
    for a in arms:
        if a["path"]:
            a["schedule"] = load_schedule(a["path"], a["overrides"])
            a["plan"] = compile_plan(a["schedule"], inv, 0)
    out: dict[str, Any] = {
        "kind": "l2sched bench", "note": AR_NOTE, "dry": dry,
        "argv": sys.argv, "tokens": args.tokens, "replays": args.replays,
        "machine": _machine(torch, dry), "spin_cycles_per_us": cyc,
        "build_s": time.time() - t0,
        "expert_pools": args.expert_pools,
        "arms": [{"name": a["name"], "path": a["path"],
                  "overrides": a.get("overrides", []),
                  "runtime": a.get("runtime", {}),
                  "plan_bytes": sum(w.bytes for w in a["plan"].issues) if a.get("plan") else 0,
                  "plan_issues": len(a["plan"].issues) if a.get("plan") else 0}
                 for a in arms],
        "per_m": {},
    }
    prog = Progress(len(args.tokens) * (len(arms) + 2))
    for M in args.tokens:
        try:
            _one_m(M, args, arms, runner, model, inv, prog, out, torch, dry)
        except Exception as e:  # keep what was measured; say what broke
            import traceback
            traceback.print_exc()
            out.setdefault("errors", []).append(f"M={M}: {type(e).__name__}: {e}")
            if args.out:
                _write(args.out, out)
    out["total_s"] = time.time() - t0
    if args.out:
        _write(args.out, out)
    return out


def _one_m(M, args, arms, runner, model, inv, prog, out, torch, dry) -> None:
    """Measure every arm at ``M`` tokens into ``out["per_m"][str(M)]``."""
    from ..runtime import StepInfo, make_runtime
    from ..vllm_plugin import _install
    from .tree import distinct_experts
    if True:
        runner.set_tokens(M)
        rec: dict[str, Any] = {"distinct_experts": distinct_experts(M),
                               "expert_bytes_per_layer": distinct_experts(M) * (
                                   inv.tensor(3, "mlp.experts.routed_experts.w13_weight").bytes_per_expert
                                   + inv.tensor(3, "mlp.experts.routed_experts.w2_weight").bytes_per_expert),
                               "arms": {}}
        graphs = {}
        keep = []
        for a in arms:
            inst = rt = None
            if a.get("plan"):
                rt = make_runtime(a["plan"], "dry-run" if dry else "cuda",
                                  **({} if dry else a.get("runtime", {})))
                rt.set_step(StepInfo(num_tokens=M, graph_mode="full"))
                inst = _install(model, inv, a["plan"], rt)
                if not dry:
                    rt.prepare()
            try:
                runner.step()          # binds rows, loads kernels
                _sync(torch, dry)
                ar = {}
                for rep in range(args.eager_reps):
                    runner.timing = True
                    runner.step(lead_us=0 if dry else 40000)
                    runner.timing = False
                    _sync(torch, dry)
                    _collect(runner, a.get("plan"), ar)
                rec["arms"][a["name"]] = _summarize_eager(ar)
                if not dry:
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g):
                        runner.step()
                    torch.cuda.synchronize()
                    graphs[a["name"]] = g
                if rt is not None:
                    rec["arms"][a["name"]]["runtime_stats"] = {
                        "issued": rt.stats.issued, "bytes_issued": rt.stats.bytes_issued,
                        "skipped": dict(rt.stats.skipped),
                        "enabled": bool(getattr(rt, "enabled", True))}
            finally:
                if inst is not None:
                    inst.remove()
            keep.append(rt)
            prog.tick(f"arm {a['name']} M={M} captured")
        # interleaved graph replays
        times = {k: [] for k in graphs}
        names = list(graphs)
        for r in range(args.warmup + args.replays):
            random.Random(r).shuffle(names)
            for k in names:
                e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                e0.record()
                graphs[k].replay()
                e1.record()
                torch.cuda.synchronize()
                if r >= args.warmup:
                    times[k].append(e0.elapsed_time(e1) * 1000.0)
        for k, v in times.items():
            rec["arms"][k]["graph_step_us"] = stats(v)
            rec["arms"][k]["graph_step_us_all"] = v
        prog.tick(f"replays M={M} ({args.replays} x {len(names)} arms, interleaved)")
        rec["ideal"] = _ideal(runner, arms[1]["plan"], inv, torch, dry, args.ideal_reps)
        prog.tick(f"ideal gain + lint M={M}")
        out["per_m"][str(M)] = rec
        del graphs
        keep.clear()
        if not dry:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        if args.out:
            _write(args.out, out)


def _write(path, out):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f, indent=1, default=str)
    os.replace(tmp, path)


def _sync(torch, dry):
    if not dry:
        torch.cuda.synchronize()


def _machine(torch, dry) -> dict:
    d = {"python": sys.version.split()[0], "torch": torch.__version__}
    try:
        from ..kernel import cutlass_version
        d["cutlass_dsl"] = cutlass_version()
    except Exception:
        pass
    if not dry and torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        d.update(gpu=p.name, sm=f"{p.major}.{p.minor}", sms=p.multi_processor_count,
                 l2_bytes=getattr(p, "L2_cache_size", None), cuda=torch.version.cuda,
                 memory_bytes=p.total_memory)
    return d


def _collect(runner, plan, acc: dict) -> None:
    """Append one timed eager step's per-op durations, finish times (us from
    the step start) and side-stream fill-exit times into ``acc``."""
    st = runner.start_event
    ops = acc.setdefault("ops", {})
    for layer, op, stream, e0, e1 in runner.records:
        d = ops.setdefault(f"{layer}:{op}", {"dur": [], "finish": [], "start": [],
                                             "stream": stream})
        d["dur"].append(e0.elapsed_time(e1) * 1000.0)
        d["start"].append(st.elapsed_time(e0) * 1000.0)
        d["finish"].append(st.elapsed_time(e1) * 1000.0)
    acc.setdefault("step", []).append(st.elapsed_time(runner.end_event) * 1000.0)
    if plan is not None:
        hooks = {(w.layer, w.hook) for w in plan.issues}
        fs = acc.setdefault("fills", {})
        for layer, op, ev in runner.side_records:
            o = runner_op(runner, layer, op)
            if any((layer, h) in hooks for h in o.hooks_after + o.hooks_before):
                fs.setdefault(f"{layer}:{op}", []).append(st.elapsed_time(ev) * 1000.0)


def runner_op(runner, layer, name):
    """The adapter ``Op`` named ``name`` in layer ``layer``."""
    from ..adapters import glm5next as ad
    return next(o for o in ad.decode_timeline(runner.inv.kinds[layer]) if o.name == name)


def _summarize_eager(acc: dict) -> dict:
    ops = {k: {"dur_us": statistics.median(v["dur"]),
               "start_us": statistics.median(v["start"]),
               "finish_us": statistics.median(v["finish"]), "stream": v["stream"]}
           for k, v in acc.get("ops", {}).items()}
    expert = {}
    for k, v in ops.items():
        layer, op = k.split(":", 1)
        if op in ("moe.w13", "moe.w2"):
            expert.setdefault(layer, 0.0)
            expert[layer] += v["dur_us"]
    fills = {}
    for k, v in acc.get("fills", {}).items():
        layer = k.split(":", 1)[0]
        es = ops.get(f"{layer}:moe.align", {}).get("start_us")
        fills[k] = {"fill_exit_us": statistics.median(v), "expert_start_us": es,
                    "exit_before_experts_us": (es - statistics.median(v)) if es is not None else None}
    return {"eager_step_us": statistics.median(acc["step"]), "ops": ops,
            "expert_stream_us": sum(expert.values()), "fills": fills}


def _consumers(plan, inv, runner) -> dict:
    """``(kind, op) -> [layers]`` of ops that read bytes the plan fetches."""
    from ..compile import storage_entry
    fetched = set()
    for w in plan.issues:
        for r in w.ranges:
            fetched.add((r.layer, r.tensor))
    out: dict = {}
    for i in range(len(inv.layers)):
        for op in runner.ops_of(i):
            for p in op.reads:
                try:
                    e = inv.tensor(i, p)
                except KeyError:
                    continue
                st = storage_entry(inv, i, e)
                if (i, st.path) in fetched:
                    out.setdefault((str(inv.kinds[i]), op.name), []).append(i)
                    break
    return out


def _ideal(runner, plan, inv, torch, dry, reps) -> dict:
    """Cold and L2-resident standalone time of every prefetched consumer op
    (one representative layer per (kind, op)); ideal gain = sum over all
    consumer occurrences of (cold - hot), us."""
    cons = _consumers(plan, inv, runner)
    flush = None if dry else torch.empty(256 * 10 ** 6 // 2, dtype=torch.bfloat16,
                                         device="cuda").normal_()
    rows = []
    total = 0.0
    for (kind, op), layers in sorted(cons.items()):
        lay = runner.model.layers[layers[0]]
        runner._ops = {o.name: o for o in runner.ops_of(layers[0])}
        o = runner._ops[op]
        cold, hot = [], []
        for _ in range(reps):
            for which in ("cold", "hot"):
                if dry:
                    cold.append(0.0), hot.append(0.0)
                    break
                if which == "cold":
                    flush.sum()
                else:
                    runner._body(lay, o)
                runner.spin(300)  # host launch of the timed op must not show: keep the GPU busy
                e0 = torch.cuda.Event(enable_timing=True)
                e1 = torch.cuda.Event(enable_timing=True)
                e0.record()
                runner._body(lay, o)
                e1.record()
                torch.cuda.synchronize()
                (cold if which == "cold" else hot).append(e0.elapsed_time(e1) * 1000.0)
        c, h = statistics.median(cold), statistics.median(hot)
        total += max(0.0, c - h) * len(layers)
        rows.append({"kind": kind, "op": op, "layers": len(layers), "cold_us": c,
                     "hot_us": h, "gain_us": max(0.0, c - h) * len(layers)})
    return {"consumers": rows, "ideal_gain_us": total}


def _lint(arms, inv, prof, cfg, M, rec, run_lint) -> dict:
    """Lint every scheduled arm at M, uncalibrated and calibrated with the
    no-prefetch arm's measured per-op durations; per-op finish-time errors."""
    base = rec["arms"].get("none", {}).get("ops", {})
    measured: dict = {}
    per: dict = {}
    for k, v in base.items():
        layer, op = k.split(":", 1)
        per.setdefault((str(inv.kinds[int(layer)]), op), []).append(v["dur_us"])
    measured = {k: statistics.median(v) for k, v in per.items()}
    res = {}
    for a in arms:
        if not a.get("schedule"):
            continue
        entry = {}
        for label, meas in (("uncalibrated", None), ("calibrated", measured)):
            lr = run_lint(a["schedule"], inv, device=prof, tokens=M,
                          measured=meas, model_config=cfg)
            errs = sorted({f.code for f in lr.findings if f.severity == "error"})
            warns = sorted({f.code for f in lr.findings if f.severity == "warning"})
            pred = {"step_us": lr.step_period("sim"), "base_step_us": lr.step_period("base"),
                    "errors": errs, "warnings": warns}
            pred["finish_err"] = _finish_err(lr.sg, lr.sim, rec["arms"].get(a["name"], {}).get("ops", {}))
            pred["base_finish_err"] = _finish_err(lr.base_sg, lr.base, base)
            entry[label] = pred
        res[a["name"]] = entry
    return res


def _finish_err(sg, sim, ops) -> dict | None:
    """Median and p90 of |predicted - measured| / measured finish time of the
    main-stream ops of the step (positions < N), and the count."""
    if not ops:
        return None
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
    if not errs:
        return None
    return {"median": statistics.median(errs), "p90": _q(errs, 0.9), "n": len(errs)}
