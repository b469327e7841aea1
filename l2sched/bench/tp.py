"""``l2sched bench tp``: the GLM-5.3-Flash-shaped decode step with real all-reduces.

One process per rank, started by ``torch.multiprocessing.spawn`` from the CLI
(not by ``torchrun``): ``l2sched bench tp --world-size N --out FILE``.
Rendezvous through a file store in a temporary directory; backend ``nccl``
(one GPU per rank, ``cuda:RANK``) or ``gloo`` (CPU; with ``--dry`` the tree
lives on the meta device and the runtime is ``DryRunRuntime``, the path CI
runs). Before ``init_process_group`` every rank sets ``MULTICAST_OFF``
(NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1); nothing here creates multicast objects.

Each rank builds the bench tree (``tree.build_tree``) of TP rank
``rank % tp`` of the *modelled* TP (``--tp``, default 4: the per-GPU shapes of
TP4, as the single-GPU bench), compiles its own plan for that TP rank,
installs it with the vLLM plugin's installer on its own runtime and side
stream, and runs ``TPStepRunner`` (a ``StepRunner`` whose ``collective`` ops
are ``torch.distributed.all_reduce`` of an ``(M, hidden)`` bf16 buffer, the
real message, across ``world_size`` processes). So with 2 GPUs the weights
are TP4's and the all-reduces are 2-way: the JSON records both
``world_size`` and ``tp``.

Per M (GPU), per arm (``none``; ``compiled``): one checked eager forward
(every all-reduce's result is compared with the sum over ranks), then CUDA
graphs of the whole step: the NCCL step, the same step with per-op timing
events inside the graph (``torch.cuda.Event(external=True)``; skipped when
torch lacks it) and, unless ``--no-spin-arms``, the step with the single-GPU
bench's idle-interval all-reduces (``<arm>/spin``: a spin kernel of
``DeviceProfile.allreduce_us(tp, bytes)``). All step graphs of one M replay
interleaved (same shuffled order on every rank), a barrier (gloo group)
before every timed replay, CUDA events around ``graph.replay()``.
Standalone all-reduces (message sizes of ``--tokens`` and
``--ar-extra-tokens``) are timed per call, eager and inside a captured
graph. Rank 0 gathers every rank's record and writes one JSON.

Units: us, bytes. torch is imported inside functions only.
"""

from __future__ import annotations

import datetime
import json
import os
import random
import sys
import tempfile
import time
import traceback
from dataclasses import asdict
from typing import Any

from l2sched.bench import shipped_path
from l2sched.bench.run import stats
from l2sched.bench.step import FakeEvent, StepRunner
from l2sched.bench.tree import build_tree
from l2sched.compiler.compile import compile_plan
from l2sched.files import write_text_atomically
from l2sched.lang.resolve import load_schedule
from l2sched.model.adapters import glm5next as ad
from l2sched.model.config import load_model_config
from l2sched.model.devices import load_device
from l2sched.model.inventory import analytical_inventory
from l2sched.runtime.cuda import CudaRuntime
from l2sched.runtime.dry_run import DryRunRuntime
from l2sched.runtime.gate import StepInfo
from l2sched.runtime.kernel import cutlass_version
from l2sched.runtime.streams import side_stream
from l2sched.vllm.sites import install_plan

#: Environment every rank sets before ``init_process_group``: no NVLink
#: multicast (NVLS) in NCCL, torch symmetric memory or NVSHMEM.
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                 "NVSHMEM_DISABLE_NVLS": "1"}

TP_NOTE = ("all-reduces are real torch.distributed all-reduces of (M, hidden) "
           "bf16 across world_size processes; weights, plan and inventory are the "
           "modelled TP's per-GPU shapes (tp). '<arm>/spin' arms replace the "
           "all-reduces with the single-GPU bench's idle intervals (spin kernels "
           "of the device profile's collective model at tp)")

ARMS = ("none", "compiled")

#: ``torch.cuda.graph`` capture mode: ``thread_local``, so the NCCL
#: watchdog thread's event queries cannot invalidate a capture.
CAPTURE_MODE = "thread_local"


def options(args) -> dict:
    """The resolved options (a plain dict, sent to every rank). Raises
    ``ValueError`` for an unusable combination (nccl with --dry, fewer than 2
    ranks, more ranks than GPUs, a world size above the modelled TP)."""
    o = {k: getattr(args, k) for k in (
        "world_size", "backend", "dry", "out", "tokens", "replays", "warmup",
        "timed_reps", "ar_iters", "ar_extra_tokens", "tp", "schedule",
        "overrides", "device_profile", "expert_pools", "no_spin_arms")}
    import torch
    cuda = torch.cuda.is_available()
    if o["backend"] is None:
        o["backend"] = "nccl" if cuda and not o["dry"] else "gloo"
    if o["dry"] and o["backend"] == "nccl":
        raise ValueError("--dry runs on the CPU: use --backend gloo")
    if o["backend"] == "gloo" and not o["dry"]:
        raise ValueError("the gloo backend runs the CPU dry path only: add --dry")
    if not o["world_size"]:
        o["world_size"] = torch.cuda.device_count() if o["backend"] == "nccl" else 2
    ws = o["world_size"]
    if ws < 2:
        raise ValueError(f"--world-size must be >= 2, got {ws}")
    if o["backend"] == "nccl" and ws > torch.cuda.device_count():
        raise ValueError(f"--world-size {ws} but {torch.cuda.device_count()} GPU(s) visible")
    if ws > o["tp"]:
        raise ValueError(f"--world-size {ws} above the modelled --tp {o['tp']}")
    if not o["tokens"]:
        raise ValueError("--tokens is empty")
    # fail here, once, rather than in every spawned rank
    o["schedule"] = shipped_path(o["schedule"])
    load_schedule(o["schedule"], o["overrides"])  # raises L2sError
    load_device(o["device_profile"])
    analytical_inventory(load_model_config(None), tp=o["tp"], ep=False)
    return o


def run_tp(args) -> dict:
    """Spawn ``world_size`` ranks, run the benchmark, return rank 0's result
    dict (also written to ``args.out`` when given). Raises ``ValueError`` for
    bad options and ``torch.multiprocessing.ProcessRaisedException`` when a
    rank fails (the other ranks are terminated)."""
    import torch.multiprocessing as mp
    o = options(args)
    os.environ.update(MULTICAST_OFF)
    with tempfile.TemporaryDirectory(prefix="l2sched-tp-") as tmp:
        out = o["out"] or os.path.join(tmp, "result.json")
        o["out_path"] = out
        o["argv"] = list(sys.argv)
        mp.spawn(_worker, args=(o, os.path.join(tmp, "rendezvous")),
                 nprocs=o["world_size"], join=True)
        with open(out) as f:
            return json.load(f)


def _worker(rank: int, o: dict, store: str) -> None:
    """One rank: init, benchmark, gather to rank 0, write."""
    os.environ.update(MULTICAST_OFF)
    import torch
    import torch.distributed as dist
    gpu = o["backend"] == "nccl"
    kw = {}
    if gpu:
        torch.cuda.set_device(rank)
        kw["device_id"] = torch.device("cuda", rank)
    t0 = time.time()
    dist.init_process_group(o["backend"], init_method=f"file://{store}", rank=rank,
                            world_size=o["world_size"],
                            timeout=datetime.timedelta(minutes=10), **kw)
    try:
        ctl = dist.new_group(backend="gloo") if gpu else None
        rec = _rank_bench(rank, o, ctl)
        got = [None] * o["world_size"] if rank == 0 else None
        dist.gather_object(rec, got, dst=0, group=ctl)
        if rank == 0:
            _write(o["out_path"], _result(o, got, time.time() - t0))
        dist.barrier(group=ctl)
    except BaseException:
        # a failed rank must not wait in destroy_process_group for peers
        # that wait in a collective for it (seen on 2 H200s): print, exit
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    dist.destroy_process_group()


def _result(o: dict, ranks: list, total_s: float) -> dict:
    return {"kind": "l2sched bench tp", "note": TP_NOTE,
            "date": datetime.date.today().isoformat(), "argv": o["argv"],
            "world_size": o["world_size"], "tp": o["tp"], "backend": o["backend"],
            "dry": o["dry"], "multicast_env": dict(MULTICAST_OFF),
            "schedule": o["schedule"], "overrides": o["overrides"],
            "device_profile": o["device_profile"], "tokens": o["tokens"],
            "replays": o["replays"], "warmup": o["warmup"],
            "timed_reps": o["timed_reps"], "hidden": ranks[0]["hidden"],
            "ranks": ranks, "total_s": total_s}


def _write(path: str, out: dict) -> None:
    write_text_atomically(path, json.dumps(out, indent=1, default=str))


# ---------------------------------------------------------------------------
# the step with real all-reduces


class TPStepRunner(StepRunner):
    """``StepRunner`` whose ``collective`` ops are
    ``torch.distributed.all_reduce`` (sum) of an ``(M, hidden)`` bf16 buffer
    (``M * hidden * 2`` bytes, on the model's GPU, or on the CPU for a
    meta-device tree) across the default process group.

    ``collective``: ``"dist"`` (default) or ``"spin"`` (the base class's idle
    interval). ``check``: after every all-reduce, compare the whole buffer with
    ``sum(r + 1 for r in ranks)`` (every rank fills it with ``rank + 1``),
    append the verdict to ``ar_checks`` and refill (eager forwards only: it
    synchronizes). ``ar_calls`` counts all-reduces. With ``timing`` on a GPU,
    events are ``external`` while capturing (timing inside a CUDA graph), and
    side-stream events of the base class are not recorded (fill exits come
    from ``TimedCudaRuntime``)."""

    def __init__(self, model, profile, *, rank: int, world_size: int,
                 tokens: int = 1, seed: int = 0):
        import torch.distributed as dist
        self.dist = dist
        self.rank, self.world_size = rank, world_size
        self.collective = "dist"
        self.check = False
        self.ar_calls = 0
        self.ar_checks: list[bool] = []
        self.runtime = None
        super().__init__(model, profile, tokens=tokens, seed=seed)
        self._external = _external_events(self.torch) if self.cuda else False
        self._side = None
        if self.cuda:
            self._side = side_stream(self.device.index or 0)

    def set_tokens(self, tokens: int) -> None:
        """Set M (see ``StepRunner.set_tokens``) and the all-reduce buffer."""
        super().set_tokens(tokens)
        torch = self.torch
        dev = self.device if self.cuda else "cpu"
        self.ar_buf = torch.full((tokens, self.hidden), float(self.rank + 1),
                                 dtype=torch.bfloat16, device=dev)

    def _body(self, lay, op) -> None:
        if op.cls != "collective" or self.collective == "spin":
            return super()._body(lay, op)
        self.dist.all_reduce(self.ar_buf)
        self.ar_calls += 1
        if self.check:
            want = self.world_size * (self.world_size + 1) / 2
            self.ar_checks.append(bool((self.ar_buf.float() == want).all()))
            self.ar_buf.fill_(float(self.rank + 1))

    def event(self, stream=None):
        """A timing event on ``stream``; ``external`` during a capture."""
        if not self.cuda:
            return super().event(stream)
        if stream is not None and stream is self._side:
            return FakeEvent(0.0)   # not recorded: see TimedCudaRuntime
        return _record(self.torch, stream, self._external)

    def _mark_fills(self, layer, op) -> None:
        """No side-stream events from the base class (fill exits come from
        ``timed_runtime``; an event on a side stream that was not forked in
        a capture cannot be recorded there)."""

    def step(self, lead_us: float = 0.0) -> None:
        """One decode step; in a timed GPU step the current stream finally
        waits for the side stream (fill-exit events follow the runtime's
        join point, and a capture must not end forked)."""
        rt = self.runtime
        n0 = rt.stats.issued if rt is not None else 0
        super().step(lead_us)
        if (self.timing and self.cuda and rt is not None
                and rt.stats.issued > n0):
            self.torch.cuda.current_stream().wait_stream(self._side)


def _external_events(torch) -> bool:
    """Whether ``torch.cuda.Event(enable_timing=True, external=True)`` exists
    (timing events inside CUDA graphs; torch >= 2.7)."""
    try:
        torch.cuda.Event(enable_timing=True, external=True)
    except TypeError:
        return False
    return True


def _record(torch, stream=None, external: bool = False):
    """Record a timing event on ``stream`` (default: current); ``external``
    when capturing and supported, so it can be timed after replays."""
    ext = external and torch.cuda.is_current_stream_capturing()
    e = (torch.cuda.Event(enable_timing=True, external=True) if ext
         else torch.cuda.Event(enable_timing=True))
    e.record(stream) if stream is not None else e.record()
    return e


def timed_runtime(plan, device: int, external: bool):
    """A ``CudaRuntime`` for ``plan`` on ``device`` that, while ``timing`` is
    set, records an event on the current stream before each fork and one on
    the side stream after each fill launch: ``fills`` =
    ``[(issue index, fork event, exit event)]``. The exit event's time is
    the fill kernel's exit, not the landing of its lines (bulk mode)."""

    class TimedCudaRuntime(CudaRuntime):
        timing = False
        fills: list = []

        def issue(self, index):
            if not self.timing:
                return super().issue(index)
            import torch
            fork = _record(torch, None, external)
            ok = super().issue(index)
            if ok:
                i = index if isinstance(index, int) else self.index_of(index)
                side = side_stream(self.device)
                self.fills.append((i, fork, _record(torch, side, external)))
            return ok

    rt = TimedCudaRuntime(plan, device=device)
    rt.fills = []
    return rt


# ---------------------------------------------------------------------------
# one rank


def _rank_bench(rank: int, o: dict, ctl) -> dict:
    """Build, compile, install, measure; returns this rank's record."""
    import torch


    gpu = o["backend"] == "nccl"
    t0 = time.time()
    tp_rank = rank % o["tp"]
    cfg = load_model_config(None)
    inv = analytical_inventory(cfg, tp=o["tp"], ep=False, tp_rank=tp_rank)
    prof = load_device(o["device_profile"])
    plan = compile_plan(load_schedule(o["schedule"], o["overrides"]), inv, tp_rank)
    model = build_tree(inv, device="cuda" if gpu else "meta",
                       expert_pools=o["expert_pools"], seed=rank)
    runner = TPStepRunner(model, prof, rank=rank, world_size=o["world_size"],
                          tokens=o["tokens"][0])
    cyc = runner.calibrate_sleep()
    rec: dict[str, Any] = {
        "rank": rank, "tp_rank": tp_rank, "hidden": runner.hidden,
        "machine": _machine(torch, gpu, rank), "spin_cycles_per_us": cyc,
        "external_events": runner._external,
        "plan": {"issues": len(plan.issues), "bytes": sum(w.nbytes for w in plan.issues)},
        "build_s": time.time() - t0}
    sizes = sorted({t * runner.hidden * 2 for t in o["tokens"] + o["ar_extra_tokens"]})
    rec["allreduce"] = measure_allreduce(runner, sizes, o["ar_iters"], ctl, prof, o["tp"])
    rec["per_m"] = {}
    for M in o["tokens"]:
        rec["per_m"][str(M)] = _one_m(runner, model, inv, plan, prof, M, o, ctl)
        _log(rank, f"M={M} done, {time.time() - t0:.0f}s")
    rec["total_s"] = time.time() - t0
    return rec


def _log(rank: int, what: str) -> None:
    print(f"[bench tp rank {rank}] {what}", file=sys.stderr, flush=True)


def _machine(torch, gpu: bool, rank: int) -> dict:
    d = {"python": sys.version.split()[0], "torch": torch.__version__}
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


def _barrier(ctl) -> None:
    import torch.distributed as dist
    dist.barrier(group=ctl)


class _Timer:
    """CUDA events around a call (GPU) or host wall time (CPU); us."""

    def __init__(self, torch, gpu: bool):
        self.torch, self.gpu = torch, gpu

    def time(self, fn) -> float:
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


def measure_allreduce(runner: TPStepRunner, sizes: list[int], iters: int, ctl,
                      profile, tp: int) -> list[dict]:
    """Standalone all-reduce (sum, bf16) times per message size (bytes):
    ``eager_us`` (CUDA events around each of ``iters`` calls enqueued behind
    a spin kernel, so host launches do not show; host wall time per call on
    the CPU) and ``graph_us`` (the same calls captured in one CUDA graph with
    external events between them, 3 replays; GPU only), each ``stats`` over
    calls. ``model_us``: the device profile's collective model at the
    modelled ``tp`` (the single-GPU bench's idle interval);
    ``model_ws_us``: at the world size."""
    torch, dist = runner.torch, runner.dist
    gpu = runner.cuda
    dev = runner.device if gpu else "cpu"
    out = []
    for nbytes in sizes:
        buf = torch.zeros(nbytes // 2, dtype=torch.bfloat16, device=dev)
        for _ in range(3):
            dist.all_reduce(buf)
        row = {"bytes": nbytes, "tokens": nbytes // (2 * runner.hidden),
               "model_us": profile.allreduce_us(tp, nbytes),
               "model_ws_us": profile.allreduce_us(runner.world_size, nbytes)}
        _barrier(ctl)
        if gpu:
            torch.cuda.synchronize()
            _barrier(ctl)
            runner.spin(3000 + 60 * iters)
            ev = []
            for _ in range(iters):
                e0 = _record(torch)
                dist.all_reduce(buf)
                ev.append((e0, _record(torch)))
            torch.cuda.synchronize()
            row["eager_us"] = stats([a.elapsed_time(b) * 1000.0 for a, b in ev])
            if runner._external:
                try:
                    got = _graph_allreduce(torch, dist, buf, iters, ctl)
                except _CaptureFailed as e:
                    got = None
                    row["graph_error"] = str(e)
                if got is not None:
                    row["graph_us"] = got
        else:
            ts = []
            for _ in range(iters):
                t = time.perf_counter()
                dist.all_reduce(buf)
                ts.append((time.perf_counter() - t) * 1e6)
            row["eager_us"] = stats(ts)
        out.append(row)
        del buf
    return out


def _graph_allreduce(torch, dist, buf, iters: int, ctl) -> dict | None:
    """Capture ``iters`` all-reduces with external events between them;
    replay 3 times in lockstep. ``None`` when any rank failed to capture."""
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    ev = []
    try:
        with torch.cuda.graph(g, capture_error_mode=CAPTURE_MODE):
            for _ in range(iters):
                e0 = _record(torch, None, True)
                dist.all_reduce(buf)
                ev.append((e0, _record(torch, None, True)))
        torch.cuda.synchronize()
        err = ""
    except Exception as e:
        err = f"{type(e).__name__}: {e}"
    if not all_ranks_ok(ctl, not err):
        raise _CaptureFailed(err or "another rank failed to capture")
    ts = []
    for _ in range(3):
        _barrier(ctl)
        g.replay()
        torch.cuda.synchronize()
        ts += [a.elapsed_time(b) * 1000.0 for a, b in ev]
    del g
    return stats(ts)


class _CaptureFailed(RuntimeError):
    """An optional capture (timed step, graph all-reduces) failed on some
    rank; every rank skips it."""


def all_ranks_ok(ctl, ok: bool) -> bool:
    """Whether ``ok`` holds on every rank (a gloo all-gather: a rank whose
    optional capture failed must not leave the others replaying NCCL
    kernels alone)."""
    import torch.distributed as dist
    got = [None] * dist.get_world_size(group=ctl)
    dist.all_gather_object(got, bool(ok), group=ctl)
    return all(got)


def _one_m(runner: TPStepRunner, model, inv, plan, prof, M: int, o: dict, ctl) -> dict:
    """All arms at ``M`` tokens on this rank (see the module docstring)."""
    torch = runner.torch
    gpu = runner.cuda
    runner.set_tokens(M)
    nbytes = M * runner.hidden * 2
    res: dict[str, Any] = {"allreduce_bytes": nbytes,
                           "allreduce_model_us": prof.allreduce_us(o["tp"], nbytes),
                           "arms": {}}
    steps: dict[str, Any] = {}   # arm -> zero-argument callable (a replay)
    timed: dict[str, Any] = {}
    keep = []
    for arm in ARMS:
        rt = inst = None
        a: dict[str, Any] = {}
        if arm == "compiled":
            rt = (timed_runtime(plan, runner.device.index or 0, runner._external)
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
                steps[arm] = _capture(torch, runner).replay
                if runner._external:
                    try:
                        timed[arm] = _capture_timed(torch, runner, rt, ctl)
                    except _CaptureFailed as e:
                        a["timed_error"] = str(e)
                if not o["no_spin_arms"]:
                    runner.collective = "spin"
                    try:
                        runner.step()
                        steps[arm + "/spin"] = _capture(torch, runner).replay
                    finally:
                        runner.collective = "dist"
            else:
                timed[arm] = _eager_timed(runner)
                if rt is not None:
                    rt.clear()
        finally:
            if inst is not None:
                inst.remove()
            runner.runtime = None
        if not gpu:
            steps[arm] = _eager_arm(runner, model, inv, plan, rt, a)
        keep.append(rt)
        res["arms"][arm] = a
    times = _replays(steps, o, ctl, _Timer(torch, gpu))
    for k, v in times.items():
        a = res["arms"].setdefault(k, {})
        a["step_us"] = stats(v)
        a["step_us_all"] = v
    for arm, t in timed.items():
        res["arms"][arm]["timed"] = _timed_summary(t, runner, plan, o["timed_reps"],
                                                   ctl, gpu)
    for arm, rt in zip(ARMS, keep):
        if rt is not None:
            res["arms"][arm]["runtime_stats"] = {
                "issued": rt.stats.issued, "joined": rt.stats.joined,
                "bytes_issued": rt.stats.bytes_issued, "skipped": dict(rt.stats.skipped),
                "enabled": bool(rt.enabled)}
    del steps, timed
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
    ``_CaptureFailed`` (on every rank) when a rank's capture failed."""
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
        raise _CaptureFailed(err or "another rank failed to capture")
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


def _replays(steps: dict, o: dict, ctl, timer: _Timer) -> dict:
    """Replay every arm's step ``warmup + replays`` rounds, interleaved in a
    shuffled order that is the same on every rank (seeded by the round), a
    barrier before each timed replay. Returns arm -> us per timed replay."""
    names = sorted(steps)
    times: dict[str, list[float]] = {k: [] for k in names}
    for r in range(o["warmup"] + o["replays"]):
        order = names[:]
        random.Random(r).shuffle(order)
        for k in order:
            _barrier(ctl)
            dt = timer.time(steps[k])
            if r >= o["warmup"]:
                times[k].append(dt)
    return times


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
        for op in ad.decode_timeline(inv.kinds[i]):
            cls[(i, op.name)] = op.cls
    samples: list[dict] = []
    for _ in range(max(1, reps if gpu else 1)):
        if gpu:
            _barrier(ctl)
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
