"""The ranks' lockstep in ``l2sched bench tp`` (a barrier and an all-ranks-ok
vote on the gloo control group, ``CaptureFailed`` when an optional capture
failed on some rank) and the standalone all-reduce measurement
(``measure_allreduce``: eager and CUDA-graph-captured, per message size).
Units: us, bytes. torch is imported inside functions only.
"""

from __future__ import annotations

import time

from l2sched.bench.run import stats
from l2sched.bench.tp_step import CAPTURE_MODE, TPStepRunner, record_event


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
