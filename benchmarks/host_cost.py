"""Host cost per call of the prefetch path (issue #5: <= 5 us per eager
``issue()``, 0 inside a CUDA-graph replay). Needs a CUDA GPU with sm >= 9.0.

    python3 benchmarks/host_cost.py [--out host_cost.json] [--calls 500] [--batches 8]

Every row is host wall time per call in us (``time.perf_counter``): a batch
times ``--calls`` calls, the GPU is synchronised between batches (so its queue
never fills and blocks the host), and the row reports the median of the
batches with (p10, p90); ``n_calls`` is the total. Rows:

a. ``launch``: the driver floor (``cuLaunchKernel`` through ``cuda.bindings``
   of an empty kernel, no parameters), the fill kernel through the callable
   the runtime uses (``PrefetchKernel.bind``), ``PrefetchKernel.launch``, the
   DSL's own call (``compiled(...)``), and a one-element torch ``add_`` for
   scale; ``--generic`` adds the generic CuTe DSL path.
b. ``fork``: the current stream's work -> side stream only (record + wait):
   the runtime's ``driver`` and ``torch`` backends, and the public torch API
   (``torch.cuda.current_stream()``, ``Event.record``, ``Stream.wait_event``).
c. ``issue``: ``CudaRuntime.issue`` of a 1-row and a 64-row window, for each
   ``sync`` backend, and a gate skip (prefill step).
d. ``join``: one ``join()`` after one ``issue()`` (the join alone is timed,
   minus the timer's own cost), and a join with nothing pending.
e. ``graph``: ``issue()`` while capturing a FULL CUDA graph (per call), and
   the host time of a replay of a small graph with 0, 1 and 64 captured fills
   (each fill an ``issue()``, then one ``join()``); ``added_host_us`` is the
   replay's host time minus that of the graph without fills.
"""

import argparse
import json
import statistics
import sys
import time

import torch

sys.path.insert(0, ".")
from l2sched.compiler.plan import ByteRange, Plan, WindowIssue  # noqa: E402
from l2sched.runtime import kernel as K  # noqa: E402
from l2sched.runtime.cuda import CudaRuntime
from l2sched.runtime.gate import StepInfo  # noqa: E402

ROW = 16384  # bytes per table row in the benchmark windows


def stats(per_call_us, calls):
    """median, p10, p90 (us per call) of the batch values, total calls."""
    s = sorted(per_call_us)
    n = len(s)
    return {"median": statistics.median(s), "p10": s[int(0.1 * (n - 1))],
            "p90": s[int(0.9 * (n - 1))], "n_calls": n * calls}


def per_call(fn, calls, batches, setup=None):
    """Host us per ``fn()`` call: ``batches`` timed loops of ``calls`` calls,
    synchronised in between. ``setup()`` runs untimed before each batch."""
    out = []
    pc = time.perf_counter
    for _ in range(batches + 1):  # the first batch warms caches, dropped
        if setup is not None:
            setup()
        torch.cuda.synchronize()
        t0 = pc()
        for _ in range(calls):
            fn()
        out.append((pc() - t0) / calls * 1e6)
    torch.cuda.synchronize()
    return stats(out[1:], calls)


def timer_cost_us(n=20000):
    """Host us of one empty ``perf_counter`` pair (subtracted from rows timed
    call by call)."""
    pc = time.perf_counter
    acc = 0.0
    for _ in range(n):
        t0 = pc()
        acc += pc() - t0
    return acc / n * 1e6


def plan_for(rows_per_issue):
    """A one-layer plan whose issue ``j`` has ``rows_per_issue[j]`` ranges."""
    issues = tuple(WindowIssue(f"W{j}", "x", 0, n * ROW,
                               tuple(ByteRange(0, f"w{k}", 0, ROW) for k in range(n)))
                   for j, n in enumerate(rows_per_issue))
    return Plan(schedule="host-cost", model="toy", device="h200", tp=1, tp_rank=0,
                ep=False, policy="evict_last", max_tokens=256, set_aside=0,
                num_layers=1, issues=issues)


def runtime(sync, buf, rows_per_issue=(1, 64)):
    """A prepared ``CudaRuntime`` (``sync`` backend) with every issue bound
    to consecutive ``ROW``-byte rows of ``buf``; eager 1-token step."""
    rt = CudaRuntime(plan_for(rows_per_issue), sync=sync)
    base = buf.data_ptr()
    for j, n in enumerate(rows_per_issue):
        if not rt.set_rows(j, [(base + k * ROW, ROW) for k in range(n)]):
            raise RuntimeError(f"set_rows failed: {K.disabled_reason()}")
    rt.set_step(StepInfo(num_tokens=1))
    return rt


def driver_floor(side_handle, calls, batches):
    """``cuLaunchKernel`` of an empty PTX kernel (no parameters) through
    ``cuda.bindings``: what any Python launch costs at least here."""
    try:
        from cuda.bindings import driver as drv
        ok = drv.CUresult.CUDA_SUCCESS
        ptx = (b".version 7.8\n.target sm_90\n.address_size 64\n"
               b".visible .entry l2s_empty()\n{\n\tret;\n}\n\0")
        err, mod = drv.cuModuleLoadData(ptx)
        if err != ok:
            return {"error": f"cuModuleLoadData: {err}"}
        err, fn = drv.cuModuleGetFunction(mod, b"l2s_empty")
        if err != ok:
            return {"error": f"cuModuleGetFunction: {err}"}
        s = drv.CUstream(side_handle)
        launch = drv.cuLaunchKernel
        err, = launch(fn, 1, 1, 1, 32, 1, 1, 0, s, 0, 0)  # no params, no extra
        if err != ok:
            return {"error": f"cuLaunchKernel: {err}"}
        return per_call(lambda: launch(fn, 1, 1, 1, 32, 1, 1, 0, s, 0, 0),
                        calls, batches)
    except Exception as e:  # a reference row only: never stop the benchmark
        return {"error": f"{type(e).__name__}: {e}"}


def bench_launch(rt, a):
    kern, side = rt.kernel, rt.side.cuda_stream
    tab = rt.table.device_ptr
    res = {"path": "tvm_ffi" if kern.ffi else "generic",
           "driver_floor_cuLaunchKernel": driver_floor(side, a.calls, a.batches)}
    bound = kern.bind(tab, side)
    res["fill_bound"] = per_call(lambda: bound(0, 1), a.calls, a.batches)
    res["fill_PrefetchKernel_launch"] = per_call(
        lambda: kern.launch(tab, 0, 1, side), a.calls, a.batches)
    if kern.ffi:
        c = kern.compiled
        res["fill_dsl_call"] = per_call(lambda: c(tab, 0, 1, side), a.calls, a.batches)
    x = torch.zeros(1, device="cuda")
    res["torch_add_1_elem"] = per_call(lambda: x.add_(1), a.calls, a.batches)
    if a.generic:
        g = K.get_kernel(rt.device, ffi=False)
        if g is not None:
            gb = g.bind(tab, side)
            res["generic_bound"] = per_call(lambda: gb(0, 1), a.calls, a.batches)
            res["generic_PrefetchKernel_launch"] = per_call(
                lambda: g.launch(tab, 0, 1, side), a.calls, a.batches)
    return res


def bench_fork(rts, a):
    res = {}
    for sync, rt in rts.items():
        # eager: a fork needs no matching join, so it can be timed alone
        res[f"runtime_{sync}"] = per_call(rt.fork_join.fork, a.calls, a.batches)
    ev = torch.cuda.Event()
    side = rts["torch"].side

    def public():
        ev.record(torch.cuda.current_stream())
        side.wait_event(ev)
    res["torch_public_api"] = per_call(public, a.calls, a.batches)
    return res


def bench_issue(rts, a):
    res = {}
    for sync, rt in rts.items():
        for j, label in ((0, "1_row"), (1, "64_rows")):
            res[f"{sync}_{label}"] = per_call(lambda: rt.issue(j), a.calls, a.batches,
                                              setup=rt.join)
        rt.join()
    rt = rts["driver"]
    keep = rt.step
    rt.set_step(StepInfo(num_tokens=8, is_prefill=True))
    res["gate_skip_prefill"] = per_call(lambda: rt.issue(0), a.calls, a.batches)
    rt.set_step(keep)
    return res


def bench_join(rts, a):
    res = {}
    tc = timer_cost_us()
    pc = time.perf_counter
    for sync, rt in rts.items():
        vals = []
        for _ in range(a.batches + 1):
            torch.cuda.synchronize()
            acc = 0.0
            for _ in range(a.calls):
                rt.issue(0)
                t0 = pc()
                rt.join()
                acc += pc() - t0
            vals.append(acc / a.calls * 1e6 - tc)
        torch.cuda.synchronize()
        res[f"{sync}_after_issue"] = stats(vals[1:], a.calls)
        res[f"{sync}_nothing_pending"] = per_call(rt.join, a.calls, a.batches)
    res["timer_cost_subtracted_us"] = tc
    return res


def bench_graph(rt, a):
    res = {}
    x = torch.zeros(1024, device="cuda")
    rt.set_step(StepInfo(num_tokens=1, graph_mode="full"))
    # issue() while capturing: per call, batches of a.calls in one capture each
    vals = []
    pc = time.perf_counter
    for _ in range(a.batches + 1):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            x.add_(1)
            t0 = pc()
            for _ in range(a.calls):
                rt.issue(0)
            t1 = pc()
            rt.join()
        vals.append((t1 - t0) / a.calls * 1e6)
        del g
    res["issue_while_capturing"] = stats(vals[1:], a.calls)
    graphs = {}
    for fills in (0, 1, 64):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            x.add_(1)
            for _ in range(fills):
                rt.issue(0)
            rt.join()
            x.add_(1)
        g.replay()
        torch.cuda.synchronize()
        graphs[fills] = g
    # replays in short batches: a 64-fill replay runs longer on the GPU than
    # on the host, and a full launch queue would block the host
    n = max(1, a.calls * a.batches // 40)
    for fills, g in graphs.items():
        res[f"replay_{fills}_fills"] = per_call(g.replay, 40, n)
    base = res["replay_0_fills"]["median"]
    for fills in (1, 64):
        res[f"replay_{fills}_fills"]["added_host_us"] = \
            res[f"replay_{fills}_fills"]["median"] - base
    rt.set_step(StepInfo(num_tokens=1))
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--calls", type=int, default=500, help="calls per timed batch")
    ap.add_argument("--batches", type=int, default=8, help="timed batches per row")
    ap.add_argument("--generic", action="store_true",
                    help="also time the generic CuTe DSL launch path")
    a = ap.parse_args()
    t_start = time.perf_counter()
    props = torch.cuda.get_device_properties(0)
    out = {"device": props.name, "torch": torch.__version__,
           "cutlass_dsl": K.cutlass_version(), "argv": sys.argv,
           "calls_per_batch": a.calls, "batches": a.batches}
    for mod in ("tvm_ffi", "cuda.bindings"):
        try:
            m = __import__(mod, fromlist=["_"])
            out[mod] = getattr(m, "__version__", "present")
        except Exception:
            out[mod] = None
    buf = torch.empty(64 * ROW, dtype=torch.uint8, device="cuda")
    try:
        rts = {sync: runtime(sync, buf) for sync in ("driver", "torch")}
    except RuntimeError as e:
        out["error"] = str(e)
        print(out)
        if a.out:
            json.dump(out, open(a.out, "w"), indent=1)
        return 1
    out["launch"] = bench_launch(rts["driver"], a)
    out["fork"] = bench_fork(rts, a)
    out["issue"] = bench_issue(rts, a)
    out["join"] = bench_join(rts, a)
    out["graph"] = bench_graph(rts["driver"], a)
    out["wall_s"] = time.perf_counter() - t_start
    if a.out:
        json.dump(out, open(a.out, "w"), indent=1)
    print(f"{out['device']}, torch {out['torch']}, cutlass-dsl {out['cutlass_dsl']}, "
          f"tvm_ffi {out['tvm_ffi']}, launch path {out['launch']['path']}")
    print(f"{'section':<8} {'row':<34} {'us/call':>8} {'p10':>7} {'p90':>7} {'calls':>6}")
    for sec in ("launch", "fork", "issue", "join", "graph"):
        for row, v in out[sec].items():
            if not isinstance(v, dict):
                continue
            if "error" in v:
                print(f"{sec:<8} {row:<34} {v['error']}")
                continue
            extra = (f"  (+{v['added_host_us']:.2f} over no fills)"
                     if "added_host_us" in v else "")
            print(f"{sec:<8} {row:<34} {v['median']:8.2f} {v['p10']:7.2f} "
                  f"{v['p90']:7.2f} {v['n_calls']:6d}{extra}")
    print(f"wall {out['wall_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
