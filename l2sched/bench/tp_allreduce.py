"""The ranks' lockstep in ``l2sched bench tp`` (a barrier, an all-ranks-ok
vote and an all-ranks-equal check on the gloo control group, the replay
order every rank derives from the shared seed, ``CaptureFailed`` when an
optional capture failed on some rank), the standalone all-reduce
measurement (``measure_allreduce``: eager and CUDA-graph-captured, per
message size) and the collective interference (``measure_allreduce_fill``:
the all-reduce with a concurrent fill of each fill kernel vs alone).
Units: us, bytes. torch is imported inside functions only.
"""

from __future__ import annotations

import random
import time

from l2sched.bench.run import stats
from l2sched.bench.tp_step import CAPTURE_MODE, TPStepRunner, record_event
from l2sched.runtime import kernel as K
from l2sched.runtime.streams import side_stream
from l2sched.device import DeviceProfile


def barrier(ctl) -> None:
    """A barrier of every rank on the group ``ctl`` (the gloo control group;
    None: the default group)."""
    import torch.distributed as dist
    dist.barrier(group=ctl)


class CaptureFailed(RuntimeError):
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


def same_on_all_ranks(ctl, value) -> bool:
    """Whether ``value`` (picklable) is equal on every rank (a gloo
    all-gather)."""
    import torch.distributed as dist
    got = [None] * dist.get_world_size(group=ctl)
    dist.all_gather_object(got, value, group=ctl)
    return all(g == got[0] for g in got)


def replay_order(names, seed: int, M: int, rnd: int) -> list[str]:
    """The order in which every rank replays ``names`` in round ``rnd`` at
    ``M`` tokens: the sorted names shuffled by a ``random.Random`` seeded
    with a string of ``seed``, ``M`` and ``rnd`` (string seeds are hashed
    with SHA-512, so the order does not depend on the process or
    ``PYTHONHASHSEED``: ranks given the same names and seed agree)."""
    order = sorted(names)
    random.Random(f"l2sched bench tp/{seed}/{M}/{rnd}").shuffle(order)
    return order


def measure_allreduce(runner: TPStepRunner, sizes: list[int], iters: int, ctl,
                      device_profile: DeviceProfile, tp: int) -> list[dict]:
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
               "model_us": device_profile.allreduce_us(tp, nbytes),
               "model_ws_us": device_profile.allreduce_us(runner.world_size, nbytes)}
        barrier(ctl)
        if gpu:
            torch.cuda.synchronize()
            barrier(ctl)
            runner.spin(3000 + 60 * iters)
            ev = []
            for _ in range(iters):
                e0 = record_event(torch)
                dist.all_reduce(buf)
                ev.append((e0, record_event(torch)))
            torch.cuda.synchronize()
            row["eager_us"] = stats([a.elapsed_time(b) * 1000.0 for a, b in ev])
            if runner.external_events:
                try:
                    got = _graph_allreduce(torch, dist, buf, iters, ctl)
                except CaptureFailed as e:
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
                e0 = record_event(torch, None, True)
                dist.all_reduce(buf)
                ev.append((e0, record_event(torch, None, True)))
        torch.cuda.synchronize()
        err = ""
    except Exception as e:
        err = f"{type(e).__name__}: {e}"
    if not all_ranks_ok(ctl, not err):
        raise CaptureFailed(err or "another rank failed to capture")
    ts = []
    for _ in range(3):
        barrier(ctl)
        g.replay()
        torch.cuda.synchronize()
        ts += [a.elapsed_time(b) * 1000.0 for a, b in ev]
    del g
    return stats(ts)


#: Untimed rounds before the timed ones in ``measure_allreduce_fill``.
FILL_WARM_ROUNDS = 2


def measure_allreduce_fill(runner: TPStepRunner, device_profile: DeviceProfile, tokens: list[int],
                           fill_bytes: int, iters: int, ctl, *, seed: int = 0,
                           policy: str = "evict_last") -> dict:
    """Collective interference: the all-reduce (sum, bf16) of an ``(M,
    hidden)`` message, per M of ``tokens``, alone and with a concurrent
    fill of ``fill_bytes`` bytes by each fill kernel of the device profile
    (``device_profile.fill_modes``: its mode and launch shape, cache ``policy``;
    compiled by ``runtime.kernel.get_kernel`` as the runtime does), forked
    onto the l2sched side stream right before the all-reduce, on every rank.

    GPU: per M one CUDA graph per variant (``alone`` and each mode): a small
    all-reduce that lines the ranks up, an external event, [fork, fill
    launch on the side stream], the all-reduce, an external event, [join].
    ``FILL_WARM_ROUNDS`` + ``iters`` rounds replay every variant once in the
    shared shuffled order (``replay_order``), each replay behind a barrier,
    a 256 MiB read (L2 flush) and a switch of the fill's source to the next
    of 8 buffers (so the fill reads device memory, as in the step); the
    time is the in-graph all-reduce (event to event). ``extra_us`` of a
    mode: stats of its per-round difference to ``alone`` (same round). On
    the CPU (``--dry``, gloo) there is no fill kernel: every variant is the
    bare eager all-reduce (host wall time), which keeps the lockstep and
    the result's shape. Returns ``{fill_bytes, iters, policy, modes: {mode:
    {grid, threads, chunk, stages[, error]}}, rows: [{tokens, bytes,
    alone_us, alone_us_all, modes: {mode: {with_fill_us, with_fill_us_all,
    extra_us, extra_us_all}}[, error]}]}``."""
    torch, dist = runner.torch, runner.dist
    gpu = runner.cuda
    dev = runner.device if gpu else "cpu"
    out: dict = {"fill_bytes": fill_bytes, "iters": iters, "policy": policy,
                 "modes": {m: {k: getattr(fm, k) for k in ("grid", "threads", "chunk",
                                                           "stages")}
                           for m, fm in sorted(device_profile.fill_modes.items())},
                 "rows": []}
    src = None
    if gpu and not runner.external_events:
        out["error"] = "this torch has no external CUDA events (in-graph timing)"
        return out
    if gpu:
        src = FillSource(torch, runner.device, fill_bytes)
        launches = _fill_launches(torch, runner, device_profile, policy, src, ctl, out)
    else:
        launches = {m: None for m in out["modes"]}
        out["dry_note"] = "CPU dry run: no fill kernel; every variant is the bare all-reduce"
    sync = torch.zeros(8, dtype=torch.bfloat16, device=dev)
    dist.all_reduce(sync)   # eagerly once before any capture of it
    for M in tokens:
        buf = torch.zeros(M * runner.hidden, dtype=torch.bfloat16, device=dev)
        for _ in range(3):
            dist.all_reduce(buf)
        row: dict = {"tokens": M, "bytes": M * runner.hidden * 2}
        if gpu:
            graphs, err = _capture_fill_graphs(torch, dist, buf, sync, launches)
            if not all_ranks_ok(ctl, not err):
                row["error"] = err or "another rank failed to capture"
                out["rows"].append(row)
                del graphs, buf
                continue
            run = _graph_runner(torch, graphs, src)
            names = list(graphs)
        else:
            names = ["alone"] + list(launches)
            run = _eager_runner(dist, buf)
        times = _lockstep_rounds(names, run, iters, seed, M, ctl)
        alone = times.pop("alone")
        row.update(alone_us=stats(alone), alone_us_all=alone, modes={})
        for m, ts in times.items():
            diffs = [w - a for w, a in zip(ts, alone)]
            row["modes"][m] = {"with_fill_us": stats(ts), "with_fill_us_all": ts,
                               "extra_us": stats(diffs), "extra_us_all": diffs}
        out["rows"].append(row)
        del buf
        if gpu:
            del graphs, run
            torch.cuda.synchronize()
    del src
    return out


def _lockstep_rounds(names: list[str], run, iters: int, seed: int, M: int,
                     ctl) -> dict[str, list[float]]:
    """``FILL_WARM_ROUNDS + iters`` rounds of ``run(name)`` over ``names``
    in the shared order (``replay_order``), a barrier before each; returns
    name -> the times (us) of the timed rounds, round-indexed."""
    times: dict[str, list[float]] = {k: [] for k in names}
    for r in range(FILL_WARM_ROUNDS + iters):
        for k in replay_order(names, seed, M, r):
            barrier(ctl)
            t = run(k)
            if r >= FILL_WARM_ROUNDS:
                times[k].append(t)
    return times


class FillSource:
    """The fill's source on the GPU: ``SLICES`` buffers of ``nbytes`` bytes
    (a one-row fill table, ``table``, points at one of them) and a 256 MiB
    buffer whose read flushes the L2. ``next()`` (before a replay, on the
    current stream): the table to the next buffer, then the flush."""

    SLICES = 8

    def __init__(self, torch, device, nbytes: int):
        self.torch = torch
        stride = (nbytes + 4095) // 4096 * 4096
        self.pool = torch.ones(stride * self.SLICES // 4, dtype=torch.int32, device=device)
        base, n = self.pool.data_ptr(), nbytes // 16 * 16
        self.rows = torch.tensor([[[base + i * stride, n]] for i in range(self.SLICES)],
                                 dtype=torch.int64, device=device)
        self.table = self.rows[0].clone()
        self.flush_buf = torch.ones(1 << 26, dtype=torch.float32, device=device)
        self.flush_out = torch.empty((), dtype=torch.float32, device=device)
        self.i = 0

    def next(self) -> None:
        self.i += 1
        self.table.copy_(self.rows[self.i % self.SLICES])
        self.torch.sum(self.flush_buf, dim=0, out=self.flush_out)


def _fill_launches(torch, runner, device_profile: DeviceProfile, policy: str, src: FillSource, ctl,
                   out: dict) -> dict:
    """mode -> a zero-argument launch of its fill (``src.table``, row 0, on
    the side stream), for the modes whose kernel compiled and launched
    (eagerly, once) on every rank; the others get an ``error`` in
    ``out["modes"]``. One vote per mode, in mode order, on every rank."""
    dev = runner.device.index or 0
    side = side_stream(dev)
    cur = torch.cuda.current_stream()
    launches = {}
    for mode in out["modes"]:
        fm = device_profile.fill_modes[mode]
        kern, err = None, ""
        try:
            spec = K.KernelSpec(mode=mode, grid=fm.grid, threads=fm.threads,
                                chunk=fm.chunk, stages=fm.stages, policy=policy)
            kern = K.get_kernel(dev, spec)
            if kern is None:
                err = K.disabled_reason() or f"{spec} did not compile (see the log)"
            else:
                kern = warm_fill(torch, kern, src, side, cur)
        except Exception as e:
            err = f"{type(e).__name__}: {e}"
        if not all_ranks_ok(ctl, not err):
            out["modes"][mode]["error"] = err or "failed on another rank"
            continue
        out["modes"][mode]["ffi"] = kern.ffi
        launches[mode] = (lambda k=kern: k.launch(src.table.data_ptr(), 0, 1,
                                                  side.cuda_stream))
    return launches


def warm_fill(torch, kern, src: FillSource, side, cur):
    """One eager fill on ``side`` (loads the module, checks the launch);
    the generic launch path when the TVM-FFI call raises. Returns the
    kernel that launched; raises when none does."""
    for attempt in (0, 1):
        side.wait_stream(cur)
        try:
            kern.launch(src.table.data_ptr(), 0, 1, side.cuda_stream)
        except Exception:
            new = K.fallback_to_generic(kern) if kern.ffi and attempt == 0 else None
            if new is None:
                raise
            kern = new
            continue
        finally:
            cur.wait_stream(side)
        torch.cuda.synchronize()
        return kern
    raise RuntimeError("unreachable")  # pragma: no cover


def _capture_fill_graphs(torch, dist, buf, sync, launches: dict):
    """``({variant: (graph, e0, e1)}, error)``: ``alone`` and one graph per
    fill mode (see ``measure_allreduce_fill``); error ``""`` when every
    capture succeeded."""
    graphs: dict = {}
    side = side_stream(buf.device.index or 0)
    try:
        for name, launch in [("alone", None)] + list(launches.items()):
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, capture_error_mode=CAPTURE_MODE):
                dist.all_reduce(sync)   # the ranks leave it together
                cur = torch.cuda.current_stream()
                e0 = record_event(torch, None, True)
                if launch is not None:
                    side.wait_stream(cur)
                    launch()
                dist.all_reduce(buf)
                e1 = record_event(torch, None, True)
                if launch is not None:
                    cur.wait_stream(side)
            graphs[name] = (g, e0, e1)
        torch.cuda.synchronize()
    except Exception as e:
        return graphs, f"{type(e).__name__}: {e}"
    return graphs, ""


def _graph_runner(torch, graphs: dict, src: FillSource):
    """``run(variant)``: next fill source + L2 flush, replay, the in-graph
    all-reduce time (us)."""
    def run(k: str) -> float:
        g, e0, e1 = graphs[k]
        src.next()
        g.replay()
        torch.cuda.synchronize()
        return e0.elapsed_time(e1) * 1000.0
    return run


def _eager_runner(dist, buf):
    """CPU: ``run(variant)`` = one eager all-reduce, host wall time (us)."""
    def run(k: str) -> float:
        t = time.perf_counter()
        dist.all_reduce(buf)
        return (time.perf_counter() - t) * 1e6
    return run
