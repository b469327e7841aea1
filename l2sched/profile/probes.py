"""``l2sched profile``: measure a box once, for the lint's model.

Probes (each a function ``probe_*(ctx) -> dict``; results are kept in a
state JSON after every probe, so an interrupted run resumes where it
stopped):

- ``l2``: re-read sweep (sizes 4..256 MB): a bandwidth-bound read after a
  1 GiB read flush (cold) and right after itself (re-read), in the same and
  in reverse order -> the hit fraction per size and the effective L2 bytes
  (the largest size whose re-read still hits >= 90%); the 256 MB cold read
  gives the device-memory read rate.
- ``ops`` (``profile_ops``): every weight-reading op of the decode step (three layers
  per layer kind, the GLM-5.3-Flash inventory at ``--tp``), at M in
  ``--tokens``: cold (after the flush, its inputs read back: weights cold,
  activations hot, as in the step) and hot (right after itself) -> the
  per-op cold/hot table the lint reads instead of global GEMM rates.
- ``fill``: each fill kernel (the device's shapes) x size (8..48 MB) x wait
  (0, 10, 40 us), consumed by an M=8 GEMM over a weight of that size
  (cold, hot and after each fill interleaved round by round) ->
  landed fraction f(mode, size) (share of the GEMM's cold->hot gap), fill
  rate (bytes / launch-to-exit for kernels that exit when landed), launch
  cost.
- ``survival``: a copy fill, then a streaming read of D bytes, then the
  consumer, per cache policy (interleaved with cold and hot) -> the fraction
  of filled bytes still hot after D bytes passed (residency terms).
- ``interference``: a latency-bound chain (200 tiny kernels replayed from a
  CUDA graph) and a memory-bound chain, alone and with a concurrent fill of
  each kernel, interleaved -> the slowdown of latency-bound kernels.
- ``graph``: the per-kernel time of a graph-replayed chain (kernel gap) and
  the cost of one fork/join of an empty fill.
- ``set_aside``: the routed-expert stream of one MoE layer per M after a
  48 MB evict_last fill elsewhere, with no persisting-L2 set-aside and with
  the maximum, interleaved -> ``l2.set_aside_stream_slowdown``, the cost of
  a set-aside to normal-priority traffic.
- ``step_fill`` (``profile_step``): ``bench run``'s decode step with the
  shipped h200 schedule's windows installed with each fill kernel, each
  beside its decoy control -> what each kernel's hits buy in the step
  relative to copy's, which scales that kernel's landed fractions (the
  ``fill`` probe's stand-in consumer credits the bulk kernel far less than
  the step does), and copy's per-op times, from which ``profile_gaps``
  derives the ops' step gaps. Not with ``--quick``.
- ``fill_fork`` (``fill_fork``): ``bench run``'s decode step with the
  shipped h200 schedule's windows A, B and C each alone at 0.5 MB beside
  no prefetch and its A/A arm, with the runtime's default capture launch ->
  what one forked fill costs the main stream per M
  (``latency.fill_fork_us``). Only with ``--fill-fork``; not with ``--quick``.

Collectives across N GPUs (``--collectives N``): ``profile_collectives``. Every
number in the written profile carries the probe and median/p10/p90 it came
from (``[measured]``). Units: bytes, us, GB/s. torch is imported inside functions.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

from l2sched import progress
from l2sched.bench.isolation import SetAsideIsolation
from l2sched.bench.step import StepRunner
from l2sched.profile.collectives import STATE_KEY as COLLECTIVES_KEY
from l2sched.profile.fill_fork import forget_unasked_fill_fork, probe_fill_fork
from l2sched.profile.ops import probe_ops
from l2sched.profile.state import save_state
from l2sched.profile.step_fill import probe_step_fill
from l2sched.bench.timing import (TimingBench, after_fill, dependent_read, gemm_consumer,
                                 row_table, stats)
from l2sched.bench.tree import build_tree
from l2sched.device import DeviceProfile, load_device
from l2sched.model.config import default_config
from l2sched.model.inventory import analytical_inventory
from l2sched.profile.interference import bench_interference, gemm_chain_record
from l2sched.runtime import kernel as K
from l2sched.runtime.limits import read_device_limits
from l2sched.runtime.set_aside import in_force, reset_persisting_lines

MB = 10**6

#: Sizes (MB) of the re-read sweep.
L2_SIZES = (4, 8, 16, 24, 32, 40, 48, 56, 64, 96, 128, 256)
#: Fill sizes (MB) and waits (us) of the fill probe.
FILL_SIZES = (8, 16, 32, 48)
FILL_WAITS = (0, 10, 40)
#: Streaming read sizes (MB) passed between a fill and its consumer.
SURVIVAL_BYTES = (0, 50, 100, 200)


class Progress:
    """Progress on stderr: ``rich``'s bar when it is installed, plain lines
    otherwise (the lent GPU machine has no rich unless it is carried)."""

    def __init__(self, total: int):
        self.total, self.done, self.t0 = total, 0, time.time()
        try:
            from rich.progress import Progress as RichProgress
            self._bar = RichProgress(transient=False)
            self._bar.start()
            self._task = self._bar.add_task("profile", total=total)
        except Exception:
            self._bar = None

    def step(self, what: str) -> None:
        """One unit of work done: ``what``."""
        self.done += 1
        if self._bar is not None:
            self._bar.update(self._task, advance=1, description=what)
            return
        el = time.time() - self.t0
        print(f"[profile {self.done}/{self.total}] {what} ({el:.0f} s)",
              file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()


def probe_l2(ctx) -> dict:
    """The re-read sweep (see the module docstring)."""
    torch, b = ctx.torch, ctx.bench
    rows = []
    for mb in (4, 8, 16, 32, 48, 64, 96, 256) if ctx.quick else L2_SIZES:
        w = torch.ones(mb * MB // 4, dtype=torch.int32, device="cuda")
        read, kind = dependent_read(torch, w)
        read()
        _, cold = b.timed(b.flush, read)
        _, again = b.timed(read, read)
        rev, _ = dependent_read(torch, w, reverse=True)  # the other end first
        _, again_rev = b.timed(read, rev)
        rows.append({"mb": mb, "cold_us": stats(cold), "reread_us": stats(again),
                     "reread_reverse_us": stats(again_rev)})
        del w
    l2_hits(rows)
    fitting = [r["mb"] for r in rows if min(r["reread_hit"], r["reread_reverse_hit"]) >= 0.9]
    big = rows[-1]
    return {"rows": rows, "read_kernel": kind,
            "effective_bytes": max(fitting) * MB if fitting else rows[0]["mb"] * MB,
            "dram_read_gbps": big["mb"] * MB / big["cold_us"]["median"] / 1e3,
            "dram_read_gbps_p10_p90": [big["mb"] * MB / big["cold_us"]["p90"] / 1e3,
                                       big["mb"] * MB / big["cold_us"]["p10"] / 1e3]}


def l2_hits(rows: list[dict]) -> None:
    """Add ``reread_hit`` and ``reread_reverse_hit`` (0..1) to each row of
    the re-read sweep (``mb``, ``cold_us``/``reread_us``/``reread_reverse_us``
    stats). A read costs a fixed part plus bytes / rate, cold and hot alike:
    lines through the sizes that fit any L2 this runs on (<= 16 MB) give the
    cold and the all-hit time at every size; the hit fraction is the share
    of that cold-hot difference a re-read recovers. Raises
    ``statistics.StatisticsError`` with fewer than two sizes <= 16 MB."""
    fit = [r for r in rows if r["mb"] <= 16]
    cold_line = statistics.linear_regression([r["mb"] for r in fit],
                                             [r["cold_us"]["median"] for r in fit])
    hot_line = statistics.linear_regression([r["mb"] for r in fit],
                                            [r["reread_us"]["median"] for r in fit])
    for r in rows:
        gap = ((cold_line.intercept + cold_line.slope * r["mb"])
               - (hot_line.intercept + hot_line.slope * r["mb"]))
        for key in ("reread_us", "reread_reverse_us"):
            got = r["cold_us"]["median"] - r[key]["median"]
            r[key.replace("_us", "_hit")] = max(0.0, min(1.0, got / gap)) if gap > 0 else 0.0


def probe_fill(ctx) -> dict:
    """Landed fraction per fill kernel, size and wait (see the module
    docstring)."""
    torch, b = ctx.torch, ctx.bench
    out = {}
    for mode, shape in ctx.fill_shapes.items():
        kern = K.get_kernel(0, **{"policy": "evict_last", **shape})
        if kern is None:
            out[mode] = {"error": K.disabled_reason() or "compile failed"}
            continue
        rows = []
        for mb in (16, 32) if ctx.quick else FILL_SIZES:
            n = mb * MB // (2 * 4096) // 64 * 64  # cuBLAS's aligned kernels
            mm, w, _, _ = gemm_consumer(torch, n, 4096)
            tab = row_table(torch, w)
            h = torch.cuda.current_stream().cuda_stream
            _, exit_t = b.timed(b.flush, lambda: kern.launch(tab.data_ptr(), 0, 1, h))
            res = after_fill(b, kern, mm, w, (0, 40) if ctx.quick else FILL_WAITS)
            row = {"mb": mb, "cold_us": res["cold_us"], "hot_us": res["hot_us"],
                   "launch_to_exit_us": stats(exit_t), "waits": {}}
            for wait, got in res["waits"].items():
                row["waits"][str(wait)] = {"us": got["us"], "landed": got["recovered"],
                                           "landed_p10_p90": got["recovered_p10_p90"]}
            rows.append(row)
        # the shape that ran: fitted to the device's limits (runtime.kernel.fit_spec)
        ran = {**shape, **{k: getattr(kern.spec, k)
                           for k in ("grid", "threads", "chunk", "stages")}}
        out[mode] = {"shape": ran, "ffi": kern.ffi, "rows": rows}
        ctx.progress.step(f"fill {mode}")
    return out


def probe_survival(ctx) -> dict:
    """Hot fraction of a filled 16.8 MB weight after D bytes of streaming
    reads, per cache policy (copy fill)."""
    torch, b = ctx.torch, ctx.bench
    mode, shape = next(iter(ctx.fill_shapes.items()))
    mm, w, _, _ = gemm_consumer(torch, 4096, 2048)
    tab = row_table(torch, w)
    h = torch.cuda.current_stream().cuda_stream
    stream = torch.ones(max(SURVIVAL_BYTES) * MB // 4, dtype=torch.int32, device="cuda")
    readers = {d: dependent_read(torch, stream[: d * MB // 4])[0] for d in SURVIVAL_BYTES if d}
    kerns = {pol: K.get_kernel(0, policy=pol, **shape)
             for pol in ("evict_last", "evict_normal")}
    kerns = {pol: k for pol, k in kerns.items() if k is not None}

    def setup(kern, d):
        def run():
            b.flush()
            kern.launch(tab.data_ptr(), 0, 1, h)
            if d:
                readers[d]()
        return run
    cases = {"cold": (b.flush, mm), "hot": (mm, mm)}
    cases.update({(pol, d): (setup(kern, d), mm)
                  for pol, kern in kerns.items() for d in SURVIVAL_BYTES})
    t = b.interleaved(cases)
    c, hh = stats(t["cold"])["median"], stats(t["hot"])["median"]
    out = {"fill_mode": mode, "weight_bytes": w.numel() * 2, "cold_us": stats(t["cold"]),
           "hot_us": stats(t["hot"]), "interleaved": True, "policies": {}}
    for pol in kerns:
        rows = []
        for d in SURVIVAL_BYTES:
            v = stats(t[(pol, d)])["median"]
            rows.append({"stream_mb": d, "us": stats(t[(pol, d)]),
                         "hot_fraction": (c - v) / (c - hh) if c - hh >= 0.5 else None})
        out["policies"][pol] = rows
    return out


#: Bytes of the persisting fill before each timed expert stream of
#: ``probe_set_aside``: more than the H200's maximum set-aside (39,321,600 B,
#: benchmarks/results/h200-profile-2026-12-01.md), so the reserved ways are full.
SET_ASIDE_FILL_BYTES = 48 * MB


def probe_set_aside(ctx) -> dict:
    """What a persisting-L2 set-aside costs normal-priority traffic: the
    routed-expert stream of one MoE layer at each M, after a flush and an
    evict_last copy fill of 48 MB elsewhere, with no set-aside and with the
    device maximum, interleaved round by round (the persisting lines
    demoted before each case). ``slowdown`` per M = mean with / mean
    without - 1; the profile's ``l2.set_aside_stream_slowdown`` is their
    median (the lint scales it by the reserved share of the maximum)."""
    torch, b, runner = ctx.torch, ctx.bench, ctx.runner
    mode, shape = next(iter(ctx.fill_shapes.items()))
    kern = K.get_kernel(0, policy="evict_last", **shape)
    if kern is None:
        return {"error": K.disabled_reason() or "compile failed"}
    inv = runner.inv
    layer = next(i for i, k in enumerate(inv.kinds)
                 if any(op.cls == "expert_stream" for op in runner.ops_of(i)))
    other = torch.ones(SET_ASIDE_FILL_BYTES // 4, dtype=torch.int32, device="cuda")
    tab = row_table(torch, other)
    h = torch.cuda.current_stream().cuda_stream
    iso = SetAsideIsolation({"none": 0, "max": -1}, device=0)
    out = {"layer": layer, "fill_mode": mode, "fill_bytes": SET_ASIDE_FILL_BYTES,
           "rows": []}
    try:
        for M in ctx.tokens:
            runner.set_tokens(M)
            ops = [op for op in runner.ops_of(layer) if op.cls == "expert_stream"]

            def stream(ops=ops):
                for op in ops:
                    runner.run_op(layer, op)
            stream()

            def setup(case):
                def run():
                    torch.cuda.synchronize()  # the limit changes between kernels only
                    iso.before(case)  # this case's set-aside, persisting lines demoted
                    if case == "max":
                        out["set_aside_bytes"] = in_force(0)
                    b.flush()
                    kern.launch(tab.data_ptr(), 0, 1, h)
                return run
            t = b.interleaved({c: (setup(c), stream) for c in ("none", "max")})
            a, m = stats(t["none"]), stats(t["max"])
            out["rows"].append({"M": M, "none_us": a, "max_us": m,
                                "slowdown": m["mean"] / a["mean"] - 1.0})
            ctx.progress.step(f"set-aside M={M}")
    finally:
        iso.close()
        reset_persisting_lines(0)
    s = sorted(r["slowdown"] for r in out["rows"])
    if s:
        out["median"] = statistics.median(s)
        out["p10_p90"] = [s[0], s[-1]] if len(s) < 10 else \
            [s[int(0.1 * (len(s) - 1))], s[int(0.9 * (len(s) - 1))]]
    return out


def probe_interference(ctx) -> dict:
    """Slowdown of a graph-replayed latency-bound chain under a concurrent
    50 MB fill of each kernel, and of a graph-replayed chain of GEMMs over
    an L2-resident weight under a 24 MB fill (``bench.interference``;
    interleaved with the chain alone): each chain's extra us (and per us of
    fill, ``*extra_per_fill_us``), read by ``profile_write.probe_slowdowns``."""
    out = {}
    for mode, shape in ctx.fill_shapes.items():
        kern = K.get_kernel(0, **{"policy": "evict_last", **shape})
        if kern is None:
            continue
        r = bench_interference(ctx.bench, kern)
        lat = r["latency_chain_200_kernels"]
        fill_us = ctx.results.get("fill", {}).get(mode, {})
        r["fill_exit_us"] = _exit_us(fill_us)
        # a raw figure for the report; the profile's slowdown is profile_write's
        ov = r["fill_exit_us"] or 15.0
        r["extra_per_fill_us"] = max(0.0, lat["extra_us"]) / ov
        gemm = gemm_chain_record(r)
        gemm_fill_us = _exit_us(fill_us, gemm["fill_bytes"] / MB) if gemm else None
        if gemm and gemm_fill_us:
            r["gemm_fill_exit_us"] = gemm_fill_us
            r["gemm_extra_per_fill_us"] = max(0.0, gemm["extra_us"]) / gemm_fill_us
        out[mode] = r
        ctx.progress.step(f"interference {mode}")
    return out


def _exit_us(fill: dict, mb: float = 50) -> float | None:
    """Launch-to-exit (us) of a ``mb``-MB fill from a ``probe_fill`` record:
    interpolated linearly between its measured sizes, beyond the largest
    scaled in proportion to the bytes (as before for 50 MB from 48 MB);
    None without rows."""
    rows = sorted(fill.get("rows") or [], key=lambda r: r["mb"])
    if not rows:
        return None
    pts = [(r["mb"], r["launch_to_exit_us"]["median"]) for r in rows]
    if mb >= pts[-1][0]:
        return pts[-1][1] * mb / pts[-1][0]
    if mb <= pts[0][0]:
        return pts[0][1] * mb / pts[0][0]
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if mb <= x1:
            return y0 + (y1 - y0) * (mb - x0) / (x1 - x0)
    return pts[-1][1]


def probe_graph(ctx) -> dict:
    """Per-kernel time of a 200-kernel chain replayed from a CUDA graph, and
    the extra time of one fork + empty fill + join in it."""
    torch, b = ctx.torch, ctx.bench
    small = torch.zeros(256, device="cuda")
    kern = K.get_kernel(0, policy="evict_last")
    side = torch.cuda.Stream()
    tab = torch.zeros((1, 2), dtype=torch.int64, device="cuda")
    graphs = {}
    for name, with_fork in (("chain", False), ("chain_fork", True)):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            small.add_(1)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(200):
                small.add_(1)
                if with_fork and i == 100 and kern is not None:
                    side.wait_stream(torch.cuda.current_stream())
                    kern.launch(tab.data_ptr(), 0, 1, side.cuda_stream)
                    torch.cuda.current_stream().wait_stream(side)
        graphs[name] = g
    times = {n: [] for n in graphs}
    for _ in range(b.reps):
        for n, g in graphs.items():
            times[n] += b.timed(None, g.replay, reps=1)[1]
    chain, fork = stats(times["chain"]), stats(times["chain_fork"])
    return {"chain_200_us": chain, "chain_200_with_fork_us": fork,
            "kernel_gap_us": chain["median"] / 200,
            "fork_join_us": fork["median"] - chain["median"]}


PROBES = (("l2", probe_l2), ("ops", probe_ops), ("fill", probe_fill),
          ("survival", probe_survival), ("interference", probe_interference),
          ("graph", probe_graph), ("set_aside", probe_set_aside),
          ("step_fill", probe_step_fill), ("fill_fork", probe_fill_fork))
#: The keys a state file's ``results`` may have: the probes, and the
#: collective part (``--collectives``).
STATE_KEYS = frozenset([name for name, _ in PROBES] + [COLLECTIVES_KEY])


class ProbeContext:
    """What every probe needs: torch, the timing bench, the step runner of
    the GLM-5.3-Flash tree, the fill shapes, the results so far.
    ``ProbeContext(torch, args, base_profile, results)``: ``args`` has
    ``quick``, ``reps``, ``tokens`` (decode tokens M), ``tp``, ``fill_fork``; the tree is
    built on the CUDA device at that TP (needs a GPU; torch's error
    otherwise); ``results`` is the state's probe results (kept by
    reference)."""

    def __init__(self, torch, args, device_profile: DeviceProfile, results: dict):
        self.torch = torch
        self.quick = args.quick
        self.fill_fork = bool(getattr(args, "fill_fork", False))
        self.bench = TimingBench(torch, 15 if args.quick else args.reps)
        self.tokens = tuple(args.tokens)
        inv = analytical_inventory(default_config(), tp=args.tp, ep=False)
        self.model = build_tree(inv, device="cuda", expert_pools=1, seed=0)
        self.runner = StepRunner(self.model, device_profile, tokens=self.tokens[0])
        self.runner.calibrate_sleep()
        self.fill_shapes = {
            mode: {"mode": mode, "grid": fm.grid, "threads": fm.threads,
                   "chunk": fm.chunk, "stages": fm.stages}
            for mode, fm in sorted(device_profile.fill_modes.items())}
        if "copy" not in self.fill_shapes:
            self.fill_shapes["copy"] = {"mode": "copy", "grid": 66, "chunk": 32768,
                                        "stages": 4}
        # the survival probe uses the first: prefer copy
        self.fill_shapes = dict(sorted(self.fill_shapes.items(),
                                       key=lambda kv: kv[0] != "copy"))
        self.results = results
        self.capacity_bytes = device_profile.capacity_bytes
        self.device_name = device_profile.name
        self.tp = args.tp
        self.progress = None


def run_profile(args, state: dict) -> dict:
    """``l2sched profile``: run the probes not yet in ``state`` (the state
    file ``args.state`` as ``profile_state.load_state`` read it: earlier
    probes of this box, resumed), keep the state after each, and return
    ``{provenance, results}`` (``profile_write.write_profile`` turns it
    into the TOML; ``provenance.probe_seconds``: each probe's wall time, s).
    Needs a CUDA GPU with compute capability >= 9.0."""
    import torch

    device_profile = load_device(args.base)
    results = state.get("results", {})
    props = torch.cuda.get_device_properties(0)
    prov = {"gpu": props.name, "compute_capability": [props.major, props.minor],
            "sms": props.multi_processor_count,
            "l2_bytes": int(getattr(props, "L2_cache_size", 0)),
            "memory_bytes": int(props.total_memory), "torch": torch.__version__,
            "cuda": torch.version.cuda, "cutlass_dsl": K.cutlass_version(),
            "driver": _driver_version(), "date": time.strftime("%Y-%m-%d"),
            "command": "l2sched profile " + " ".join(sys.argv[2:] if
                                                     sys.argv[1:2] == ["profile"]
                                                     else sys.argv[1:]),
            "quick": bool(args.quick), "tp": args.tp, "base_profile": device_profile.name,
            "set_aside_max_bytes": _set_aside_max(props),
            "smem_per_block_optin_bytes": _smem_optin(props)}
    ctx = ProbeContext(torch, args, device_profile, results)
    forget_unasked_fill_fork(results, ctx.fill_fork)  # resumed and now asked: run it
    todo = [(n, p) for n, p in PROBES if n not in results]
    ctx.progress = Progress(len(todo) + len(ctx.tokens) + 2 * len(ctx.fill_shapes)
                            + (len(ctx.tokens) if "set_aside" in dict(todo) else 0))
    # wall seconds per probe (a resumed run keeps the earlier probes' own)
    prov["probe_seconds"] = seconds = {
        k: v for k, v in state.get("provenance", {}).get("probe_seconds", {}).items()
        if k in results}
    got = {"provenance": prov, "results": results}
    for i, (name, probe) in enumerate(todo, 1):
        progress.stage(f"probe {name} ({i}/{len(todo)})")
        t0 = time.perf_counter()
        results[name] = probe(ctx)
        seconds[name] = round(time.perf_counter() - t0, 1)
        ctx.progress.step(f"{name} done")
        save_state(args.state, got)
    ctx.progress.close()
    return got


def _driver_version() -> str:
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                            "--format=csv,noheader"], capture_output=True, text=True,
                           timeout=30)
        return r.stdout.strip().splitlines()[0] if r.returncode == 0 else ""
    except Exception:
        return ""


def _smem_optin(props) -> int | None:
    """The driver's opt-in shared memory per block (bytes;
    ``runtime.limits.read_device_limits``, else torch's
    ``shared_memory_per_block_optin``), or None."""
    try:
        return read_device_limits(0).smem_per_block_optin_bytes
    except Exception:
        v = getattr(props, "shared_memory_per_block_optin", None)
        return int(v) if v else None


def _set_aside_max(props) -> int | None:
    """The driver's maximum persisting-L2 set-aside (bytes), or None."""
    v = getattr(props, "persisting_l2_cache_max_size", None)
    if v:
        return int(v)
    try:
        return read_device_limits(0).persisting_l2_max_bytes
    except Exception:
        return None

