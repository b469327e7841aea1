"""Landed fraction of each fill kernel after longer waits than ``l2sched
profile``'s fill probe uses (0 / 10 / 40 us): does a bulk prefetch
(``cp.async.bulk.prefetch.L2``) land later? In the decode step a window's
fill has 90-300 us before its consumer (the lint's expert slack), and the
bulk-kernel arm gains there although the probe credits it 0-0.53.

    python lab/experiments/fill_wait_probe.py [--waits 0,40,200,400]
        [--sizes 16,32,48] [--reps 40] [--fill-stream same|side] [--touch-pages]
        [--flush normal|evict_first|evict_last] [--graph]
        [--shape NAME:mode=bulk,grid=16,threads=32,chunk=16384,policy=evict_normal ...]
        --out OUT.json --md-out OUT.md

The probe's own ``probe_fill`` (``l2sched.profile.probes``) with other waits,
the fill shapes of the shipped ``h200`` profile; prints a table. GPU only.
Units: MB = 10^6 B, us.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from types import SimpleNamespace

from l2sched.units import CACHE_POLICIES

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))
import lab.kernels  # noqa: E402

lab.kernels.register()  # line mode and the none policy


def _hinted_flush(torch, buf, hint: str):
    """A flush reading all of ``buf`` with Triton loads carrying the cache
    hint ``hint`` (``evict_first`` / ``evict_last``)."""
    import triton
    import triton.language as tl

    @triton.jit
    def read(x_ptr, out_ptr, n, BLOCK: tl.constexpr, HINT: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        v = tl.load(x_ptr + offs, mask=offs < n, other=0, eviction_policy=HINT)
        tl.store(out_ptr + tl.program_id(0), tl.sum(v, axis=0))
    block = 4096
    n = buf.numel()
    out = torch.empty(triton.cdiv(n, block), dtype=buf.dtype, device="cuda")

    def flush():
        read[(triton.cdiv(n, block),)](buf, out, n, BLOCK=block, HINT=hint)
    return flush


def _touching_pages(torch, after_fill):
    """``after_fill`` whose flush also reads one element per 64 KiB of the
    weight (every case: cold, hot and after a fill see the same
    translations cached)."""
    def run(b, kern, consume, weight, waits, **kw):
        flat = weight.reshape(-1)
        idx = torch.arange(0, flat.numel(), 65536 // flat.element_size(), device="cuda")
        sink = torch.empty(idx.numel(), dtype=flat.dtype, device="cuda")
        flush = b.flush

        def flush_and_touch():
            flush()
            torch.index_select(flat, 0, idx, out=sink)
        b.flush = flush_and_touch
        try:
            return after_fill(b, kern, consume, weight, waits, **kw)
        finally:
            b.flush = flush
    return run


def _graphed(torch, fill_then_wait):
    """``timing._fill_then_wait`` whose fill + wait (and, with a side stream,
    the fork and join) is captured once per (kernel, table, wait) into a CUDA
    graph and replayed, as the decode step launches its fills."""
    graphs = {}

    def make(b, kern, table, wait, stream_handle, fill_stream):
        key = (id(kern), table.data_ptr(), wait, fill_stream is not None)
        if key not in graphs:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                fill_then_wait(b, kern, table, wait,
                               torch.cuda.current_stream().cuda_stream, fill_stream)()
            graphs[key] = g
        return graphs[key].replay
    return make


def _shapes(specs: list[str], base: dict) -> dict:
    """``--shape`` values -> ``{name: shape}``, each over the base shape of its
    mode (``line``: bulk's). Exits with a message naming the bad value."""
    usage = (f"want NAME:mode=MODE[,grid=N,threads=N,chunk=N,stages=N,policy=P] with MODE "
             f"one of {sorted(base) + ['line']}, P one of {['none', *CACHE_POLICIES]} and "
             "each N an integer >= 1")
    out = {}
    for spec in specs:
        name, _, rest = spec.partition(":")
        items = [x.partition("=") for x in rest.split(",") if x]
        kv = {k: v for k, eq, v in items if eq}
        mode, policy = kv.pop("mode", None), kv.pop("policy", None)
        ok = (name and len(kv) + 1 + (policy is not None) == len(items)
              and set(kv) <= {"grid", "threads", "chunk", "stages"}
              and (mode in base or mode == "line")
              and policy in (None, "none", *CACHE_POLICIES)
              and all(v.isdigit() and int(v) >= 1 for v in kv.values()))
        if not ok:
            sys.exit(f"fill_wait_probe: --shape {spec!r}: {usage}")
        if name in out or len({k for k, _, _ in items}) != len(items):
            sys.exit(f"fill_wait_probe: --shape {spec!r}: a name or key given twice")
        out[name] = {**base.get(mode, {**base["bulk"], "mode": mode}),
                     **{k: int(v) for k, v in kv.items()}}
        if policy is not None:
            out[name]["policy"] = policy
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--waits", default="0,40,200,400")
    ap.add_argument("--sizes", default="16,32,48")
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--touch-pages", action="store_true",
                    help="after every flush, read one element per 64 KiB of the weight "
                         "(32 KB of lines per 16 MB) so its address translations are "
                         "cached: is a dropped prefetch a TLB miss?")
    ap.add_argument("--flush", choices=("normal", "evict_first", "evict_last"),
                    default="normal",
                    help="cache hint of the 1 GiB flush's loads (a Triton read): what the "
                         "L2 holds when the fill starts; normal = the profile's torch.sum")
    ap.add_argument("--fill-stream", choices=("same", "side"), default="same",
                    help="side: fork the fill onto a side stream while the wait spins "
                         "on the main stream, join before the consumer (a decode step's "
                         "arrangement); same: all in order on one stream (the profile's)")
    ap.add_argument("--graph", action="store_true",
                    help="launch each fill + wait (with --fill-stream side: and its fork and "
                         "join) as a captured CUDA graph, as the decode step does")
    ap.add_argument("--shape", action="append", default=[], metavar="NAME:KEY=V,...",
                    help="probe this kernel shape instead of the h200 profile's (repeatable): "
                         "mode and any of grid, threads, chunk, stages over the profile's "
                         "shape of that mode (line: bulk's), and policy (a cache policy, "
                         "default evict_last); e.g. bulk-g16:mode=bulk,grid=16")
    ap.add_argument("--out", required=True)
    ap.add_argument("--md-out", required=True)
    a = ap.parse_args()
    from l2sched.device import load_device
    prof = load_device("h200")  # bad --shape values are reported before the GPU is asked for
    shapes = {m: {"mode": m, "grid": fm.grid, "threads": fm.threads, "chunk": fm.chunk,
                  "stages": fm.stages} for m, fm in sorted(prof.fill_modes.items())}
    if a.shape:
        shapes = _shapes(a.shape, shapes)
    import torch

    import l2sched.profile.probes as P
    from l2sched.bench.timing import TimingBench
    if not torch.cuda.is_available():
        print("fill_wait_probe: needs a CUDA GPU", file=sys.stderr)
        return 2
    if a.fill_stream == "side":
        P.after_fill = functools.partial(P.after_fill, fill_stream=torch.cuda.Stream())
    if a.graph:
        import l2sched.bench.timing as T
        T._fill_then_wait = _graphed(torch, T._fill_then_wait)
    if a.touch_pages:
        P.after_fill = _touching_pages(torch, P.after_fill)
    bench = TimingBench(torch, a.reps)
    if a.flush != "normal":
        bench.flush = _hinted_flush(torch, bench.flush_buf, a.flush)
    P.FILL_WAITS = tuple(int(x) for x in a.waits.split(","))
    P.FILL_SIZES = tuple(int(x) for x in a.sizes.split(","))
    ctx = SimpleNamespace(torch=torch, bench=bench, fill_shapes=shapes,
                          quick=False, progress=SimpleNamespace(step=lambda *_: None))
    res = P.probe_fill(ctx)
    lines = ["| kernel | MB | launch-to-exit us | " + " | ".join(
        f"landed after {w} us" for w in P.FILL_WAITS) + " |",
        "|---|---|---|" + "---|" * len(P.FILL_WAITS)]
    for mode, rec in res.items():
        for row in rec.get("rows", []):
            cells = [row["waits"][str(w)]["landed"] for w in P.FILL_WAITS]
            lines.append(f"| {mode} | {row['mb']} | {row['launch_to_exit_us']['median']:.1f} | "
                         + " | ".join("-" if c is None else f"{c:.2f}" for c in cells) + " |")
    md = ("# Landed fraction after longer waits (lab/experiments/fill_wait_probe.py)\n\n"
          f"GPU: {torch.cuda.get_device_name(0)}; {a.reps} rounds; the consumer is an "
          "M=8 GEMM over the filled weight (l2sched profile's fill probe); the fill "
          + ("on a side stream beside the wait, joined before the consumer"
             if a.fill_stream == "side" else "in order on the consumer's stream")
          + ("; every flush followed by a read of one element per 64 KiB of the weight"
             if a.touch_pages else "")
          + (f"; the flush's loads hinted {a.flush}" if a.flush != "normal" else "")
          + ("; each fill + wait replayed as a captured CUDA graph" if a.graph else "")
          + ".\n\n"
          + "\n".join(lines) + "\n")
    print(md)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump({"waits": P.FILL_WAITS, "sizes": P.FILL_SIZES,
                   "fill_stream": a.fill_stream, "touch_pages": a.touch_pages,
                   "flush": a.flush, "graph": a.graph, "shapes": shapes,
                   "fill": res}, f)
    with open(a.md_out, "w", encoding="utf-8") as f:
        f.write(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
