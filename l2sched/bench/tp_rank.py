"""One rank of ``l2sched bench tp`` (see ``tp``): build the bench tree of its
modelled TP rank, compile every arm's plan for that TP rank, time the
standalone all-reduces, then per M every
arm (``none`` and ``compiled``; with ``--validation`` the validation set):
its plan installed on its own runtime, a checked eager forward, one CUDA
graph of the NCCL step; for ``none`` and ``compiled`` (``TIMED_ARMS``) also
the timed variant with in-graph events and the ``/spin`` variant. Then
interleaved lockstep replays of every graph (the same shuffled order on
every rank, from the shared seed; checked equal across ranks) and the timed
variants' per-op summary; the graphs of one M are released before the next.
Last, the all-reduce alone and with a concurrent fill of each fill kernel.
On the CPU (gloo, ``--dry``) replays are eager forwards on the dry-run
runtime and times are host wall times or the fake clock. Units: us, bytes.
torch is imported inside functions only.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from dataclasses import asdict
from typing import Any

from l2sched.bench import shipped_path
from l2sched.bench.isolation import SetAsideIsolation
from l2sched.bench.run import stats
from l2sched.bench.tp_allreduce import (
    CaptureFailed,
    all_ranks_ok,
    barrier,
    measure_allreduce,
    measure_allreduce_fill,
    replay_order,
    same_on_all_ranks,
)
from l2sched.bench.tp_step import CAPTURE_MODE, TPStepRunner, timed_runtime
from l2sched.bench.tree import build_tree
from l2sched.compiler.compile import compile_plan
from l2sched.lang.resolve import load_schedule
from l2sched.bench.step import STEP_ADAPTER
from l2sched.model.config import load_model_config
from l2sched.device import DeviceProfile, load_device
from l2sched.model.inventory import analytical_inventory
from l2sched.runtime.cuda import issue_specs
from l2sched.runtime.dry_run import DryRunRuntime
from l2sched.runtime.gate import StepInfo
from l2sched.runtime.kernel import cutlass_version
from l2sched.runtime.sites import install_plan

#: The arms measured without ``--validation``; they also get the timed
#: variant (per-op events) and, unless ``--no-spin-arms``, the ``/spin`` arm.
ARMS = ("none", "compiled")
TIMED_ARMS = ARMS


def rank_bench(rank: int, o: dict, ctl, checkpoint=None) -> dict:
    """Build, compile, install, measure; returns this rank's record.
    ``checkpoint(rec, pending)`` (every rank calls it at the same points:
    after each M, and before the collective-interference measurement,
    which runs last) saves what was measured so far."""
    import torch

    gpu = o["backend"] == "nccl"
    t0 = time.time()
    tp_rank = rank % o["tp"]
    cfg = load_model_config(None)
    inv = analytical_inventory(cfg, tp=o["tp"], ep=False, tp_rank=tp_rank)
    device_profile = load_device(o["device_profile"])
    arms = compile_arms(o["arms"], inv, tp_rank, device_profile)
    plan = next(a["plan"] for a in arms if a["name"] == "compiled")
    model = build_tree(inv, device="cuda" if gpu else "meta",
                       expert_pools=o["expert_pools"], seed=rank)
    runner = TPStepRunner(model, device_profile, rank=rank, world_size=o["world_size"],
                          tokens=o["tokens"][0])
    cyc = runner.calibrate_sleep()
    rec: dict[str, Any] = {
        "rank": rank, "tp_rank": tp_rank, "hidden": runner.hidden,
        "machine": _machine(torch, gpu, rank), "spin_cycles_per_us": cyc,
        "external_events": runner.external_events,
        "plan": {"issues": len(plan.issues), "bytes": sum(w.nbytes for w in plan.issues)},
        "plans": {a["name"]: {"issues": len(a["plan"].issues),
                              "bytes": sum(w.nbytes for w in a["plan"].issues),
                              "fill_kernels": a["fill_kernels"]}
                  for a in arms if a["plan"] is not None},
        "build_s": time.time() - t0}
    sizes = sorted({t * runner.hidden * 2 for t in o["tokens"] + o["ar_extra_tokens"]})
    rec["allreduce"] = measure_allreduce(runner, sizes, o["ar_iters"], ctl, device_profile,
                                         o["tp"])
    rec["per_m"] = {}
    for i, M in enumerate([] if o.get("collectives_only") else o["tokens"]):
        rec["per_m"][str(M)] = _one_m(runner, model, inv, arms, device_profile, M, o, ctl)
        _log(rank, f"M={M} done, {time.time() - t0:.0f}s")
        rec["total_s"] = time.time() - t0
        left = o["tokens"][i + 1:]
        if checkpoint is not None and (left or o["ar_fill_bytes"] > 0):
            checkpoint(rec, (f"M={','.join(map(str, left))}; " if left else "")
                       + "the all-reduce with fills")
    if o["ar_fill_bytes"] > 0:
        rec["allreduce_fill"] = measure_allreduce_fill(
            runner, device_profile, o["tokens"], o["ar_fill_bytes"], o["ar_iters"], ctl,
            seed=o["seed"], policy=plan.policy)
        _log(rank, f"all-reduce with fills done, {time.time() - t0:.0f}s")
    rec["total_s"] = time.time() - t0
    return rec


def compile_arms(specs: list[dict], inv, tp_rank: int,
                 device_profile: DeviceProfile) -> list[dict]:
    """Every arm of ``specs`` (``tp.arms``) with its plan compiled for
    ``tp_rank`` (``plan`` None for a no-prefetch arm) and the fill kernels
    its issues get from the device profile (``fill_kernels``, distinct
    modes in issue order: what ``timed_runtime`` launches)."""
    out = []
    for a in specs:
        plan = kernels = None
        if a["path"]:
            plan = compile_plan(load_schedule(shipped_path(a["path"]), a["overrides"]),
                                inv, tp_rank)
            kernels = list(dict.fromkeys(
                s.mode for s in issue_specs(plan, device_profile.fill_modes,
                                            device_profile.fill_default)))
        out.append({**a, "plan": plan, "fill_kernels": kernels})
    return out


def _log(rank: int, what: str) -> None:
    print(f"[bench tp rank {rank}] {what}", file=sys.stderr, flush=True)


def _machine(torch, gpu: bool, rank: int) -> dict:
    d = {"python": sys.version.split()[0], "torch": torch.__version__}
    # how many hardware queues CUDA spreads a graph's branches over (None: its default)
    d["cuda_device_max_connections"] = os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS")
    if gpu:
        p = torch.cuda.get_device_properties(rank)
        d.update(gpu=p.name, index=rank, sm=f"{p.major}.{p.minor}",
                 cuda=torch.version.cuda, l2_bytes=getattr(p, "L2_cache_size", None))
        try:
            v = torch.cuda.nccl.version()
            d["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except Exception:
            pass
        try:
            d["cutlass_dsl"] = cutlass_version()
        except Exception:
            pass
    return d


class _Timer:
    """CUDA events around a call (GPU) or host wall time (CPU); us."""

    def __init__(self, torch, gpu: bool):
        self.torch, self.gpu = torch, gpu

    def time(self, fn) -> float:
        """Call ``fn()``; its time, us."""
        if not self.gpu:
            t = time.perf_counter()
            fn()
            return (time.perf_counter() - t) * 1e6
        torch = self.torch
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        torch.cuda.synchronize()
        return e0.elapsed_time(e1) * 1000.0


def _one_m(runner: TPStepRunner, model, inv, arms: list[dict],
           device_profile: DeviceProfile, M: int, o: dict, ctl) -> dict:
    """All arms at ``M`` tokens on this rank (see the module docstring).
    Long function: one pass over the arms (install, check, capture,
    remove), the lockstep replays, then the summaries; split up, the
    graphs, runtimes and timed variants would travel between helpers."""
    torch = runner.torch
    gpu = runner.cuda
    runner.set_tokens(M)
    nbytes = M * runner.hidden * 2
    res: dict[str, Any] = {"allreduce_bytes": nbytes,
                           "allreduce_model_us": device_profile.allreduce_us(o["tp"], nbytes),
                           "arms": {}}
    steps: dict[str, Any] = {}   # arm -> zero-argument callable (a replay)
    timed: dict[str, Any] = {}
    keep: list = []              # (arm, runtime): alive while its graph is
    for arm in arms:
        name, plan = arm["name"], arm["plan"]
        rt = inst = None
        a: dict[str, Any] = {}
        if plan is not None:
            a["fill_kernels"] = arm["fill_kernels"]
            rt = (timed_runtime(plan, runner.device.index or 0, runner.external_events,
                                device_profile, **arm.get("runtime", {}))
                  if gpu else DryRunRuntime(plan))
            rt.set_step(StepInfo(num_tokens=M, graph_mode="full"))
            inst = install_plan(model.layers, inv, plan, rt)
            if gpu:
                rt.prepare()
        runner.runtime = rt
        try:
            a["allreduce_check"] = _checked_forward(runner, rt)
            if rt is not None and not gpu:
                a["issue_log"] = [asdict(e) for e in rt.events]
                rt.clear()
            if gpu:
                steps[name] = _capture(torch, runner).replay
                if name in TIMED_ARMS and runner.external_events:
                    try:
                        timed[name] = _capture_timed(torch, runner, rt, ctl)
                    except CaptureFailed as e:
                        a["timed_error"] = str(e)
                if name in TIMED_ARMS and not o["no_spin_arms"]:
                    runner.collective = "spin"
                    try:
                        runner.step()
                        steps[name + "/spin"] = _capture(torch, runner).replay
                    finally:
                        runner.collective = "dist"
            else:
                if name in TIMED_ARMS:
                    timed[name] = _eager_timed(runner)
                if rt is not None:
                    rt.clear()
        finally:
            if inst is not None:
                inst.remove()
            runner.runtime = None
        if not gpu:
            steps[name] = _eager_arm(runner, model, inv, plan, rt, a)
        keep.append((name, rt))
        res["arms"][name] = a
    # steps also holds "ARM/spin": the same plan's set-aside as ARM
    aside = {arm["name"]: arm["plan"].set_aside if arm["plan"] is not None else 0
             for arm in arms}
    isolation = SetAsideIsolation({k: aside.get(k, aside.get(k.removesuffix("/spin"), 0))
                                   for k in steps},
                                  device=(runner.device.index or 0) if gpu else 0,
                                  dry=not gpu)
    isolation.start(rt for _n, rt in keep)
    try:
        times, res["replay_order"] = _replays(steps, o, ctl, _Timer(torch, gpu), M,
                                              before=isolation.before)
        for k, v in times.items():
            a = res["arms"].setdefault(k, {})
            a["graph_step_us"] = stats(v)
            a["graph_step_us_all"] = v
        plans = {arm["name"]: arm["plan"] for arm in arms}
        for name, t in timed.items():
            isolation.before(name)
            res["arms"][name]["timed"] = _timed_summary(t, runner, plans[name],
                                                        o["timed_reps"], ctl, gpu)
    finally:
        isolation.close()
    res["set_aside_replays"] = isolation.record()
    for name, rt in keep:
        if rt is not None:
            res["arms"][name]["runtime_stats"] = {
                "issued": rt.stats.issued, "joined": rt.stats.joined,
                "bytes_issued": rt.stats.bytes_issued, "skipped": dict(rt.stats.skipped),
                "enabled": bool(rt.enabled)}
    # release this M's graphs (and the runtimes their fills read) before the next
    t = rt = inst = None
    del steps, timed, keep, t, rt, inst
    gc.collect()
    if gpu:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return res


def _checked_forward(runner: TPStepRunner, rt) -> dict:
    """One eager forward with every all-reduce's result checked (binds rows,
    warms kernels and NCCL): calls, checks passed, joins in this forward."""
    j0 = rt.stats.joined if rt is not None else 0
    n0 = runner.ar_calls
    runner.ar_buf.fill_(float(runner.rank + 1))
    runner.check, runner.ar_checks = True, []
    try:
        runner.step()
    finally:
        runner.check = False
    if runner.cuda:
        runner.torch.cuda.synchronize()
    return {"calls": runner.ar_calls - n0, "passed": sum(runner.ar_checks),
            "expected_sum": runner.world_size * (runner.world_size + 1) / 2,
            "joins": (rt.stats.joined - j0) if rt is not None else 0}


def _capture(torch, runner: TPStepRunner):
    """The whole step captured as one CUDA graph."""
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, capture_error_mode=CAPTURE_MODE):
        runner.step()
    torch.cuda.synchronize()
    return g


def _capture_timed(torch, runner: TPStepRunner, rt, ctl) -> dict:
    """The step captured with per-op (and per-fill) external events. Raises
    ``CaptureFailed`` (on every rank) when a rank's capture failed."""
    runner.timing = True
    if rt is not None:
        rt.timing, rt.fills = True, []
    err = ""
    try:
        g = _capture(torch, runner)
    except Exception as e:
        err = f"{type(e).__name__}: {e}"
        _log(runner.rank, f"timed capture failed: {err}")
    finally:
        runner.timing = False
        if rt is not None:
            rt.timing = False
    if not all_ranks_ok(ctl, not err):
        raise CaptureFailed(err or "another rank failed to capture")
    return {"replay": g.replay, "graph": g, "records": list(runner.records),
            "start": runner.start_event, "end": runner.end_event,
            "fills": list(rt.fills) if rt is not None else []}


def _eager_timed(runner: TPStepRunner) -> dict:
    """CPU: a timed eager forward (fake clock) for the timed summary."""
    runner.timing = True
    try:
        runner.step()
    finally:
        runner.timing = False
    return {"replay": runner.step, "records": list(runner.records),
            "start": runner.start_event, "end": runner.end_event, "fills": []}


def _eager_arm(runner: TPStepRunner, model, inv, plan, rt, a: dict):
    """CPU: a replay of an arm is an eager forward (the plan installed for
    it on the dry-run runtime); joins per forward go to ``a``."""
    a["joins_per_forward"] = []

    def forward():
        if rt is None:
            runner.step()
            return
        inst = install_plan(model.layers, inv, plan, rt)
        try:
            runner.step()
        finally:
            inst.remove()
        a["joins_per_forward"].append(sum(e.op == "join" for e in rt.events))
        rt.clear()
    return forward


def _replays(steps: dict, o: dict, ctl, timer: _Timer, M: int,
             before=None) -> tuple[dict, list]:
    """Replay every arm's step ``warmup + replays`` rounds, interleaved in
    the shuffled order of each round (``replay_order``: the same on every
    rank, from the shared ``--seed``; checked equal on every rank before the
    first replay), a barrier before each replay. Returns ``(times, order)``:
    arm -> us per timed round (round-indexed, the same rounds for every
    arm), and the order of every round, warm-up included. ``before``:
    called with the arm's name before each replay, ahead of the barrier
    (``SetAsideIsolation``)."""
    names = sorted(steps)
    rounds = [replay_order(names, o["seed"], M, r)
              for r in range(o["warmup"] + o["replays"])]
    if not same_on_all_ranks(ctl, rounds):
        raise RuntimeError(f"M={M}: the ranks' replay orders differ (arms "
                           f"{', '.join(names)})")
    times: dict[str, list[float]] = {k: [] for k in names}
    for r, order in enumerate(rounds):
        for k in order:
            if before is not None:
                before(k)
            barrier(ctl)
            dt = timer.time(steps[k])
            if r >= o["warmup"]:
                times[k].append(dt)
    return times, rounds


def _timed_summary(t: dict, runner: TPStepRunner, plan, reps: int, ctl,
                   gpu: bool) -> dict:
    """Replay the timed step ``reps`` times (lockstep) and summarize: step
    time, per-(layer kind, op) median duration, in-step all-reduce
    durations per op, expert-stream time, and per fill: fork, exit (fill
    kernel exit), the same layer's expert-stream start (start of its first
    expert-stream op) and the slack = expert start - fill exit (us from the
    step start; slack only when the experts start after the fork, as the
    lint's summary; negative = the fill overlapped the expert stream)."""
    inv = runner.inv
    cls = {}
    for i in range(len(inv.layers)):
        for op in STEP_ADAPTER.decode_timeline(inv.kinds[i]):
            cls[(i, op.name)] = op.cls
    samples: list[dict] = []
    for _ in range(max(1, reps if gpu else 1)):
        if gpu:
            barrier(ctl)
            t["replay"]()
            runner.torch.cuda.synchronize()
        st = t["start"]
        us = lambda e: st.elapsed_time(e) * 1000.0  # noqa: E731
        ops = {(lay, op): (us(e0), us(e1)) for lay, op, _s, e0, e1 in t["records"]}
        samples.append({"step": us(t["end"]), "ops": ops,
                        "fills": [(i, us(f), us(x)) for i, f, x in t["fills"]]})
    med = lambda xs: stats(xs)["median"]  # noqa: E731
    keys = samples[0]["ops"].keys()
    dur = {k: med([s["ops"][k][1] - s["ops"][k][0] for s in samples]) for k in keys}
    start = {k: med([s["ops"][k][0] for s in samples]) for k in keys}
    by_kind: dict[str, list[float]] = {}
    coll: dict[str, list[float]] = {}
    expert_us = 0.0
    expert_start: dict[int, float] = {}
    for (lay, op), d in dur.items():
        by_kind.setdefault(f"{inv.kinds[lay]}|{op}", []).append(d)
        c = cls.get((lay, op))
        if c == "collective":
            coll.setdefault(op, []).append(d)
        if c == "expert_stream":
            expert_us += d
            expert_start[lay] = min(expert_start.get(lay, 1e18), start[(lay, op)])
    fills = []
    for j, (i, _f, _x) in enumerate(samples[0]["fills"]):
        fork = med([s["fills"][j][1] for s in samples])
        exit_ = med([s["fills"][j][2] for s in samples])
        wi = plan.issues[i]
        es = expert_start.get(wi.layer)
        fills.append({"window": wi.window, "layer": wi.layer, "hook": wi.hook,
                      "bytes": wi.nbytes, "fork_us": fork, "exit_us": exit_,
                      "expert_start_us": es,
                      "slack_us": (es - exit_) if es is not None and es >= fork else None})
    return {"step_us": med([s["step"] for s in samples]),
            "op_us": {k: med(v) for k, v in sorted(by_kind.items())},
            "collective_us": {k: stats(v) for k, v in coll.items()},
            "expert_stream_us": expert_us, "fills": fills}
