"""H200 benchmarks of the L2 fill kernel, measured by effect.

    python3 lab/experiments/kernel_bench.py --out results.json [--quick]

Sections (each a key of the JSON):

* ``fill``: for 16/32/48/64 MB buffers, after an L2 flush (a 1 GiB *read*:
  a write flush leaves dirty lines whose write-back the next fill pays for,
  docs/sources.md#h200-early-probes), launch the fill, then a sleep of D us, then a
  dependent read (``torch.sum``) timed with CUDA events. The fill has landed
  at the smallest D whose read time is within 10% of the (cold - hot) gap of
  the hot read; the fill time is the measured time from the fill's launch to
  the end of that sleep, the fill bandwidth bytes / fill time (TB/s = 10^12
  B/s). The marginal bandwidth (slope between sizes) removes the kernel's
  fixed cost. The kernel's own launch-to-exit time is reported too: it exits
  when requests are issued, not when lines have landed.
* ``launch``: host cost per call (us, wall clock, median of batches) of the
  raw kernel launch and of ``CudaRuntime.issue`` (gate + fork + launch +
  record), for the TVM-FFI and the generic path; and the host and GPU time of
  a CUDA-graph replay with and without a captured fill.
* ``gemm``: an M=8 bf16 GEMM (``torch.mm``) over a 16.8 MB (and 33.6 MB)
  weight: cold after a flush, hot (repeated), and after a fill with each
  policy and sleeps of 0/10/20 us; outputs checked bitwise against cold.

Medians over ``--reps`` repetitions; spreads as (p10, p90).
"""

import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the checkout
from l2sched.compiler.plan import ByteRange, Plan, WindowIssue  # noqa: E402
from l2sched.runtime import kernel as K  # noqa: E402
from l2sched.runtime.cuda import CudaRuntime
from l2sched.bench.timing import TimingBench, dependent_read, stats  # noqa: E402
from l2sched.runtime.gate import StepInfo  # noqa: E402

MB = 10 ** 6


#: median, p10, p90 (and mean, n) of a list (the l2sched bench's own).
q = stats


class Bench(TimingBench):
    """``l2sched.bench.timing.TimingBench`` with this script's 400 us lead
    before each timed repetition (the 11-29 probes were measured with it)."""

    lead_us = 400

    def __init__(self, reps):
        super().__init__(torch, reps)
        self.stream = torch.cuda.current_stream()


def make_read(w, reverse=False):
    """A bandwidth-bound dependent read of all of ``w`` and its name:
    ``l2sched.bench.timing.dependent_read`` (a Triton kernel summing 16 KiB
    per program as int32; ``torch.sum``, not bandwidth-bound, without
    Triton)."""
    return dependent_read(torch, w, reverse)


def probe_setup(reps=20, extra=None):
    """Common start of the probe scripts: parse ``--out``/``--reps`` (plus
    ``extra(parser)``), make a ``Bench`` and return ``(args, bench, handle)``
    with the raw handle of the current CUDA stream."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=reps)
    if extra is not None:
        extra(ap)
    a = ap.parse_args()
    return a, Bench(a.reps), torch.cuda.current_stream().cuda_stream


def table_for(t, chunk_rows=1):
    """One row covering tensor ``t`` (bytes, 16-aligned)."""
    n = t.numel() * t.element_size() // 16 * 16
    return torch.tensor([[t.data_ptr(), n]], dtype=torch.int64, device="cuda")


def fill_profile(b, kern, size, delays, s_handle):
    w = torch.randn(size // 2, dtype=torch.bfloat16, device="cuda")
    tab = table_for(w)
    read, read_kind = make_read(w)
    read()

    # cold: flush, read; hot: read, read
    _, cold = b.timed(lambda: b.flush(), read)
    _, hot = b.timed(read, read)
    res = {"bytes": size, "read_kernel": read_kind, "cold_read_us": q(cold), "hot_read_us": q(hot), "delays": []}
    # kernel launch-to-exit (events around the fill alone, after a flush)
    _, exit_t = b.timed(lambda: b.flush(),
                        lambda: kern.launch(tab.data_ptr(), 0, 1, s_handle))
    res["kernel_launch_to_exit_us"] = q(exit_t)
    c, h = q(cold)["median"], q(hot)["median"]
    landed = None
    for d in delays:
        evs = []
        for _ in range(b.reps):
            e = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
            b.sleep(400)
            b.flush()
            e[0].record()
            kern.launch(tab.data_ptr(), 0, 1, s_handle)
            b.sleep(d)
            e[1].record()
            read()
            e[2].record()
            evs.append(e)
        torch.cuda.synchronize()
        pre = q([x[0].elapsed_time(x[1]) * 1e3 for x in evs])
        rd = q([x[1].elapsed_time(x[2]) * 1e3 for x in evs])
        res["delays"].append({"sleep_us": d, "fill_plus_sleep_us": pre, "read_us": rd})
        if landed is None and rd["median"] <= h + 0.1 * (c - h):
            landed = {"sleep_us": d, "fill_time_us": pre["median"],
                      "fill_TBps": size / (pre["median"] * 1e-6) / 1e12}
    res["landed"] = landed
    gap = c - h
    if gap > 0:
        recs = [(x["sleep_us"], (c - x["read_us"]["median"]) / gap,
                 x["fill_plus_sleep_us"]["median"]) for x in res["delays"]]
        best = max(r for _, r, _ in recs)
        first = next(x for x in recs if x[1] >= 0.9 * best)
        res["recovered_by_sleep"] = [[d, r] for d, r, _ in recs]
        res["plateau"] = {"recovered": best, "sleep_us": first[0],
                          "fill_plus_sleep_us": first[2]}
    del w
    return res


def bench_fill(b, kern, sizes, delays):
    s_handle = torch.cuda.current_stream().cuda_stream
    out = [fill_profile(b, kern, s, delays, s_handle) for s in sizes]
    pts = [(r["bytes"], r["landed"]["fill_time_us"]) for r in out if r["landed"]]
    marginal = None
    if len(pts) >= 2:
        (b0, t0), (b1, t1) = pts[0], pts[-1]
        if t1 > t0:
            marginal = (b1 - b0) / ((t1 - t0) * 1e-6) / 1e12
    return {"sizes": out, "marginal_TBps": marginal}


def host_cost(fn, n=400, batches=7):
    """Median host wall time per call (us) over ``batches`` batches of n."""
    per = []
    for _ in range(batches):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t1 = time.perf_counter()
        per.append((t1 - t0) / n * 1e6)
        torch.cuda.synchronize()
    return q(per)


def bench_launch(b):
    res = {}
    buf = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    tab = torch.tensor([[buf.data_ptr(), 16384]], dtype=torch.int64, device="cuda")
    side = torch.cuda.Stream()
    h = side.cuda_stream
    for name, ffi in (("tvm_ffi", True), ("generic", False)):
        kern = K.get_kernel(0, ffi=ffi)
        if kern is None:
            res[name] = None
            continue
        kern.launch(tab.data_ptr(), 0, 1, h)
        res[name] = {"kernel_launch_host_us": host_cost(
            lambda: kern.launch(tab.data_ptr(), 0, 1, h)), "compile_s": kern.compile_s}
    # full runtime.issue path (default path choice)
    plan = Plan(schedule="bench", model="toy", device="h200", tp=1, tp_rank=0, ep=False,
                policy="evict_last", max_tokens=256, set_aside=0, num_layers=1,
                issues=(WindowIssue("A", "x", 0, 1, (ByteRange(0, "w", 0, 16384),)),))
    rt = CudaRuntime(plan)
    rt.set_rows(0, [(buf.data_ptr(), 16384)])
    rt.set_step(StepInfo(num_tokens=1))

    def issue_join():
        rt.issue(0)
        rt.join()
    res["runtime_issue_plus_join_host_us"] = host_cost(issue_join)
    res["runtime_issue_only_host_us"] = host_cost(lambda: rt.issue(0))
    rt.join()
    res["runtime_path"] = "tvm_ffi" if rt.kernel.ffi else "generic"
    # graph replay with and without a captured fill
    x = torch.zeros(1024, device="cuda")
    graphs = {}
    for with_fill in (False, True):
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            x.add_(1)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            x.add_(1)
            if with_fill:
                rt.issue(0)
                rt.join()
            x.add_(1)
        g.replay()
        torch.cuda.synchronize()
        graphs[with_fill] = g
    for with_fill, g in graphs.items():
        key = "graph_with_fill" if with_fill else "graph_without_fill"
        host = host_cost(g.replay, n=200)
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        e0.record()
        for _ in range(200):
            g.replay()
        e1.record()
        torch.cuda.synchronize()
        res[key] = {"replay_host_us": host, "replay_gpu_us": e0.elapsed_time(e1) * 1e3 / 200}
    return res


def bench_gemm(b, sizes_n=(2048, 4096), k=4096, delays=(0, 5, 10, 20),
               modes=("bulk",)):
    res = []
    s_handle = torch.cuda.current_stream().cuda_stream
    for n in sizes_n:
        w = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
        x = torch.randn(8, k, dtype=torch.bfloat16, device="cuda")
        y = torch.empty(8, n, dtype=torch.bfloat16, device="cuda")
        tab = table_for(w)

        def mm():
            torch.mm(x, w.t(), out=y)
        mm()
        torch.cuda.synchronize()
        ref = y.clone()
        _, cold = b.timed(lambda: b.flush(), mm)
        _, hot = b.timed(mm, mm)
        row = {"weight_bytes": w.numel() * 2, "shape": [8, k, n], "cold_us": q(cold),
               "hot_us": q(hot), "after_fill": {}}
        for mode in modes:
            for pol in ("evict_last", "evict_normal", "evict_first"):
                kern = K.get_kernel(0, policy=pol, mode=mode)
                if kern is None:
                    continue
                for d in delays:
                    _, t = b.timed(lambda: (b.flush(),
                                            kern.launch(tab.data_ptr(), 0, 1, s_handle),
                                            b.sleep(d)), mm)
                    tag = "" if mode == "bulk" else f"{mode}_"
                    row["after_fill"][f"{tag}{pol}_sleep{d}us"] = q(t)
        torch.cuda.synchronize()
        row["bitwise_equal_to_cold"] = bool(torch.equal(y, ref))
        res.append(row)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--grid", type=int, default=K.DEFAULT_GRID)
    ap.add_argument("--threads", type=int, default=K.DEFAULT_THREADS)
    ap.add_argument("--chunk", type=int, default=K.DEFAULT_CHUNK)
    ap.add_argument("--skip", default="", help="comma list of sections to skip")
    ap.add_argument("--modes", default="bulk,load",
                    help="kernel modes for fill and gemm (bulk, line, load)")
    a = ap.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    props = torch.cuda.get_device_properties(0)
    out = {"device": props.name, "sm": f"{props.major}.{props.minor}",
           "sms": props.multi_processor_count, "l2_bytes": getattr(props, "L2_cache_size", None),
           "torch": torch.__version__, "cutlass_dsl": K.cutlass_version(),
           "kernel": {"grid": a.grid, "threads": a.threads, "chunk": a.chunk},
           "reps": a.reps, "argv": sys.argv}
    try:
        import tvm_ffi
        out["tvm_ffi"] = getattr(tvm_ffi, "__version__", "present")
    except Exception:
        out["tvm_ffi"] = None
    b = Bench(a.reps)
    kern = K.get_kernel(0, grid=a.grid, threads=a.threads, chunk=a.chunk)
    if kern is None:
        out["error"] = K.disabled_reason()
        json.dump(out, open(a.out, "w"), indent=1)
        print(out)
        return 1
    out["kernel"]["ffi"] = kern.ffi
    out["kernel"]["compile_s"] = kern.compile_s
    modes = a.modes.split(",")
    if "fill" not in skip:
        out["fill"] = bench_fill(b, kern, [16 * MB, 32 * MB, 48 * MB, 64 * MB],
                                 [0, 2, 4, 6, 8, 10, 12, 14, 16, 20, 24, 30, 40])
        for mode in modes:
            if mode != "bulk":
                km = K.get_kernel(0, grid=a.grid, threads=a.threads, chunk=a.chunk,
                                  mode=mode)
                out[f"fill_{mode}"] = bench_fill(b, km, [16 * MB, 32 * MB, 48 * MB, 64 * MB],
                                                 [0, 5, 10, 20])
        json.dump(out, open(a.out, "w"), indent=1)
    if "gemm" not in skip:
        out["gemm"] = bench_gemm(b, modes=modes)
        json.dump(out, open(a.out, "w"), indent=1)
    if "launch" not in skip:
        out["launch"] = bench_launch(b)
    json.dump(out, open(a.out, "w"), indent=1)
    # short table last
    for key in [k for k in out if k.startswith("fill")]:
        for r in out[key]["sizes"]:
            print(f"{key} {r['bytes']/MB:5.1f} MB: cold read {r['cold_read_us']['median']:.2f} us"
                  f" hot {r['hot_read_us']['median']:.2f} us exit "
                  f"{r['kernel_launch_to_exit_us']['median']:.2f} us landed {r['landed']}"
                  f" plateau {r.get('plateau')}")
    for r in out.get("gemm", []):
        af = r["after_fill"]
        print(f"gemm {r['weight_bytes']/MB:.1f} MB: cold {r['cold_us']['median']:.2f} hot "
              f"{r['hot_us']['median']:.2f} " + " ".join(
                  f"{k}={v['median']:.2f}" for k, v in af.items()) +
              f" bitwise={r['bitwise_equal_to_cold']}")
    if "launch" in out:
        print(json.dumps(out["launch"], indent=None)[:1500])
    return 0


if __name__ == "__main__":
    sys.exit(main())
