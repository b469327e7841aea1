"""Event timing on one GPU for the bench's kernel and profile probes: the
L2 flush, spin sleeps, timed and interleaved repetitions, order statistics,
and the fill's consumer (an M=8 GEMM) cold / hot / after a fill.

Needs torch with CUDA at call time (nothing is imported at module import).
"""

from __future__ import annotations

import os
import random
import statistics
import tempfile

from l2sched.bench.trace import kernel_timeline


def stats(xs: list[float]) -> dict:
    """median, p10, p90, mean and n of ``xs``."""
    s = sorted(xs)
    n = len(s)
    return {"median": statistics.median(s), "p10": s[int(0.1 * (n - 1))],
            "p90": s[int(0.9 * (n - 1))], "mean": sum(s) / n, "n": n}


def row_table(torch, t):
    """One fill row covering tensor ``t`` (16-byte multiple)."""
    n = t.numel() * t.element_size() // 16 * 16
    return torch.tensor([[t.data_ptr(), n]], dtype=torch.int64, device="cuda")


class TimingBench:
    """Flush, sleep and event timing on the current stream: ``flush()`` reads
    1 GiB (an L2 flush that leaves no dirty lines), ``sleep(us)`` spins,
    ``timed(setup, body)`` gives per-repetition times (us) of both. Every
    repetition starts with a spin of ``lead_us`` (us), so the host enqueues
    ahead of the GPU and no launch gap lands inside a timed region."""

    lead_us = 300

    def __init__(self, torch, reps: int):
        self.torch = torch
        self.reps = reps
        self.flush_buf = torch.ones(1 << 28, dtype=torch.float32, device="cuda")
        self.flush_out = torch.empty((), dtype=torch.float32, device="cuda")
        props = torch.cuda.get_device_properties(0)
        self.cycles_per_us = getattr(props, "clock_rate", 1980000) / 1e3

    def flush(self):
        self.torch.sum(self.flush_buf, dim=0, out=self.flush_out)

    def sleep(self, us: float):
        if us > 0:
            self.torch.cuda._sleep(int(us * self.cycles_per_us))

    def timed(self, setup, body, reps: int | None = None) -> tuple[list, list]:
        """Per repetition: ``setup()``, then events around ``body()``;
        returns the times (us) of setup and of body."""
        torch = self.torch
        evs = [[torch.cuda.Event(enable_timing=True) for _ in range(3)]
               for _ in range(reps or self.reps)]
        for e0, e1, e2 in evs:
            self.sleep(self.lead_us)
            e0.record()
            if setup is not None:
                setup()
            e1.record()
            body()
            e2.record()
        torch.cuda.synchronize()
        return ([a.elapsed_time(b) * 1e3 for a, b, _ in evs],
                [b.elapsed_time(c) * 1e3 for _, b, c in evs])

    def graph_timed(self, setup, body, reps: int | None = None) -> list:
        """``body(stream_handle)`` captured once into a CUDA graph between two
        event-record nodes; per repetition ``setup()`` (eager), a replay,
        and the time (us) between the two nodes. Times a kernel as a FULL
        graph runs it: no host launch inside the timed region. Raises
        ``RuntimeError`` where torch has no external events."""
        torch = self.torch
        try:
            e1, e2 = (torch.cuda.Event(enable_timing=True, external=True) for _ in range(2))
        except TypeError as e:
            raise RuntimeError("graph timing needs torch.cuda.Event(external=True)") from e
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=side):
            e1.record()
            body(side.cuda_stream)
            e2.record()
        times = []
        for _ in range(reps or self.reps):
            self.sleep(self.lead_us)
            if setup is not None:
                setup()
            g.replay()
            torch.cuda.synchronize()
            times.append(e1.elapsed_time(e2) * 1e3)
        return times

    def kernel_times(self, setup, body, reps: int | None = None) -> list:
        """Per repetition ``setup()`` then ``body()``, under ``torch.profiler``
        (CUDA activity); returns per repetition the GPU time (us) of the
        kernels ``body`` launches as CUPTI reports them: from the first one's
        start to the last one's end. No events and no host launch are inside
        it: the kernels' own time, as Nsight Systems reports it. ``body``'s
        kernels are told apart by name: those it launches alone, less any
        that ``setup`` or the lead spin launch. Raises ``RuntimeError`` when
        no kernel name is ``body``'s alone or a repetition's count differs."""
        torch = self.torch
        reps = reps or self.reps

        def traced(fn) -> list:
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                fn()
                torch.cuda.synchronize()
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "trace.json")
                prof.export_chrome_trace(path)
                try:
                    timeline = kernel_timeline(path)
                except ValueError:  # no kernel at all
                    return []
            return sorted(k for ks in timeline.values() for k in ks)

        others = {k[2] for k in traced(lambda: (self.sleep(1), setup and setup()))}
        own = [k for k in traced(body) if k[2] not in others]
        if not own:
            raise RuntimeError("kernel_times: body launches no kernel of its own name")
        names = {k[2] for k in own}

        def run():
            for _ in range(reps):
                self.sleep(self.lead_us)
                if setup is not None:
                    setup()
                body()
        ks = [k for k in traced(run) if k[2] in names]
        if len(ks) != reps * len(own):
            raise RuntimeError(f"kernel_times: {len(ks)} kernels of body in {reps} "
                               f"repetitions, expected {len(own)} each")
        per = len(own)
        return [max(t + d for t, d, _ in ks[i:i + per]) - ks[i][0]
                for i in range(0, len(ks), per)]

    def interleaved(self, cases: dict, reps: int | None = None) -> dict:
        """Per round, every case ``name: (setup, body)`` in turn (the order
        rotates each round), events around each ``body()``; returns
        ``{name: [body times, us]}``. Interleaving puts every case in the
        same device state (clocks, DRAM refresh, neighbours), so their
        medians can be compared; in separate loops the cold 29.4 MB GEMM
        drifted between 13.8 and 15.1 us (benchmarks/results/h200-kernel-2026-12-01.md)."""
        torch = self.torch
        names = list(cases)
        rounds = []
        for i in range(reps or self.reps):
            order = names[i % len(names):] + names[:i % len(names)]
            evs = {}
            for name in order:
                setup, body = cases[name]
                self.sleep(self.lead_us)
                if setup is not None:
                    setup()
                e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                e1.record()
                body()
                e2.record()
                evs[name] = (e1, e2)
            rounds.append(evs)
        torch.cuda.synchronize()
        return {n: [r[n][0].elapsed_time(r[n][1]) * 1e3 for r in rounds] for n in names}


def gemm_consumer(torch, n: int, k: int):
    """An M=8 bf16 GEMM over an (n, k) weight, the consumer of a fill:
    returns ``(mm, weight, out, twin)``; ``mm()`` writes ``out`` (8, n);
    ``twin()`` is the same GEMM (same input, output, kernel and workspace)
    over another (n, k) weight, which warms everything the consumer reads
    except its weight."""
    w = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
    w_twin = torch.randn(n, k, dtype=torch.bfloat16, device="cuda")
    x = torch.randn(8, k, dtype=torch.bfloat16, device="cuda")
    y = torch.empty(8, n, dtype=torch.bfloat16, device="cuda")

    def mm():
        torch.mm(x, w.t(), out=y)

    def twin():
        torch.mm(x, w_twin.t(), out=y)
    twin()
    mm()
    return mm, w, y, twin


def recovered_share(cold: list, hot: list, after: list, resamples: int = 2000,
                    seed: int = 0) -> dict | None:
    """Share of the consumer's cold->hot gap that a fill recovered:
    ``(mean cold - mean after) / (mean cold - mean hot)`` over interleaved
    rounds (lists of us, one value per round, the same length), with a 90%
    interval from a paired bootstrap over rounds (``resamples`` draws,
    ``seed``). Means, not medians: a GEMM of 8-15 us jitters by about 1 us
    round to round, and a 16.8 MB weight's whole gap is 1.0-1.5 us
    (benchmarks/results/h200-kernel-2026-12-01-split.md), so the median of
    40 rounds moved the share by +-0.3. Returns ``{"share", "p5", "p95",
    "gap_us"}``, or ``None`` when the mean gap is under 0.5 us or 5% of the
    cold time (the weight does not fit the L2 hot: a 50.3 MB weight's 0.5 us
    "gap" gave shares of 6) or when half the bootstrap draws have no gap. Raises ``ValueError`` on lists of different
    lengths or empty ones."""
    n = len(cold)
    if not n or len(hot) != n or len(after) != n:
        raise ValueError(f"need rounds of equal length, got {len(cold)}, {len(hot)}, "
                         f"{len(after)}")

    def share(idx):
        c = sum(cold[i] for i in idx) / len(idx)
        h = sum(hot[i] for i in idx) / len(idx)
        a = sum(after[i] for i in idx) / len(idx)
        return (c - a) / (c - h) if c - h > 0 else float("nan"), c - h
    point, gap = share(range(n))
    if gap < max(0.5, 0.05 * sum(cold) / n):
        return None
    rng = random.Random(seed)
    # a draw whose cold - hot gap vanished has no share (NaN): left out, so
    # that the sort (and the interval) stays valid
    draws = sorted(d for d in (share([rng.randrange(n) for _ in range(n)])[0]
                               for _ in range(resamples)) if d == d)
    if len(draws) < resamples // 2:
        return None
    k = len(draws) - 1
    return {"share": point, "p5": draws[int(0.05 * k)], "p95": draws[int(0.95 * k)],
            "gap_us": gap}


def after_fill(b: "TimingBench", kern, consume, weight, waits,
               rounds: int | None = None, warm=None, empty_fill=None,
               fill_stream=None) -> dict:
    """The consumer ``consume()`` of ``weight`` cold (after a flush), hot
    (right after itself) and after a flush + a fill of the weight by
    ``kern`` + a wait of each ``waits`` us, interleaved over ``rounds``
    rounds (default: the bench's reps). Returns ``cold_us`` / ``hot_us``
    stats and per wait ``{"us": stats, "recovered": share of the gap from
    the means (None when the weight does not fit the L2 hot),
    "recovered_p5_p95": its bootstrap interval, "recovered_p10_p90": the
    share at the after-fill p90 / p10 against the mean cold and hot times
    (the round-to-round spread)}`` (``recovered_share``).

    ``warm()`` (optional) adds the *warmed* cases, returned under
    ``"warmed"``: the flush also evicts the consumer's code, input and
    workspace, which no weight fill brings back but which are hot inside a
    decode step, so ``warm()`` runs right after the flush. Each wait gets
    its own references with the same kernel sequence as the fill case, the
    fill launched over a 0-byte row: cold = flush, warm, empty fill, wait,
    consume; hot = flush, warm, consume, empty fill, wait, consume; after =
    flush, warm, fill, wait, consume. So the share compares states that
    differ only in where the weight's bytes are (a fill kernel between two
    GEMMs costs the second one time of its own: ``empty_fill_cost_us``).
    ``empty_fill()`` replaces that 0-byte launch where ``kern`` is not a
    fill kernel (benchmarks' stand-ins). ``fill_stream`` (a torch CUDA
    stream): the fill is forked onto it, the wait spins on the current
    stream beside it, and the current stream joins it before the consumer
    (a decode step's arrangement); default: all in order on one stream.
    """
    tab = row_table(b.torch, weight)
    empty = b.torch.tensor([[weight.data_ptr(), 0]], dtype=b.torch.int64, device="cuda")
    h = b.torch.cuda.current_stream().cuda_stream

    def seq(*steps):
        def run():
            for step in steps:
                step()
        return run

    def fill(table, wait):
        if table is empty and empty_fill is not None:
            return lambda: (empty_fill(), b.sleep(wait))
        return _fill_then_wait(b, kern, table, wait, h, fill_stream)
    cases = {"cold": (b.flush, consume), "hot": (consume, consume)}
    cases.update({f"wait{w}": (seq(b.flush, fill(tab, w)), consume) for w in waits})
    if warm is not None:
        cases["cold_warmed"] = (seq(b.flush, warm), consume)
        for w in waits:
            cases[f"cold{w}_warmed"] = (seq(b.flush, warm, fill(empty, w)), consume)
            cases[f"hot{w}_warmed"] = (seq(b.flush, warm, consume, fill(empty, w)), consume)
            cases[f"wait{w}_warmed"] = (seq(b.flush, warm, fill(tab, w)), consume)
    t = b.interleaved(cases, rounds)

    def part(cold_key, hot_key, after_key):
        cold, after = stats(t[cold_key]), stats(t[after_key])
        got = recovered_share(t[cold_key], t[hot_key], t[after_key])
        spread = [(cold["mean"] - v) / got["gap_us"] if got else None
                  for v in (after["p90"], after["p10"])]
        return {"us": after, "recovered": got and got["share"],
                "recovered_p5_p95": got and [got["p5"], got["p95"]],
                "recovered_p10_p90": spread}
    out = {"cold_us": stats(t["cold"]), "hot_us": stats(t["hot"]),
           "waits": {w: part("cold", "hot", f"wait{w}") for w in waits}}
    if warm is not None:
        out["warmed"] = {
            "cold_us": stats(t["cold_warmed"]),
            "waits": {w: {**part(f"cold{w}_warmed", f"hot{w}_warmed", f"wait{w}_warmed"),
                          "cold_us": stats(t[f"cold{w}_warmed"]),
                          "hot_us": stats(t[f"hot{w}_warmed"])} for w in waits},
            "empty_fill_cost_us": {
                w: {"cold": stats(t[f"cold{w}_warmed"])["mean"]
                    - stats(t["cold_warmed"])["mean"],
                    "hot": stats(t[f"hot{w}_warmed"])["mean"] - stats(t["hot"])["mean"]}
                for w in waits}}
    return out


def _fill_then_wait(b: "TimingBench", kern, table, wait: float, stream_handle, fill_stream):
    """``after_fill``'s fill + wait of ``wait`` us: in order on the stream
    ``stream_handle``, or forked onto ``fill_stream`` beside the wait and
    joined after it."""
    if fill_stream is None:
        return lambda: (kern.launch(table.data_ptr(), 0, 1, stream_handle), b.sleep(wait))

    def forked():
        main = b.torch.cuda.current_stream()
        fill_stream.wait_stream(main)
        kern.launch(table.data_ptr(), 0, 1, fill_stream.cuda_stream)
        b.sleep(wait)
        main.wait_stream(fill_stream)
    return forked


_READ_KERNEL = []  # the Triton kernel, defined once (a new definition recompiles)


def _read_kernel():
    if not _READ_KERNEL:
        import triton
        import triton.language as tl

        @triton.jit
        def read_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, REV: tl.constexpr):
            pid = tl.program_id(0)
            if REV:
                pid = tl.num_programs(0) - 1 - pid
            offs = pid * BLOCK + tl.arange(0, BLOCK)
            v = tl.load(x_ptr + offs, mask=offs < n, other=0)
            tl.store(out_ptr + pid, tl.sum(v, axis=0))
        _READ_KERNEL.append(read_kernel)
    return _READ_KERNEL[0]


def dependent_read(torch, w, reverse: bool = False):
    """A bandwidth-bound dependent read of all of ``w`` (16 KiB per Triton
    program, summed as int32; ``reverse``: programs mapped from the end)
    and its name (``torch.sum`` without Triton)."""
    try:
        import triton
        kernel = _read_kernel()
    except Exception:
        out = torch.empty((), dtype=torch.float32, device="cuda")
        return (lambda: torch.sum(w.view(-1), dim=0, dtype=torch.float32, out=out),
                "torch.sum")
    x = w.view(-1).view(torch.int32)
    n = x.numel()
    block = 4096
    grid = (triton.cdiv(n, block),)
    out = torch.empty(grid[0], dtype=torch.int32, device="cuda")
    return (lambda: kernel[grid](x, out, n, BLOCK=block, REV=reverse, num_warps=4),
            "triton")
